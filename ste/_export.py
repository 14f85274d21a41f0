"""``ste.export_quantized_weights(model)``: the quantized kernels of every quantized layer, as numpy arrays."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import keras
import numpy as np

from .layers import QuantLayerMixin

__all__ = ["export_quantized_weights", "walk_layers"]


def walk_layers(model: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every layer of ``model`` with a path-like name, descending into nested models (``outer/inner``)."""
    for layer in getattr(model, "layers", []):
        path = f"{prefix}{layer.name}"
        if isinstance(layer, keras.Model):
            yield from walk_layers(layer, f"{path}/")
        else:
            yield path, layer


def export_quantized_weights(model: Any, dtype: Any = None) -> dict[str, dict[str, np.ndarray]]:
    """The quantized kernels of every ``ste.layers`` layer of ``model``: ``{layer name: {kernel name: array}}``.

    A kernel without a quantizer is exported as it is (float). ``dtype`` (e.g. ``"int8"`` for −1/+1 kernels) casts
    every array; values are cast as they are, so only use an integer dtype for integer-valued quantizers.
    Layers of nested models are named ``outer/inner``. The model must be built.
    """
    exported: dict[str, dict[str, np.ndarray]] = {}
    for path, layer in walk_layers(model):
        if not isinstance(layer, QuantLayerMixin):
            continue
        kernels = {
            name: np.asarray(keras.ops.convert_to_numpy(value)) for name, value in layer.quantized_kernels.items()
        }
        if dtype is not None:
            kernels = {name: value.astype(dtype) for name, value in kernels.items()}
        exported[path] = kernels
    return exported
