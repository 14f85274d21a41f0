"""The two quantizers of the int8 scheme, as ``ste.quantizers.Quantizer`` layers around :data:`fake_quant_op` and
:data:`weight_fake_quant_op`.

* :class:`WeightFakeQuant` (TFMOT's ``LastValueQuantizer(symmetric=True, narrow_range=True)``): the range is
  ±max|w| of the current weights, per tensor or per output channel; stateless (TFMOT stores the last value in
  variables; here it is recomputed from the weights, the same number once they are fixed). Its gradient is dy:
  every weight lies inside its range.
* :class:`ActivationFakeQuant` (TFMOT's ``MovingAverageQuantizer``): asymmetric, per tensor, with non-trainable
  ``min``/``max`` starting at −6/6 that follow an exponential moving average (decay 0.999, no debiasing) of each
  training batch's min(x, 0) and max(x, 0) (under a distribution strategy, of the global batch: the replicas'
  minima and maxima are gathered); inference reads them.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from .._common._arguments import check_number
from ..errors import ParameterError
from ..quantizers import Quantizer
from ..quantizers._base import as_tensor, check_bits
from ._fake_quant import fake_quant, fake_quant_op, weight_fake_quant_op

__all__ = ["ActivationFakeQuant", "WeightFakeQuant"]


def _check_flag(owner: str, field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ParameterError(f"{owner}: {field} must be True or False; received {value!r}.")
    return value


def _global_range(low: tf.Tensor, high: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """The min and max over every replica's batch under a distribution strategy (each replica then assigns the
    same moving average: that of the global batch on one device); unchanged outside one."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return low, high
    gathered = context.all_gather(tf.stack([low, -high])[None], axis=0)  # (replicas, 2)
    smallest = tf.reduce_min(gathered, axis=0)
    return smallest[0], -smallest[1]


def range_variables(layer: keras.layers.Layer, low: float, high: float) -> tuple[Any, Any]:
    """The non-trainable float32 scalars ``min`` and ``max`` of an activation range, starting at ``low`` and
    ``high`` (averaged over replicas, as TFMOT's)."""

    def bound(name: str, value: float) -> Any:
        return layer.add_weight(
            name=name,
            shape=(),
            dtype="float32",
            initializer=keras.initializers.Constant(value),
            trainable=False,
            aggregation="mean",
        )

    return bound("min", low), bound("max", high)


@keras.saving.register_keras_serializable(package="ste")
class WeightFakeQuant(Quantizer):
    """Symmetric fake quantization of a weight on [−m, m], m = max|w| (int8: narrow range [−127, 127]).

    ``channel_axes``: 0 for one range per tensor, 1 for one per index of the last axis (Dense and convolution
    kernels, output channel last), 2 for one per pair of the last two axes (a depthwise kernel
    ``(h, w, in, multiplier)``, whose output channel is in·multiplier, as TFLite quantizes it; an EinsumDense kernel
    ``(d, heads, head_dim)``), k for one per index of the last k axes taken together.
    """

    def __init__(self, bits: int = 8, channel_axes: int = 0, narrow_range: bool = True, **kwargs: Any) -> None:
        self.bits = check_bits("WeightFakeQuant", bits, low=2)
        if not isinstance(channel_axes, int) or isinstance(channel_axes, bool) or channel_axes < 0:
            raise ParameterError(
                f"WeightFakeQuant: channel_axes must be an integer >= 0 (0: per tensor; k: per index of the last k "
                f"axes); received {channel_axes!r}."
            )
        self.channel_axes = int(channel_axes)
        self.narrow_range = _check_flag("WeightFakeQuant", "narrow_range", narrow_range)
        self.precision = self.bits
        super().__init__(**kwargs)

    #: Set by :func:`ste.to_tflite` while it exports a table that TFLite reads with GATHER, which takes 8-bit tables
    #: only: the quantizer then writes its values on the 8-bit grid (see :meth:`_fake_quantize`).
    _on_int8_grid = False

    def call(self, inputs: Any) -> tf.Tensor:
        return self._fake_quantize(as_tensor(inputs))

    def _fake_quantize(self, x: tf.Tensor) -> tf.Tensor:
        """``x`` on this quantizer's grid. The range passes no gradient, as TFMOT's LastValueQuantizer (its min/max
        come through a variable assign), and no weight lies outside it: the gradient is dy (see
        :data:`ste.qat.weight_fake_quant_op`).

        On the 8-bit grid (an export of a ``bits`` < 8 table, per tensor, narrow range): the same values, as an 8-bit
        fake quantization on ±m·127/q (q = 2^(bits−1) − 1), whose step m/q is this quantizer's and whose range holds
        every |x| <= m."""
        if self._on_int8_grid and self.bits < 8:
            m = tf.reduce_max(tf.abs(x)) * ((2**7 - 1) / (2 ** (self.bits - 1) - 1))
            return fake_quant(x, -m, m, bits=8, narrow_range=True)
        return weight_fake_quant_op(x, bits=self.bits, channel_axes=self.channel_axes, narrow_range=self.narrow_range)

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "bits": self.bits,
            "channel_axes": self.channel_axes,
            "narrow_range": self.narrow_range,
        }


@keras.saving.register_keras_serializable(package="ste")
class ActivationFakeQuant(Quantizer):
    """Asymmetric per-tensor fake quantization with moving-average min/max (see the module docstring).

    In a training call the range first moves: min ← decay·min + (1 − decay)·min(batch min, 0), likewise max; the
    batch is then quantized on the new range (as TFMOT does). ``ema_decay=1`` keeps the initial range: the fixed
    output ranges TFLite's int8 kernels use after softmax and sigmoid ([0, 255/256]) and tanh ([−1, 127/128]).
    """

    def __init__(
        self,
        bits: int = 8,
        ema_decay: float = 0.999,
        initial_min: float = -6.0,
        initial_max: float = 6.0,
        narrow_range: bool = False,
        **kwargs: Any,
    ) -> None:
        self.bits = check_bits("ActivationFakeQuant", bits, low=2)
        self.ema_decay = check_number("ActivationFakeQuant", "ema_decay", ema_decay)
        if not 0.0 <= self.ema_decay <= 1.0:
            raise ParameterError(f"ActivationFakeQuant: ema_decay must be in [0, 1]; received {ema_decay!r}.")
        self.initial_min = check_number("ActivationFakeQuant", "initial_min", initial_min)
        self.initial_max = check_number("ActivationFakeQuant", "initial_max", initial_max)
        if not self.initial_min <= 0.0 <= self.initial_max or self.initial_min == self.initial_max:
            raise ParameterError(
                f"ActivationFakeQuant: the initial range must contain 0 and not be empty; received "
                f"[{initial_min!r}, {initial_max!r}]. Fix: e.g. initial_min=-6.0, initial_max=6.0 (TFMOT's)."
            )
        self.narrow_range = _check_flag("ActivationFakeQuant", "narrow_range", narrow_range)
        self.precision = self.bits
        super().__init__(**kwargs)
        self.supports_masking = True  # elementwise: a Keras mask (padding) passes through

    def build(self, input_shape: Any) -> None:
        self.min, self.max = range_variables(self, self.initial_min, self.initial_max)
        self.built = True

    def call(self, inputs: Any, training: Any = None) -> tf.Tensor:
        x = as_tensor(inputs)
        low, high = self.min.value, self.max.value
        if training and self.ema_decay < 1.0:
            decay = self.ema_decay
            stats = tf.stop_gradient(x)  # as TFMOT's: the range moves with the batch but passes x no gradient
            batch_min = tf.minimum(tf.cast(tf.reduce_min(stats), tf.float32), 0.0)
            batch_max = tf.maximum(tf.cast(tf.reduce_max(stats), tf.float32), 0.0)
            batch_min, batch_max = _global_range(batch_min, batch_max)
            low = low * decay + batch_min * (1.0 - decay)
            high = high * decay + batch_max * (1.0 - decay)
            self.min.assign(low)
            self.max.assign(high)
        return fake_quant_op(x, low, high, bits=self.bits, narrow_range=self.narrow_range)

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "bits": self.bits,
            "ema_decay": self.ema_decay,
            "initial_min": self.initial_min,
            "initial_max": self.initial_max,
            "narrow_range": self.narrow_range,
        }
