"""Compiling a forward function and a rule into one ``tf.custom_gradient`` op.

Only tensors are passed positionally to the custom-gradient function; hyperparameters are bound by closure, so
they behave the same in eager mode, in ``tf.function`` and under XLA (TensorFlow turns positional Python numbers
into tensors in graph mode and mishandles keyword arguments). The gradient closure keeps the forward's inputs alive
only when the rule needs them (``identity`` and ``zero`` only need shapes).

Where TensorFlow ignores custom gradients, forward-mode autodiff (``_forwardmode.py``) and ``tf.vectorized_map``
(``_vectorized.py``), the rule rebuilds the op from ordinary differentiable ops instead (``Rule.rebuild``). The
check costs one C call per eager call and nothing in a traced graph: without an accumulator or ``pfor`` the graph is
exactly the ``tf.custom_gradient`` one.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

from ..errors import CallError, InputError
from ._forwardmode import FORWARD_MODE, under_forward_accumulator
from ._gradients import check_gradients, input_spec
from ._rules import Rule, after_kept
from ._vectorized import VECTORIZED_MAP, in_vectorized_map

__all__ = ["compile_op"]


# The signature of the gradient closures below: upstream gradients only, no ``variables`` keyword.
_GRAD_SIGNATURE = inspect.signature(lambda *upstream: None)


def _op_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.\-]", "_", name).strip("_")
    return f"ste_{cleaned}" if cleaned else "ste_op"


def _check_outputs(result: Any, label: str) -> None:
    flat = tf.nest.flatten(result)
    if not flat:
        raise CallError(f"{label}: the forward function returned no tensor ({result!r}).")
    for index, leaf in enumerate(flat):
        if not isinstance(leaf, tf.Tensor):
            raise CallError(
                f"{label}: output {index} of the forward function is a {type(leaf).__name__}; expected a tf.Tensor. "
                f"Fix: build the output with TensorFlow ops on the inputs."
            )
        if not leaf.dtype.is_floating:
            raise CallError(
                f"{label}: output {index} of the forward function has dtype {leaf.dtype.name}; an ste op must return "
                f"floating-point tensors so that a gradient can flow. Fix: cast it, e.g. tf.cast(x > 0, x.dtype)."
            )


def _local(x: tf.Tensor) -> tf.Tensor:
    """``x`` as a tensor of the graph being built (captured into it when it comes from an enclosing graph).

    The gradient closure keeps the inputs; a tensor of an outer graph there makes ``tf.cond``'s gradient under a
    persistent tape in ``tf.function`` fail (``cond_v2._resolve_grad_inputs`` asserts that every captured tensor
    belongs to the branch or its direct parent; a raw ``tf.custom_gradient`` fails the same way). An identity in the
    current graph captures it once, as any op of the branch would.
    """
    graph = tf.compat.v1.get_default_graph()
    if getattr(x, "graph", graph) is graph:
        return x
    return tf.identity(x)


def compile_op(
    forward_fn: Callable[..., Any], rule: Rule, kwargs: Mapping[str, Any], name: str, label: str
) -> Callable[..., Any]:
    """A function of positional tensors computing ``forward_fn(*xs, **kwargs)`` with ``rule`` as its gradient."""
    bound = dict(kwargs)
    shape_hint = (
        "Registry surrogates need an elementwise forward (output shape = input shape); for another forward use a "
        "rule rule(dy, *inputs) or .backward_like(g)."
        if rule.elementwise
        else ""
    )

    needs_inputs = rule.needs_inputs  # fixed for a rule: read once, not on every call

    def op(*xs: tf.Tensor) -> tuple[Any, Callable[..., Any]]:
        # What the backward keeps first: the forward then reads its inputs only once a packed mask exists (see
        # ste._core._rules.after_kept), so that a chain of ops never holds more than one input waiting for its mask.
        saved = rule.saved_for_backward(xs, bound) if needs_inputs else None
        result = forward_fn(*after_kept(xs, saved), **bound)
        if not (isinstance(result, tf.Tensor) and result.dtype.is_floating):  # one floating tensor passes at once
            _check_outputs(result, label)
        rule.check_outputs(xs, result, label)
        multiple = not isinstance(result, tf.Tensor)
        specs = [input_spec(x) for x in xs]

        def grad(*upstream: tf.Tensor) -> list[tf.Tensor | None]:
            dy = tf.nest.pack_sequence_as(result, list(upstream)) if multiple else upstream[0]
            return check_gradients(rule.gradients(dy, saved, specs, bound), specs, label, shape_hint)

        # Eagerly, tf.custom_gradient reads grad's signature on every call (whether it takes ``variables``);
        # a precomputed one spares that inspection.
        grad.__signature__ = _GRAD_SIGNATURE  # type: ignore[attr-defined]
        return result, grad

    op.__name__ = _op_name(name)
    custom = tf.custom_gradient(op)

    def call(*xs: tf.Tensor) -> Any:
        # Where TensorFlow ignores custom gradients, rebuild the op from ordinary ops (or raise a RuleError).
        if under_forward_accumulator(xs):
            return rule.rebuild(forward_fn, bound, xs, label, FORWARD_MODE)
        if not tf.executing_eagerly():
            if in_vectorized_map():
                return rule.rebuild(forward_fn, bound, xs, label, VECTORIZED_MAP)
            xs = tuple(_local(x) for x in xs)
        try:
            return custom(*xs)
        except TypeError as error:
            if "argument 'variables'" not in str(error):
                raise
            raise InputError(
                f"{label}: the forward function reads trainable variable(s) that are not positional inputs, so "
                f"no gradient rule covers them ({error}). Fix: pass each variable positionally, op(x, v), and return "
                f"a gradient for it from the rule (a registry surrogate covers one input only); or make it "
                f"non-trainable."
            ) from None

    return call
