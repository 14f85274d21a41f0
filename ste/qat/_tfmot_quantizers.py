"""TFMOT's quantizers (``tfmot.quantization.keras.quantizers``) as ste quantizers, with TFMOT's arguments and ranges.

Each is a Keras layer (a :class:`ste.quantizers.Quantizer`) that owns its range variables, for a
:class:`ste.qat.QuantizeConfig` to return; fake quantization is :func:`ste.qat.fake_quant_op` on the range below.

* ``symmetric=True`` widens [min, max] as TFMOT's ``quant_ops`` does: with r = −1 (``narrow_range``) or
  r = −(2^b − 2)/2^b, min ← min(min, max/r) and max ← max(max, min·r) (8 bits, wide: [−m, 127m/128], scale m/128);
  ``symmetric=False`` takes min(min, 0) and max(max, 0).
* :class:`LastValueQuantizer`: the range of the tensor itself, each call (per last axis with ``per_axis``). TFMOT
  stores the last training batch's range in variables; on a weight the two are the same number once a training
  step has run on it (here it is never stale). The range passes no gradient. A symmetric range holds every element
  (its zero point is 2^(b−1), so the nudged bounds are its own), and the gradient is dy, as
  :data:`ste.qat.weight_fake_quant_op`'s: the clipped one would drop the largest element's where rounding puts a
  nudged bound inside it.
* :class:`MovingAverageQuantizer`: min/max start at −6/6 and follow an EMA (decay 0.999, no debiasing) of each
  training batch's range; inference reads them.
* :class:`AllValuesQuantizer`: min/max start at 0 and take the running min and max of every training batch (and 0).
* :class:`FixedQuantizer`: a fixed range [init_min, init_max] (it must contain 0), on ``num_bits`` bits (TFMOT's
  ignores ``num_bits`` and always uses 8).

Under a distribution strategy the training range is the global batch's. ``per_axis=True`` is refused for
MovingAverageQuantizer and AllValuesQuantizer: TFMOT's fails (a scalar range per axis) or ignores it.
"""

from __future__ import annotations

import numbers
from typing import Any

import keras
import tensorflow as tf

from .._common._arguments import check_bool
from .._core._dsl import forward
from ..errors import ParameterError
from ..quantizers import Quantizer
from ..quantizers._base import as_tensor, check_bits
from ._fake_quant import fake_quant, fake_quant_op
from ._quantizers import _global_range, range_variables

__all__ = ["AllValuesQuantizer", "FixedQuantizer", "LastValueQuantizer", "MovingAverageQuantizer"]


def symmetric_range(low: tf.Tensor, high: tf.Tensor, bits: int, narrow_range: bool) -> tuple[tf.Tensor, tf.Tensor]:
    """TFMOT's symmetric widening of [low, high] (see the module docstring)."""
    ratio = -1.0 if narrow_range else -((1 << bits) - 2) / (1 << bits)
    return tf.minimum(low, high / ratio), tf.maximum(high, low * ratio)


def _range_dtype(x: tf.Tensor) -> tf.DType:
    """The dtype a tensor's own range is taken in: float64 for float64 (float32 would round its ends inward, and
    clamp its largest elements), else float32."""
    return tf.float64 if x.dtype == tf.float64 else tf.float32


def _own_symmetric_range_fake_quant(x: tf.Tensor, *, bits: int, narrow_range: bool, per_axis: bool) -> tf.Tensor:
    """x fake-quantized on the symmetric widening of its own range (per last axis with ``per_axis``)."""
    stats = tf.cast(x, _range_dtype(x))
    axes = list(range(stats.shape.rank - 1)) if per_axis else None
    low, high = symmetric_range(tf.reduce_min(stats, axis=axes), tf.reduce_max(stats, axis=axes), bits, narrow_range)
    return fake_quant(x, low, high, bits=bits, narrow_range=narrow_range)


_own_symmetric_range_op = forward(_own_symmetric_range_fake_quant).backward("identity")


class _RangeQuantizer(Quantizer):
    """num_bits, per_axis, symmetric, narrow_range; the batch range and the fake quantization."""

    per_axis_supported = True

    def __init__(self, num_bits: int, per_axis: bool, symmetric: bool, narrow_range: bool, **kwargs: Any) -> None:
        owner = f"ste.qat.{type(self).__name__}"
        self.num_bits = check_bits(owner, num_bits, low=2, high=8, name="num_bits")
        self.per_axis = check_bool(owner, "per_axis", per_axis)
        self.symmetric = check_bool(owner, "symmetric", symmetric)
        self.narrow_range = check_bool(owner, "narrow_range", narrow_range)
        if self.per_axis and not self.per_axis_supported:
            raise ParameterError(
                f"{owner}: per_axis=True is not supported (TFMOT's {type(self).__name__} keeps one range per tensor: "
                f"it fails or ignores it). Fix: per_axis=False, or ste.qat.LastValueQuantizer(per_axis=True) for "
                f"a weight."
            )
        self.bits = self.precision = self.num_bits
        super().__init__(**kwargs)

    def batch_range(
        self, x: tf.Tensor, global_batch: bool, dtype: tf.DType = tf.float32
    ) -> tuple[tf.Tensor, tf.Tensor]:
        stats = tf.cast(tf.stop_gradient(x), dtype)
        axes = list(range(stats.shape.rank - 1)) if self.per_axis else None
        low, high = tf.reduce_min(stats, axis=axes), tf.reduce_max(stats, axis=axes)
        if global_batch:
            low, high = _global_range(low, high)
        if self.symmetric:
            return symmetric_range(low, high, self.num_bits, self.narrow_range)
        return tf.minimum(low, 0.0), tf.maximum(high, 0.0)

    def fake_quantize(self, x: tf.Tensor, low: tf.Tensor, high: tf.Tensor) -> tf.Tensor:
        return fake_quant_op(x, low, high, bits=self.num_bits, narrow_range=self.narrow_range)

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "num_bits": self.num_bits,
            "per_axis": self.per_axis,
            "symmetric": self.symmetric,
            "narrow_range": self.narrow_range,
        }


@keras.saving.register_keras_serializable(package="ste")
class LastValueQuantizer(_RangeQuantizer):
    """TFMOT's ``LastValueQuantizer(num_bits, per_axis, symmetric, narrow_range)``: the range of the tensor itself
    (see the module docstring); for weights."""

    def call(self, inputs: Any) -> tf.Tensor:
        x = as_tensor(inputs, self)
        if self.symmetric:  # every element is inside: gradient dy (see the module docstring)
            return _own_symmetric_range_op(
                x, bits=self.num_bits, narrow_range=self.narrow_range, per_axis=self.per_axis
            )
        low, high = self.batch_range(x, global_batch=False, dtype=_range_dtype(x))
        return self.fake_quantize(x, low, high)


class _StatefulRange(_RangeQuantizer):
    initial = (-6.0, 6.0)
    per_axis_supported = False

    def build(self, input_shape: Any) -> None:
        self.min, self.max = range_variables(self, *self.initial)
        self.built = True

    def moved(self, low: tf.Tensor, high: tf.Tensor, batch_low: tf.Tensor, batch_high: tf.Tensor) -> Any:
        raise NotImplementedError

    def call(self, inputs: Any, training: Any = None) -> tf.Tensor:
        x = as_tensor(inputs, self)
        low, high = self.min.value, self.max.value
        if training:
            low, high = self.moved(low, high, *self.batch_range(x, global_batch=True))
            self.min.assign(low)
            self.max.assign(high)
        return self.fake_quantize(x, low, high)


@keras.saving.register_keras_serializable(package="ste")
class MovingAverageQuantizer(_StatefulRange):
    """TFMOT's ``MovingAverageQuantizer(num_bits, per_axis, symmetric, narrow_range)``: an EMA (decay 0.999) of the
    training batches' ranges, from −6/6 (see the module docstring); for activations."""

    decay = 0.999

    def moved(self, low: tf.Tensor, high: tf.Tensor, batch_low: tf.Tensor, batch_high: tf.Tensor) -> Any:
        return low * self.decay + batch_low * (1.0 - self.decay), high * self.decay + batch_high * (1.0 - self.decay)


@keras.saving.register_keras_serializable(package="ste")
class AllValuesQuantizer(_StatefulRange):
    """TFMOT's ``AllValuesQuantizer(num_bits, per_axis, symmetric, narrow_range)``: the running min and max of every
    training batch and 0 (see the module docstring)."""

    initial = (0.0, 0.0)

    def moved(self, low: tf.Tensor, high: tf.Tensor, batch_low: tf.Tensor, batch_high: tf.Tensor) -> Any:
        return tf.minimum(tf.minimum(low, batch_low), 0.0), tf.maximum(tf.maximum(high, batch_high), 0.0)


def check_fixed_range(owner: str, low: Any, high: Any, what: str = "") -> tuple[float, float]:
    """``(low, high)`` as floats with low ≤ 0 ≤ high and low < high, else :class:`ste.errors.ParameterError`."""
    for value in (low, high):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not float(value) == float(value):
            raise ParameterError(f"{owner}: the {what}range bounds must be real numbers; received {value!r}.")
    low, high = float(low), float(high)
    if not low <= 0.0 <= high or low == high:
        raise ParameterError(
            f"{owner}: the {what}range [{low}, {high}] must contain 0 and not be empty (TFLite's zero point is an "
            f"integer inside the range: a range without 0 would be shifted to reach it). Fix: e.g. [0, 1] for "
            f"pixels scaled to [0, 1], [-1, 1], or [0, 255]."
        )
    return low, high


@keras.saving.register_keras_serializable(package="ste")
class FixedQuantizer(Quantizer):
    """TFMOT's ``FixedQuantizer(num_bits, init_min, init_max, narrow_range)``: fake quantization on the fixed range
    [init_min, init_max] (it must contain 0), on ``num_bits`` bits."""

    def __init__(self, num_bits: int, init_min: float, init_max: float, narrow_range: bool, **kwargs: Any) -> None:
        owner = "ste.qat.FixedQuantizer"
        self.num_bits = check_bits(owner, num_bits, low=2, high=8, name="num_bits")
        self.init_min, self.init_max = check_fixed_range(owner, init_min, init_max)
        self.narrow_range = check_bool(owner, "narrow_range", narrow_range)
        self.bits = self.precision = self.num_bits
        super().__init__(**kwargs)

    def call(self, inputs: Any) -> tf.Tensor:
        x = as_tensor(inputs, self)
        low, high = tf.constant(self.init_min, tf.float32), tf.constant(self.init_max, tf.float32)
        return fake_quant_op(x, low, high, bits=self.num_bits, narrow_range=self.narrow_range)

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "num_bits": self.num_bits,
            "init_min": self.init_min,
            "init_max": self.init_max,
            "narrow_range": self.narrow_range,
        }
