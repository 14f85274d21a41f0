"""Numerical helpers shared by the surrogate entries.

* :func:`elementwise`: float16 and bfloat16 inputs are evaluated in float32 and the result is rounded back once, so
  a half-precision derivative is the correctly rounded float32 value (no intermediate overflow of ``beta·x`` to inf,
  no loss of the few mantissa bits bfloat16 has). float32 and float64 are evaluated in their own precision.
* :func:`saturating_ratio`: ``v / (1 + abs(v))`` without ``inf / inf`` when ``v`` overflows.
* :data:`SAFE_LOGIT`: a bound on ``beta·x`` beyond which every sigmoid-type derivative is exactly 0 in float32 and
  float64; clamping to it keeps ``z·sigmoid(-z)`` from becoming ``inf·0``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import tensorflow as tf

__all__ = ["RATIO_LIMIT", "SAFE_LOGIT", "elementwise", "saturating_ratio", "smallest_normal"]

#: sigmoid(-1e4) is 0 in float32 and float64; a sigmoid-type derivative at |z| >= 1e4 underflows to 0.
SAFE_LOGIT = 1.0e4
#: 1 / (1 + 1e18) rounds to 0 relative to 1 in float32 and float64: v / (1 + abs(v)) is ±1 beyond it.
RATIO_LIMIT = 1.0e18

_HALF = (tf.float16, tf.bfloat16)

S = TypeVar("S")


def elementwise(method: Callable[[S, tf.Tensor], tf.Tensor]) -> Callable[[S, tf.Tensor], tf.Tensor]:
    """Decorate ``derivative``/``primitive``: compute half-precision inputs in float32, return ``x``'s dtype."""

    @functools.wraps(method)
    def wrapper(self: S, x: tf.Tensor) -> tf.Tensor:
        x = tf.convert_to_tensor(x)
        if x.dtype in _HALF:
            return tf.cast(method(self, tf.cast(x, tf.float32)), x.dtype)
        return method(self, x)

    wrapper.widens_half = True  # type: ignore[attr-defined]  # read by Surrogate.compute_dtype
    return wrapper


def saturating_ratio(v: tf.Tensor) -> tf.Tensor:
    """``v / (1 + abs(v))``, in (-1, 1), finite and differentiable for every input including ±inf.

    ``v`` is clamped to ±:data:`RATIO_LIMIT` first, where the ratio already rounds to ±1; the clamp cuts only a
    derivative below 1e-36.
    """
    limit = tf.constant(RATIO_LIMIT, v.dtype)
    v = tf.clip_by_value(v, -limit, limit)
    return v / (1 + tf.abs(v))


def smallest_normal(dtype: tf.DType) -> float:
    """The smallest positive normal number of ``dtype`` (TensorFlow's CPU kernels flush subnormals to zero)."""
    if dtype == tf.bfloat16:
        return float(np.finfo(np.float32).tiny)  # bfloat16 has float32's exponent range
    return float(np.finfo(dtype.as_numpy_dtype).tiny)
