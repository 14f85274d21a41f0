"""Safe parsing of surrogate spec strings such as ``"sigmoid_surrogate(beta=4.0)"``.

The string is parsed with :mod:`ast` and only a name, optionally called with literal numbers, strings,
``True``/``False``/``None`` and (nested at most twice) tuples or lists of those, is accepted. Nothing is ever
evaluated: attribute access, calls inside arguments, lambdas, f-strings, subscripts, operators other than a sign
on a number, and names other than the outer one are all rejected with :class:`ste.errors.SpecError`.
"""

from __future__ import annotations

import ast
from typing import Any

from ..errors import SpecError

__all__ = ["MAX_SPEC_LENGTH", "parse_spec"]

#: Longer specs are rejected before parsing (a real spec is a name and a few numbers).
MAX_SPEC_LENGTH = 500
_MAX_CONTAINER_DEPTH = 2


def _fail(spec: str, why: str) -> SpecError:
    shown = spec if len(spec) <= 80 else spec[:77] + "..."
    return SpecError(
        f"invalid surrogate spec {shown!r}: {why}. Expected a registered name, optionally called with literal "
        f"arguments, e.g. 'straight_through' or 'sigmoid_surrogate(beta=4.0)'."
    )


def _literal(node: ast.expr, spec: str, depth: int = 0) -> Any:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, (bool, int, float, str)) or node.value is None:
            return node.value
        raise _fail(spec, f"{type(node.value).__name__} literals are not accepted")
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = node.operand
        if (
            isinstance(operand, ast.Constant)
            and isinstance(operand.value, (int, float))
            and not isinstance(operand.value, bool)
        ):
            return -operand.value if isinstance(node.op, ast.USub) else operand.value
        raise _fail(spec, "a sign may only precede a number")
    if isinstance(node, (ast.Tuple, ast.List)):
        if depth >= _MAX_CONTAINER_DEPTH:
            raise _fail(spec, "containers nested too deeply")
        items = [_literal(item, spec, depth + 1) for item in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    kind = type(node).__name__
    hint = {
        "Name": "bare names are not values (quote strings)",
        "Call": "calls inside arguments are not allowed",
        "Attribute": "attribute access is not allowed",
        "Lambda": "lambdas are not allowed",
        "JoinedStr": "f-strings are not allowed",
        "BinOp": "arithmetic is not allowed; write the number",
        "Subscript": "subscripts are not allowed",
    }.get(kind, f"{kind} expressions are not allowed")
    raise _fail(spec, hint)


def parse_spec(spec: str) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
    """Split ``"name(arg, key=value)"`` into ``(name, args, kwargs)`` without evaluating anything.

    Raises :class:`ste.errors.SpecError` for anything but a name optionally called with literal arguments.
    """
    if not isinstance(spec, str):
        raise SpecError(f"a surrogate spec must be a string; received {type(spec).__name__} {spec!r}.")
    if len(spec) > MAX_SPEC_LENGTH:
        raise _fail(spec, f"it is {len(spec)} characters long (at most {MAX_SPEC_LENGTH})")
    text = spec.strip()
    if not text:
        raise _fail(spec, "it is empty")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        raise _fail(spec, f"it is not valid syntax ({type(error).__name__})") from None
    body = tree.body
    if isinstance(body, ast.Name):
        return body.id, (), {}
    if not isinstance(body, ast.Call):
        raise _fail(spec, f"a {type(body).__name__} expression is not a name or a call")
    if not isinstance(body.func, ast.Name):
        raise _fail(spec, "only a plain registered name may be called (no attributes or nested calls)")
    args: list[Any] = []
    for arg in body.args:
        if isinstance(arg, ast.Starred):
            raise _fail(spec, "*args are not allowed")
        args.append(_literal(arg, spec))
    kwargs: dict[str, Any] = {}
    for keyword in body.keywords:
        if keyword.arg is None:
            raise _fail(spec, "**kwargs are not allowed")
        if keyword.arg in kwargs:
            raise _fail(spec, f"parameter '{keyword.arg}' is given twice")
        kwargs[keyword.arg] = _literal(keyword.value, spec)
    return body.func.id, tuple(args), kwargs
