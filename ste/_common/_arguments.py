"""Validating arguments: numbers (:func:`check_number`) and switches. Every boolean argument of ``ste`` is a
real ``bool`` (or numpy bool), never truthy.

``bool("no")`` is True, so a switch read with ``bool()`` silently turns ``detach_reset="no"`` into True. Every
constructor and function of the package that takes a switch checks it here, at the call: :func:`check_bool` for one
argument, :func:`check_bool_arguments` for every argument whose default in a signature is a bool.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..errors import ParameterError

__all__ = ["check_bool", "check_bool_arguments", "check_number", "short_repr"]


def check_bool(owner: str, name: str, value: Any) -> bool:
    """``value`` as a Python bool when it is a ``bool`` or ``numpy.bool_``; else :class:`ste.errors.ParameterError`."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    shown = repr(value) if len(repr(value)) <= 40 else f"{type(value).__name__} {repr(value)[:30]}..."
    raise ParameterError(
        f"{owner}: {name} must be True or False; received {shown} ({type(value).__name__}). A non-bool is refused "
        f"rather than read with bool(), which makes any non-empty string such as 'no' or 'False' mean True. "
        f"Fix: pass {name}=True or {name}=False."
    )


def check_bool_arguments(
    owner: str, target: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> None:
    """Check every argument of a call to ``target`` whose parameter's default is a bool (see :func:`check_bool`).

    Arguments that do not bind to the signature are left to ``target`` itself (it raises its own error).
    """
    try:
        signature = inspect.signature(target)
        bound = signature.bind_partial(*args, **kwargs)
    except (TypeError, ValueError):
        return
    for name, value in bound.arguments.items():
        parameter = signature.parameters[name]
        if isinstance(parameter.default, bool) and parameter.kind is not inspect.Parameter.VAR_KEYWORD:
            check_bool(owner, name, value)


def check_number(owner: str, field: str, value: Any, *, positive: bool = False) -> float:
    """``value`` as a finite float (> 0 when ``positive``) or :class:`ste.errors.ParameterError`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not _finite(value):
        raise ParameterError(f"{owner}: {field} must be a finite number; received {short_repr(value)}.")
    if positive and float(value) <= 0:
        raise ParameterError(f"{owner}: {field} must be > 0; received {value!r}.")
    return float(value)


def _finite(value: numbers.Real) -> bool:
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an int beyond float range
        return False


def short_repr(value: Any) -> str:
    """``repr(value)``, cut to its first 20 characters and its length when it is longer than 40 (for messages)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"
