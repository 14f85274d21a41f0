"""``TimeDistributed``: a per-frame layer (a convolution, pooling, flatten) applied at every step in one call.

``[batch, time, ...]`` is folded to ``[batch·time, ...]``, the wrapped layer runs once, and the result is unfolded
to ``[batch, time, ...]``. Keras 3's own ``keras.layers.TimeDistributed`` runs the layer once per step (a Python
loop over a static time axis, ``vectorized_map`` otherwise); folding is what SpikingJelly's multi-step mode and its
``SeqToANNContainer`` do. A convolutional spiking layer is this wrapper followed by a neuron, which takes feature
maps ``[batch, time, height, width, channels]`` as they come::

    keras.Sequential([keras.Input((25, 16, 16, 2)),
                      ste.spiking.TimeDistributed(keras.layers.Conv2D(8, 3, padding="same")),
                      ste.spiking.LIF(beta=0.9)])
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from .._patches import apply as apply_patches
from ..errors import CallError

__all__ = ["TimeDistributed"]


@keras.saving.register_keras_serializable(package="ste.spiking")
class TimeDistributed(keras.layers.TimeDistributed):  # type: ignore[misc]
    """Apply ``layer`` to every time step of ``[batch, time, ...]`` at once, by folding time into the batch.

    Args:
        layer: a Keras layer for one frame ``[batch, ...]`` (``Conv2D``, ``AveragePooling2D``, ``Flatten``,
            ``ste.layers.QuantConv2D``, ...). A layer that mixes samples of a batch (``BatchNormalization``) sees
            ``batch·time`` samples: its statistics are over the batch and time, as SpikingJelly's.
        **kwargs: Keras layer arguments; ``dtype`` defaults to the wrapped layer's dtype policy.
    """

    def __init__(self, layer: keras.layers.Layer, **kwargs: Any) -> None:
        apply_patches()  # once per process: the Keras and TensorFlow patches ste needs (ste/_patches.py)
        if isinstance(layer, keras.layers.Layer):
            kwargs.setdefault("dtype", layer.dtype_policy)
        super().__init__(layer, **kwargs)

    def build(self, input_shape: Any) -> None:
        if len(input_shape) < 3:
            raise CallError(
                f"TimeDistributed '{self.name}' takes [batch, time, ...] frames; received shape "
                f"{tuple(input_shape)}. Fix: add a time axis (ste.spiking.rate_encode or keras.layers.RepeatVector)."
            )
        super().build(input_shape)

    def call(self, inputs: Any, training: Any = None, mask: Any = None) -> tf.Tensor:
        shape = tf.shape(inputs)
        folded = tf.reshape(inputs, tf.concat([[-1], shape[2:]], axis=0))
        folded.set_shape([None, *inputs.shape[2:]])
        kwargs: dict[str, Any] = {}
        if self.layer._call_has_training_arg:
            kwargs["training"] = training
        if self.layer._call_has_mask_arg and mask is not None:
            kwargs["mask"] = tf.reshape(mask, tf.concat([[-1], tf.shape(mask)[2:]], axis=0))
        out = self.layer.call(folded, **kwargs)
        result = tf.reshape(out, tf.concat([shape[:2], tf.shape(out)[1:]], axis=0))
        result.set_shape([inputs.shape[0], inputs.shape[1], *out.shape[1:]])
        return result
