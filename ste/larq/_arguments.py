"""Checks of larq's arguments (numbers and switches), with ste's errors and messages."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from ..errors import ParameterError

__all__ = ["check_bool", "check_number"]


def check_bool(owner: str, name: str, value: Any) -> bool:
    """``value`` as a Python bool when it is a ``bool`` or ``numpy.bool_``; else :class:`ste.errors.ParameterError`
    (``bool("no")`` is True, so a non-bool is refused rather than read with ``bool()``)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ParameterError(
        f"{owner}: {name} must be True or False; received {_short(value)} ({type(value).__name__}). "
        f"Fix: pass {name}=True or {name}=False."
    )


def check_number(owner: str, field: str, value: Any, *, positive: bool = False) -> float:
    """``value`` as a finite float (> 0 when ``positive``) or :class:`ste.errors.ParameterError`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not _finite(value):
        raise ParameterError(f"{owner}: {field} must be a finite number; received {_short(value)}.")
    if positive and float(value) <= 0:
        raise ParameterError(f"{owner}: {field} must be > 0; received {value!r}.")
    return float(value)


def _finite(value: numbers.Real) -> bool:
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an int beyond float range
        return False


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"
