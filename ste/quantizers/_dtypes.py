"""Whether a multi-bit quantizer's levels fit the dtype of its input, and the dtype its arithmetic runs in.

A quantizer's output has its input's dtype. Its constants (``2^bits − 1``, a range end, PACT's α) and its output
levels must be finite and distinct in that dtype, or the output is NaN, inf or a collapsed grid:
``DoReFa(bits=16)`` on float16 computes ``x·65535``, and 65535 overflows float16 (largest 65504), so every output
is NaN. :func:`check_levels` refuses such a quantizer when it is traced (or called eagerly) for that dtype, with a
:class:`ste.errors.ParameterError` naming the quantizer, the dtype, the offending constant and the largest ``bits`` (or
range) that fits. It is checked once per configuration and dtype (cached).

:func:`wide` is the dtype the arithmetic runs in: float32 for float16 and bfloat16 inputs (the result is rounded
back once), so that ``x·n``, ``round`` and ``low + k·Δ`` are not rounded at every step (bfloat16's
``−1e5 + k·862.7`` loses the level entirely). float32 and float64 inputs compute in their own dtype.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from ..errors import ParameterError
from ..registry._numerics import smallest_normal

__all__ = ["Levels", "check_levels", "wide"]

_HALF = (tf.float16, tf.bfloat16)


def wide(dtype: tf.DType) -> tf.DType:
    """The dtype a quantizer computes in for inputs of ``dtype``: float32 for half precision, else ``dtype``."""
    return tf.float32 if dtype in _HALF else dtype


def _cast(values: np.ndarray, dtype: tf.DType) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(values, np.float64).astype(dtype.as_numpy_dtype).astype(np.float64)


@functools.lru_cache(maxsize=1024)
def _problem(dtype_name: str, low: float, high: float, count: int, constants: tuple[tuple[str, float], ...]) -> str:
    """Why ``count`` evenly spaced levels from ``low`` to ``high`` (and ``constants``) do not fit; "" if they do."""
    dtype = tf.as_dtype(dtype_name)
    compute = wide(dtype)
    largest = float(compute.max)
    for field, number in constants:
        cast = float(_cast(np.array([number]), compute)[0])
        if not np.isfinite(cast) or (number != 0 and abs(cast) < smallest_normal(compute)):
            return (
                f"its constant {field} = {number:.7g} is not representable in {compute.name}, the dtype it computes "
                f"in for {dtype.name} inputs (normal magnitudes {smallest_normal(compute):.3g} to {largest:.3g}), so "
                f"the output would be NaN or inf"
            )
    levels = low + (high - low) * np.arange(count, dtype=np.float64) / max(count - 1, 1)
    held = _cast(levels, dtype)
    if not np.all(np.isfinite(held)):
        return (
            f"its output levels reach {max(abs(low), abs(high)):.7g}, beyond {dtype.name}'s largest number "
            f"{float(dtype.max):.7g}, so the output would be inf"
        )
    distinct = len(np.unique(held))
    if distinct < count:
        return (
            f"{dtype.name} holds only {distinct} distinct values of its {count} output levels from {low:.7g} to "
            f"{high:.7g}, so neighbouring levels would merge"
        )
    tiny = smallest_normal(dtype)
    if np.any((levels != 0) & (np.abs(held) < tiny)):
        return f"its output levels (step {(high - low) / max(count - 1, 1):.3g}) underflow {dtype.name}"
    return ""


class Levels(NamedTuple):
    """The output grid of a quantizer at one bit width: ``size`` evenly spaced levels from ``low`` to ``high``, and
    the constants its arithmetic uses (name → value)."""

    low: float
    high: float
    size: int
    constants: Mapping[str, float]


def _why(dtype: tf.DType, levels: Levels) -> str:
    constants = tuple((k, float(v)) for k, v in levels.constants.items())
    return _problem(dtype.name, float(levels.low), float(levels.high), int(levels.size), constants)


def check_levels(owner: object, dtype: tf.DType, *, bits: int, levels_for_bits: Callable[[int], Levels]) -> None:
    """Raise :class:`ste.errors.ParameterError` unless the levels of ``bits`` (``levels_for_bits(bits)``) fit ``dtype``.

    ``owner`` is the quantizer (shown by its repr); the message names the largest ``bits`` whose levels fit, if any.
    """
    dtype = tf.as_dtype(dtype)
    if not dtype.is_floating:
        return
    why = _why(dtype, levels_for_bits(bits))
    if not why:
        return
    smaller = next((b for b in range(bits - 1, 0, -1) if not _why(dtype, levels_for_bits(b))), None)
    fits = "" if smaller is None else f"use bits <= {smaller} for {dtype.name} inputs, or "
    raise ParameterError(
        f"{owner!r} on {dtype.name} input: {why}. Fix: {fits}compute this quantizer in float32 (cast its input with "
        f"tf.cast(x, tf.float32), or give the layer dtype='float32' instead of a mixed_float16/mixed_bfloat16 "
        f"policy){'' if smaller is not None else ', or choose constants within the range above'}."
    )
