"""Fake quantization as ``ste`` ops: TensorFlow's ``FakeQuantWithMinMaxVars(PerChannel)`` with its own gradient.

The forward of a float32 input is ``tf.quantization.fake_quant_with_min_max_vars`` (``_per_channel`` for a vector
range): the op the TFLite converter reads ranges from to emit int8 kernels. TensorFlow's registered gradient of that
op (``FakeQuantWithMinMaxVarsGradient``) is already the clipped straight-through estimator: dy·1[min' <= x <= max']
for the input, with min' and max' the nudged range, and the sums of dy below min' and above max' for the range. The
rule reuses that gradient op, so ste's op computes exactly what TensorFlow's does, with ste's checks (gradient
shapes and dtypes, forward mode, ``tf.vectorized_map``).

TensorFlow's kernels take float32 only. Other floating dtypes (float16 and bfloat16 under mixed precision, float64)
use the same formula written with ordinary ops in the input's dtype (the range is nudged in float32, then cast), so
activations are never cast back to float32. The nudging is TensorFlow's: scale = (max − min)/(q_max − q_min), zero
point round(q_min − min/scale) clipped to [q_min, q_max], min' = (q_min − zero point)·scale, max' = (q_max − zero
point)·scale, then q = floor((clip(x, min', max') − min')/scale + 1/2)·scale + min'. q_min is 1 with
``narrow_range`` (the symmetric int8 range [−127, 127]), else 0; q_max = 2^bits − 1.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from .._dsl import forward
from .._xla import compiling_with_xla

__all__ = ["fake_quant", "fake_quant_op", "nudged_range"]


def nudged_range(low: tf.Tensor, high: tf.Tensor, *, bits: int, narrow_range: bool) -> tuple[tf.Tensor, ...]:
    """(min', max', scale) in float32, as TensorFlow nudges a range so that 0 is exactly representable."""
    q_min = 1.0 if narrow_range else 0.0
    q_max = float(2**bits - 1)
    lo = tf.cast(low, tf.float32)
    hi = tf.cast(high, tf.float32)
    scale = (hi - lo) / (q_max - q_min)
    scale = tf.where(scale > 0, scale, tf.ones_like(scale))  # TensorFlow's kernels require min < max
    zero_from_min = q_min - lo / scale
    # std::round (half away from zero), as TensorFlow's Nudge
    zero = tf.clip_by_value(tf.sign(zero_from_min) * tf.floor(tf.abs(zero_from_min) + 0.5), q_min, q_max)
    return (q_min - zero) * scale, (q_max - zero) * scale, scale


def _formula(x: tf.Tensor, low: tf.Tensor, high: tf.Tensor, bits: int, narrow_range: bool) -> tf.Tensor:
    n_min, n_max, scale = (tf.cast(t, x.dtype) for t in nudged_range(low, high, bits=bits, narrow_range=narrow_range))
    clamped = tf.clip_by_value(x, n_min, n_max)
    return tf.floor((clamped - n_min) / scale + tf.constant(0.5, x.dtype)) * scale + n_min


def _uses_kernel(x: tf.Tensor, per_channel: bool) -> bool:
    # XLA lowers the per-tensor op and its gradient; the per-channel one is written out there
    return x.dtype == tf.float32 and not (per_channel and compiling_with_xla())


def fake_quant(
    x: tf.Tensor, low: tf.Tensor, high: tf.Tensor, *, bits: int = 8, narrow_range: bool = False
) -> tf.Tensor:
    """x fake-quantized on the nudged range [low, high] (per tensor for scalar bounds, per last axis for vectors)."""
    per_channel = low.shape.rank == 1
    if not _uses_kernel(x, per_channel):
        return _formula(x, low, high, bits, narrow_range)
    lo, hi = tf.cast(low, tf.float32), tf.cast(high, tf.float32)
    if per_channel:
        return tf.quantization.fake_quant_with_min_max_vars_per_channel(
            x, lo, hi, num_bits=bits, narrow_range=narrow_range
        )
    return tf.quantization.fake_quant_with_min_max_vars(x, lo, hi, num_bits=bits, narrow_range=narrow_range)


def _range_gradient(values: tf.Tensor, like: tf.Tensor) -> tf.Tensor:
    axes = list(range(values.shape.rank - 1)) if like.shape.rank == 1 else None
    return tf.cast(tf.reduce_sum(tf.cast(values, tf.float32), axis=axes), like.dtype)


def fake_quant_vjp(
    dy: tf.Tensor, x: tf.Tensor, low: tf.Tensor, high: tf.Tensor, *, bits: int = 8, narrow_range: bool = False
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """TensorFlow's gradient of fake quantization (the clipped straight-through estimator): dy·1[min' <= x <= max']
    for x, Σ dy·1[x < min'] for min and Σ dy·1[x > max'] for max (per channel for vector bounds)."""
    per_channel = low.shape.rank == 1
    if _uses_kernel(x, per_channel):
        lo, hi = tf.cast(low, tf.float32), tf.cast(high, tf.float32)
        gradient = (
            tf.raw_ops.FakeQuantWithMinMaxVarsPerChannelGradient
            if per_channel
            else tf.raw_ops.FakeQuantWithMinMaxVarsGradient
        )
        dx, dlow, dhigh = gradient(gradients=dy, inputs=x, min=lo, max=hi, num_bits=bits, narrow_range=narrow_range)
        return dx, tf.cast(dlow, low.dtype), tf.cast(dhigh, high.dtype)
    n_min, n_max, _ = (tf.cast(t, x.dtype) for t in nudged_range(low, high, bits=bits, narrow_range=narrow_range))
    below, above = x < n_min, x > n_max
    zero = tf.zeros_like(dy)
    dx = tf.where(below | above, zero, dy)
    return dx, _range_gradient(tf.where(below, dy, zero), low), _range_gradient(tf.where(above, dy, zero), high)


def fake_quant_jvp(
    tangents: tuple[tf.Tensor, ...], x: tf.Tensor, low: tf.Tensor, high: tf.Tensor, **params: Any
) -> tf.Tensor:
    """The same derivative in forward mode: t_x inside the nudged range, t_min below it, t_max above it."""
    tx, tlow, thigh = tangents
    n_min, n_max, _ = (tf.cast(t, x.dtype) for t in nudged_range(low, high, **params))
    below, above = x < n_min, x > n_max
    inside = tf.where(below | above, tf.zeros_like(x), tf.cast(tx, x.dtype))
    return (
        inside
        + tf.where(below, tf.cast(tlow, x.dtype) * tf.ones_like(x), tf.zeros_like(x))
        + tf.where(above, tf.cast(thigh, x.dtype) * tf.ones_like(x), tf.zeros_like(x))
    )


fake_quant_op = forward(fake_quant).backward(fake_quant_vjp, jvp=fake_quant_jvp)
