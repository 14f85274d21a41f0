"""What differs between the Keras (3.12 to 3.15) and TensorFlow (2.16 to 2.21) releases ste supports, read the same
way on each.

* Batch renormalization (``keras.layers.BatchNormalization(renorm=True)``) exists from Keras 3.14 on: before it, a
  batch norm has no ``renorm`` attribute, and never renormalizes. :func:`renormalizes` reads it with that default.
* A transposed convolution's ``get_config`` holds ``output_padding`` from Keras 3.15 on. Before it, the config leaves
  it out, and a layer rebuilt from that config (a saved model loaded, a QAT copy) silently has another output shape
  (``Conv1DTranspose(3, 3, strides=2, output_padding=1)`` on 6 steps: 14 steps, 13 once rebuilt).
  :func:`complete_config` puts it back.
* TFLite's converter makes a FULLY_CONNECTED whose int8 kernel has one scale per output channel from TensorFlow 2.20
  on. Before it, a Dense kernel fake-quantized per output channel fails to convert ("'tfl.transpose' op has mismatched
  quantized axes of input and output", in every conversion mode). :data:`PER_CHANNEL_MATMULS` says which.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from ._requirements import release

__all__ = ["PER_CHANNEL_MATMULS", "complete_config", "renormalizes"]

#: Whether this TensorFlow's TFLite converter takes Dense and EinsumDense kernels quantized per output channel
#: (TensorFlow 2.20 or later).
PER_CHANNEL_MATMULS = (release(tf.__version__) or (2, 20)) >= (2, 20)

_TRANSPOSED = (keras.layers.Conv1DTranspose, keras.layers.Conv2DTranspose, keras.layers.Conv3DTranspose)


def renormalizes(batch_norm: Any) -> bool:
    """Whether a batch norm uses batch renormalization (always False before Keras 3.14, which lacks it)."""
    return bool(getattr(batch_norm, "renorm", False))


def complete_config(layer: Any, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` (``layer.get_config()``) with what this Keras release leaves out of it: a transposed
    convolution's ``output_padding`` (Keras before 3.15)."""
    if isinstance(layer, _TRANSPOSED):
        return {**config, "output_padding": layer.output_padding}
    return config
