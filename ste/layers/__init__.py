"""Quantized Keras 3 layers: the Keras parent's computation on quantized inputs and a quantized kernel.

>>> import ste
>>> layer = ste.layers.QuantDense(8, input_quantizer="sign", kernel_quantizer="sign",
...                               kernel_constraint="weight_clip")

A built layer's kernel is a :class:`QuantizedVariable`: inside ``with quantized_scope(True):`` its reads
(``layer.kernel``, ``model.get_weights()``, ``model.save``) give the quantized kernel; :func:`should_quantize` says
whether such a scope is active here.
"""

from typing import Any

from ..errors import UnsupportedLayerError
from ._base import KernelSlot, QuantLayerMixin, kernel_precision
from ._conv import (
    QuantConv1D,
    QuantConv1DTranspose,
    QuantConv2D,
    QuantConv2DTranspose,
    QuantConv3D,
    QuantConv3DTranspose,
    QuantDepthwiseConv2D,
    QuantSeparableConv1D,
    QuantSeparableConv2D,
)
from ._dense import QuantDense
from ._kernel_view import QuantizedVariable, quantized_scope, should_quantize
from ._normalization import BatchNormalization

__all__ = [
    "BatchNormalization",
    "KernelSlot",
    "QuantConv1D",
    "QuantConv1DTranspose",
    "QuantConv2D",
    "QuantConv2DTranspose",
    "QuantConv3D",
    "QuantConv3DTranspose",
    "QuantDense",
    "QuantDepthwiseConv2D",
    "QuantLayerMixin",
    "QuantSeparableConv1D",
    "QuantSeparableConv2D",
    "QuantizedVariable",
    "kernel_precision",
    "quantized_scope",
    "should_quantize",
]

_NOT_IN_KERAS_3 = ("QuantLocallyConnected1D", "QuantLocallyConnected2D")


def __getattr__(name: str) -> Any:
    if name in _NOT_IN_KERAS_3:
        raise UnsupportedLayerError(
            f"ste.layers has no {name}: larq's {name} wraps tf.keras's LocallyConnected layers, which Keras 3 removed, "
            f"so there is no Keras 3 parent to quantize. Fix: use a quantized convolution (QuantConv1D / QuantConv2D), "
            f"or write the unshared-weights layer yourself; see docs/larq.md (Migrating from larq)."
        )
    raise AttributeError(f"module 'ste.layers' has no attribute {name!r}")
