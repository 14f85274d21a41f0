"""``lq.layers``: larq's quantized layers, as :mod:`ste.layers` provides them on Keras 3."""

from ..layers import QuantConv1D, QuantConv2D, QuantDense, QuantDepthwiseConv2D, QuantSeparableConv2D

__all__ = ["QuantConv1D", "QuantConv2D", "QuantDense", "QuantDepthwiseConv2D", "QuantSeparableConv2D"]
