"""Fake quantization as ``ste`` ops: TensorFlow's ``FakeQuantWithMinMaxVars(PerChannel)`` with its gradient.

The forward of a float32 input is ``tf.quantization.fake_quant_with_min_max_vars`` (``_per_channel`` for a vector
range): the op the TFLite converter reads ranges from to emit int8 kernels. Other floating dtypes (float16 and
bfloat16 under mixed precision, float64) use the same formula written with ordinary ops: float64 in float64;
float16 and bfloat16 clamp in their own dtype and find the level in float32 (a half-precision significand cannot
hold 256 levels: bfloat16 would land up to 2.5 steps off), rounding the result to their dtype once.
The nudging is TensorFlow's: scale = (max − min)/(q_max − q_min), zero
point round(q_min − min/scale) (half away from zero) clipped to [q_min, q_max], min' = (q_min − zero point)·scale,
max' = (q_max − zero point)·scale, then q = floor((clip(x, min', max') − min')/scale + 1/2)·scale + min'. q_min is 1
with ``narrow_range`` (the symmetric int8 range [−127, 127]), else 0; q_max = 2^bits − 1. The range is nudged in
float32 (TensorFlow's kernels' precision) for float16, bfloat16 and float32 inputs, in float64 for float64 ones, so
that the clamp and the gradient's mask compare the input with the same bounds in its own dtype. A range of exactly
[0, 0] gives 0 and passes the whole gradient to x, as TensorFlow's kernels do.

:data:`fake_quant_op`'s gradient is TensorFlow's registered one (``FakeQuantWithMinMaxVarsGradient``), the clipped
straight-through estimator: dy·1[min' <= x <= max'] for x, and the sums of dy below min' and above max' for the
range. For TensorFlow's float32 kernel it is that gradient op (so the mask is the kernel's own, whatever grappler
does to a transcription of its arithmetic), with the gradient of its linear map in dy, which TensorFlow does not
register; the other dtypes write it with ordinary ops. Gradients of gradients are therefore exact in every dtype
(they were None in float32).

:data:`weight_fake_quant_op` quantizes a weight on its own symmetric range ±max|w| (per tensor or per channel).
Every weight lies inside that range, so its gradient is dy (the ``identity`` rule). The clipped estimator would
differ only where the nudged bound, rounded to the dtype, falls one unit in the last place below max|w| (about one
range in 400 in float32), and it would drop the largest weight's gradient there.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from .._core._dsl import forward
from .._core._xla import compiling_with_xla
from ..errors import ParameterError

__all__ = ["fake_quant", "fake_quant_op", "nudged_range", "symmetric_fake_quant", "weight_fake_quant_op"]


def nudged_range(
    low: tf.Tensor, high: tf.Tensor, *, bits: int, narrow_range: bool, dtype: tf.DType = tf.float32
) -> tuple[tf.Tensor, ...]:
    """(min', max', scale) in ``dtype`` (float32 as TensorFlow's kernels, or float64), as TensorFlow nudges a range
    so that 0 is exactly representable."""
    q_min = 1.0 if narrow_range else 0.0
    q_max = float(2**bits - 1)
    lo = tf.cast(low, dtype)
    hi = tf.cast(high, dtype)
    # DivNoNan: grappler rewrites a division by a constant as a product with its reciprocal, whose rounding can move
    # the zero point of a range whose zero point is a tie (127.5 for [−2, 2]) away from TensorFlow's kernel's
    scale = tf.math.divide_no_nan(hi - lo, tf.constant(q_max - q_min, dtype))
    scale = tf.where(scale > 0, scale, tf.ones_like(scale))  # TensorFlow's kernels require min < max
    zero_from_min = q_min - lo / scale
    # std::round (half away from zero), as TensorFlow's Nudge: floor(|v|), plus 1 where the fraction (exact) is ≥ 1/2
    magnitude = tf.abs(zero_from_min)
    whole = tf.floor(magnitude)
    rounded = tf.sign(zero_from_min) * (whole + tf.cast(magnitude - whole >= 0.5, dtype))
    zero = tf.clip_by_value(rounded, q_min, q_max)
    return (q_min - zero) * scale, (q_max - zero) * scale, scale


def _wide_nudged(x: tf.Tensor, low: tf.Tensor, high: tf.Tensor, bits: int, narrow_range: bool) -> tuple[tf.Tensor, ...]:
    """(min', max', scale, empty) nudged in float64 for float64 ``x`` and in float32 otherwise, in that dtype;
    ``empty`` marks a [0, 0] range."""
    wide = tf.float64 if x.dtype == tf.float64 else tf.float32
    n_min, n_max, scale = nudged_range(low, high, bits=bits, narrow_range=narrow_range, dtype=wide)
    empty = tf.logical_and(tf.equal(tf.cast(low, wide), 0), tf.equal(tf.cast(high, wide), 0))
    return n_min, n_max, scale, empty


def _nudged(x: tf.Tensor, low: tf.Tensor, high: tf.Tensor, bits: int, narrow_range: bool) -> tuple[tf.Tensor, ...]:
    """:func:`_wide_nudged` with (min', max', scale) in ``x``'s dtype."""
    n_min, n_max, scale, empty = _wide_nudged(x, low, high, bits, narrow_range)
    return tf.cast(n_min, x.dtype), tf.cast(n_max, x.dtype), tf.cast(scale, x.dtype), empty


def _formula(x: tf.Tensor, low: tf.Tensor, high: tf.Tensor, bits: int, narrow_range: bool) -> tf.Tensor:
    wide_min, wide_max, wide_scale, empty = _wide_nudged(x, low, high, bits, narrow_range)
    n_min, n_max, scale = (tf.cast(t, x.dtype) for t in (wide_min, wide_max, wide_scale))
    n_max = tf.where(empty, n_min, n_max)  # a [0, 0] range clamps to 0: TensorFlow's kernels output 0
    clamped = tf.clip_by_value(x, n_min, n_max)  # in x's dtype: the bounds the gradient's mask compares with
    if x.dtype in (tf.float16, tf.bfloat16):
        # 256 levels do not fit in a half-precision significand (bfloat16 keeps 8 bits): the level is found in
        # float32, TensorFlow's kernels' precision, and the result rounded to x's dtype once.
        level = tf.floor((tf.cast(clamped, tf.float32) - wide_min) / wide_scale + 0.5)
        return tf.cast(level * wide_scale + wide_min, x.dtype)
    return tf.floor((clamped - n_min) / scale + tf.constant(0.5, x.dtype)) * scale + n_min


def _uses_kernel(x: tf.Tensor) -> bool:
    """Whether TensorFlow's float32 kernels compute x's fake quantization and its mask. Not under XLA: its lowering
    of the per-tensor op gives NaN for a [0, 0] range (an all-zero kernel), and it has no per-channel one."""
    return x.dtype == tf.float32 and not compiling_with_xla()


def fake_quant(
    x: tf.Tensor, low: tf.Tensor, high: tf.Tensor, *, bits: int = 8, narrow_range: bool = False
) -> tf.Tensor:
    """x fake-quantized on the nudged range [low, high] (per tensor for scalar bounds, per last axis for vectors)."""
    if not _uses_kernel(x):
        return _formula(x, low, high, bits, narrow_range)
    lo, hi = tf.cast(low, tf.float32), tf.cast(high, tf.float32)
    if low.shape.rank == 1:
        return tf.quantization.fake_quant_with_min_max_vars_per_channel(
            x, lo, hi, num_bits=bits, narrow_range=narrow_range
        )
    return tf.quantization.fake_quant_with_min_max_vars(x, lo, hi, num_bits=bits, narrow_range=narrow_range)


def _kernel_gradient(
    dy: tf.Tensor, x: tf.Tensor, low: tf.Tensor, high: tf.Tensor, bits: int, narrow_range: bool
) -> tuple[tf.Tensor, ...]:
    """TensorFlow's gradient op of the float32 kernel: (dy·1[inside], Σ dy below, Σ dy above) in float32."""
    gradient = (
        tf.raw_ops.FakeQuantWithMinMaxVarsPerChannelGradient
        if low.shape.rank == 1
        else tf.raw_ops.FakeQuantWithMinMaxVarsGradient
    )
    lo, hi = tf.cast(low, tf.float32), tf.cast(high, tf.float32)
    return tuple(gradient(gradients=dy, inputs=x, min=lo, max=hi, num_bits=bits, narrow_range=narrow_range))


def _outside(x: tf.Tensor, low: tf.Tensor, high: tf.Tensor, bits: int, narrow_range: bool) -> tuple[tf.Tensor, ...]:
    """(x < min', x > max'): where the forward clamps x (nowhere for a [0, 0] range). For TensorFlow's kernel, read
    from its own gradient op (the nudged range always holds 0, so an element outside it is below it if negative)."""
    if _uses_kernel(x):
        outside = tf.equal(_kernel_gradient(tf.ones_like(x), x, low, high, bits, narrow_range)[0], 0)
        return tf.logical_and(outside, x < 0), tf.logical_and(outside, x > 0)
    n_min, n_max, _, empty = _nudged(x, low, high, bits, narrow_range)
    infinity = tf.constant(float("inf"), x.dtype)
    # scalar (or per-channel) selects: the element-wise comparisons stay two
    return x < tf.where(empty, -infinity, n_min), x > tf.where(empty, infinity, n_max)


def _range_gradient(values: tf.Tensor, like: tf.Tensor) -> tf.Tensor:
    axes = list(range(values.shape.rank - 1)) if like.shape.rank == 1 else None
    wide = tf.float64 if values.dtype == tf.float64 else tf.float32
    return tf.cast(tf.reduce_sum(tf.cast(values, wide), axis=axes), like.dtype)


def _differentiable_kernel_gradient(
    dy: tf.Tensor, x: tf.Tensor, low: tf.Tensor, high: tf.Tensor, bits: int, narrow_range: bool
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """``_kernel_gradient`` of dy with the gradient of its linear map: for cotangents (u, u_min, u_max) of its three
    outputs, u·1[inside] + u_min·1[below] + u_max·1[above] (x and the range get none: the masks are piecewise
    constant)."""

    @tf.custom_gradient  # type: ignore[untyped-decorator]
    def linear(dy: tf.Tensor) -> Any:
        dx, dlow, dhigh = _kernel_gradient(dy, x, low, high, bits, narrow_range)

        def transpose(u: tf.Tensor | None, u_low: tf.Tensor | None, u_high: tf.Tensor | None) -> tf.Tensor:
            result = tf.zeros_like(x) if u is None else _kernel_gradient(u, x, low, high, bits, narrow_range)[0]
            if u_low is not None or u_high is not None:
                below, above = _outside(x, low, high, bits, narrow_range)
                zero = tf.zeros_like(x)
                for mask, u_bound in ((below, u_low), (above, u_high)):
                    if u_bound is not None:
                        result += tf.where(mask, tf.cast(u_bound, x.dtype) + zero, zero)
            return result

        return (dx, tf.cast(dlow, low.dtype), tf.cast(dhigh, high.dtype)), transpose

    dx, dlow, dhigh = linear(dy)
    return dx, dlow, dhigh


def fake_quant_vjp(
    dy: tf.Tensor, x: tf.Tensor, low: tf.Tensor, high: tf.Tensor, *, bits: int = 8, narrow_range: bool = False
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """TensorFlow's gradient of fake quantization (the clipped straight-through estimator): dy·1[min' <= x <= max']
    for x, Σ dy·1[x < min'] for min and Σ dy·1[x > max'] for max (per channel for vector bounds). Linear in dy, and
    differentiable: TensorFlow's gradient op (one fused kernel, for its float32 kernel) gets the gradient of that
    linear map, which its own registration lacks; the other dtypes write it with ordinary ops."""
    if _uses_kernel(x):
        return _differentiable_kernel_gradient(dy, x, low, high, bits, narrow_range)
    below, above = _outside(x, low, high, bits, narrow_range)
    zero = tf.zeros_like(dy)
    dx = tf.where(tf.logical_or(below, above), zero, dy)
    return dx, _range_gradient(tf.where(below, dy, zero), low), _range_gradient(tf.where(above, dy, zero), high)


def fake_quant_jvp(
    tangents: tuple[tf.Tensor, ...], x: tf.Tensor, low: tf.Tensor, high: tf.Tensor, *, bits: int, narrow_range: bool
) -> tf.Tensor:
    """The same derivative in forward mode: t_x inside the nudged range, t_min below it, t_max above it (the masks
    of the backward's, TensorFlow's own for its kernel)."""
    tx, tlow, thigh = tangents
    below, above = _outside(x, low, high, bits, narrow_range)
    inside = tf.where(below | above, tf.zeros_like(x), tf.cast(tx, x.dtype))
    return (
        inside
        + tf.where(below, tf.cast(tlow, x.dtype) * tf.ones_like(x), tf.zeros_like(x))
        + tf.where(above, tf.cast(thigh, x.dtype) * tf.ones_like(x), tf.zeros_like(x))
    )


fake_quant_op = forward(fake_quant).backward(fake_quant_vjp, jvp=fake_quant_jvp)


def symmetric_fake_quant(w: tf.Tensor, *, bits: int = 8, channel_axes: int = 0, narrow_range: bool = True) -> tf.Tensor:
    """``w`` fake-quantized on ±max|w|: over the whole tensor (``channel_axes=0``), or per channel, a channel being
    one index of the last ``channel_axes`` axes taken together: the last axis (``1``: a Dense or convolution kernel,
    output channel last), the last two (``2``: a depthwise kernel ``(h, w, in, multiplier)``, or an EinsumDense
    kernel ``(d, heads, head_dim)``), and so on."""
    if channel_axes == 0:
        m = tf.reduce_max(tf.abs(w))
        return fake_quant(w, -m, m, bits=bits, narrow_range=narrow_range)
    rank = w.shape.rank
    if rank is not None and channel_axes > rank:
        raise ParameterError(
            f"ste.qat.symmetric_fake_quant: channel_axes={channel_axes} takes more axes than the weight has (shape "
            f"{w.shape}). Fix: channel_axes between 0 (per tensor) and {rank}."
        )
    shape = tf.shape(w)
    flat = w if channel_axes == 1 else tf.reshape(w, tf.concat([shape[: rank - channel_axes], [-1]], 0))
    m = tf.reduce_max(tf.abs(flat), axis=list(range(flat.shape.rank - 1)))
    quantized = fake_quant(flat, -m, m, bits=bits, narrow_range=narrow_range)
    return quantized if channel_axes == 1 else tf.reshape(quantized, shape)


weight_fake_quant_op = forward(symmetric_fake_quant).backward("identity")
