"""What differs between the Keras releases ste supports (3.12 to 3.15), read the same way on each.

* Batch renormalization (``keras.layers.BatchNormalization(renorm=True)``) exists from Keras 3.14 on: before it, a
  batch norm has no ``renorm`` attribute, and never renormalizes. :func:`renormalizes` reads it with that default.
* A transposed convolution's ``get_config`` holds ``output_padding`` from Keras 3.15 on. Before it, the config leaves
  it out, and a layer rebuilt from that config (a saved model loaded, a QAT copy) silently has another output shape
  (``Conv1DTranspose(3, 3, strides=2, output_padding=1)`` on 6 steps: 14 steps, 13 once rebuilt).
  :func:`complete_config` puts it back.
"""

from __future__ import annotations

from typing import Any

import keras

__all__ = ["complete_config", "renormalizes"]

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
