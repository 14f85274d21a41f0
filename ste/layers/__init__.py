"""Quantized Keras 3 layers: the Keras parent's computation on quantized inputs and a quantized kernel.

>>> import ste
>>> layer = ste.layers.QuantDense(8, input_quantizer="ste_sign", kernel_quantizer="ste_sign",
...                               kernel_constraint="weight_clip")
"""

from ._base import KernelSlot, QuantLayerMixin, kernel_precision
from ._conv import QuantConv1D, QuantConv2D, QuantDepthwiseConv2D, QuantSeparableConv2D
from ._dense import QuantDense

__all__ = [
    "KernelSlot",
    "QuantConv1D",
    "QuantConv2D",
    "QuantDense",
    "QuantDepthwiseConv2D",
    "QuantLayerMixin",
    "QuantSeparableConv2D",
    "kernel_precision",
]
