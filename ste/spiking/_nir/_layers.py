"""The small Keras layers that NIR nodes without a Keras counterpart become (``Scale``, ``Threshold``, ``SumPool2d``).

Each acts on ``[batch, time, ...features]`` at every step, is serializable (a model from ``from_nir`` saves and
loads as ``.keras``) and keeps its constants in NIR's channels-first layout converted to Keras's channels-last one.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

from ...registry import SurrogateLike
from .._spike import DEFAULT_SURROGATE, resolve_surrogate, spike_op

__all__ = ["ChannelsFirstFlatten", "ElementwiseScale", "SumPooling", "ThresholdSpike"]


def _array(value: Any) -> np.ndarray:
    return np.asarray(value, dtype=np.float64)


@keras.saving.register_keras_serializable(package="ste.spiking")
class ElementwiseScale(keras.layers.Layer):  # type: ignore[misc]
    """``y = x ⊙ s`` at every step (NIR ``Scale``); ``s`` has the per-step feature shape (channels last)."""

    def __init__(self, scale: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scale = _array(scale)

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        return inputs * tf.constant(self.scale, inputs.dtype)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "scale": self.scale.tolist()}


@keras.saving.register_keras_serializable(package="ste.spiking")
class ThresholdSpike(keras.layers.Layer):  # type: ignore[misc]
    """``y = Θ(x − ϑ)`` at every step (NIR ``Threshold``), whose backward pass is the surrogate's, as a neuron's."""

    def __init__(self, threshold: Any, *, surrogate: SurrogateLike = DEFAULT_SURROGATE, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.threshold = _array(threshold)
        self.surrogate, _ = resolve_surrogate(surrogate, False, type(self).__name__)
        self._spike = spike_op(self.surrogate)

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        result: tf.Tensor = self._spike(inputs - tf.constant(self.threshold, inputs.dtype))
        return result

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "threshold": self.threshold.tolist(), "surrogate": repr(self.surrogate)}


@keras.saving.register_keras_serializable(package="ste.spiking")
class SumPooling(keras.layers.Layer):  # type: ignore[misc]
    """Sum pooling over 2-D windows at every step (NIR ``SumPool2d``): ``[batch, time, H, W, C]``, no padding.

    The sum itself (a depthwise convolution with a kernel of ones), not an average times k·k, which rounds twice.
    """

    def __init__(self, pool_size: Any, strides: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pool_size = tuple(int(k) for k in pool_size)
        self.strides = tuple(int(s) for s in strides)

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        shape = tf.shape(inputs)
        channels = inputs.shape[-1]
        folded = tf.reshape(inputs, tf.concat([[-1], shape[2:]], 0))
        ones = tf.ones((*self.pool_size, channels, 1), inputs.dtype)
        pooled = tf.nn.depthwise_conv2d(folded, ones, (1, *self.strides, 1), "VALID")
        return tf.reshape(pooled, tf.concat([shape[:2], tf.shape(pooled)[1:]], 0))

    def compute_output_shape(self, input_shape: Any) -> tuple[Any, ...]:
        spatial = [
            None if n is None else (n - k) // s + 1 for n, k, s in zip(input_shape[2:4], self.pool_size, self.strides)
        ]
        return (input_shape[0], input_shape[1], *spatial, input_shape[4])

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "pool_size": list(self.pool_size), "strides": list(self.strides)}


@keras.saving.register_keras_serializable(package="ste.spiking")
class ChannelsFirstFlatten(keras.layers.Layer):  # type: ignore[misc]
    """Flatten the features of every step in NIR's (and PyTorch's) order, channels first: ``[batch, time, H, W, C]``
    -> ``[batch, time, C·H·W]`` (NIR ``Flatten``; Keras's ``Flatten`` would order them H, W, C)."""

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        rank = len(inputs.shape)
        moved = tf.transpose(inputs, [0, 1, rank - 1, *range(2, rank - 1)])
        return tf.reshape(moved, tf.concat([tf.shape(inputs)[:2], [-1]], 0))

    def compute_output_shape(self, input_shape: Any) -> tuple[Any, ...]:
        features = input_shape[2:]
        size = None if None in features else int(np.prod(features))
        return (input_shape[0], input_shape[1], size)
