"""``ste.export_quantized_weights(model)``: the quantized kernels of every quantized layer, as numpy arrays (or
bit-packed, ``packed=True``, read back by ``ste.unpack_quantized_weights``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import keras
import numpy as np

from .._common._arguments import check_bool
from ..errors import ParameterError
from ..layers import QuantLayerMixin
from ._packing import pack_kernel, unpack_kernel

__all__ = ["export_quantized_weights", "unpack_quantized_weights", "walk_layers"]


def walk_layers(model: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every layer of ``model`` with a path-like name, descending into nested models (``outer/inner``)."""
    for layer in getattr(model, "layers", []):
        path = f"{prefix}{layer.name}"
        if isinstance(layer, keras.Model):
            yield from walk_layers(layer, f"{path}/")
        else:
            yield path, layer


def export_quantized_weights(model: Any, dtype: Any = None, packed: bool = False) -> dict[str, dict[str, Any]]:
    """The quantized kernels of every ``ste.layers`` layer of ``model``: ``{layer name: {kernel name: array}}``.

    A kernel without a quantizer is exported as it is (float). ``dtype`` (e.g. ``"int8"`` for −1/+1 kernels) casts
    every array; values are cast as they are, so only use an integer dtype for integer-valued quantizers.
    Layers of nested models are named ``outer/inner``. The model must be built.

    ``packed=True`` stores every binary kernel (±s, one s per output channel or per tensor) in 1 bit per weight and
    every ternary one ({−s, 0, +s}: ``ste_tern``, BitNet's ``AbsmeanTernary``) in 2 bits, plus its scales, as a
    dict ``{"bits", "shape", "scale", "codes"}``; other kernels stay arrays. :func:`ste.unpack_quantized_weights`
    restores exactly (byte for byte) the arrays ``packed=False`` gives.
    """
    packed = check_bool("ste.export_quantized_weights", "packed", packed)
    exported: dict[str, dict[str, Any]] = {}
    for path, layer in walk_layers(model):
        if not isinstance(layer, QuantLayerMixin):
            continue
        kernels = {
            name: np.asarray(keras.ops.convert_to_numpy(value)) for name, value in layer.quantized_kernels.items()
        }
        if dtype is not None:
            kernels = {name: value.astype(dtype) for name, value in kernels.items()}
        exported[path] = {name: pack_kernel(value) for name, value in kernels.items()} if packed else kernels
    return exported


def unpack_quantized_weights(exported: Any) -> dict[str, dict[str, np.ndarray]]:
    """The arrays of ``ste.export_quantized_weights(model, packed=True)``: each packed kernel rebuilt from its bits
    and scales, exactly the array ``export_quantized_weights(model)`` gives (same dtype, same bytes)."""
    if not isinstance(exported, dict):
        raise ParameterError(
            f"ste.unpack_quantized_weights: expected the dict ste.export_quantized_weights(model, packed=True) "
            f"returns ({{layer name: {{kernel name: packed kernel or array}}}}); received {type(exported).__name__}."
        )
    unpacked: dict[str, dict[str, np.ndarray]] = {}
    for path, kernels in exported.items():
        if not isinstance(kernels, dict):
            raise ParameterError(
                f"ste.unpack_quantized_weights: layer {path!r} maps to {type(kernels).__name__}; expected a dict "
                f"{{kernel name: packed kernel or array}}, as ste.export_quantized_weights(model, packed=True) gives."
            )
        unpacked[path] = {name: unpack_kernel(entry, f"{path}/{name}") for name, entry in kernels.items()}
    return unpacked
