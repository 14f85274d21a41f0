"""``lq.layers``: larq's quantized layers, as :mod:`ste.layers` provides them on Keras 3.

``QuantLocallyConnected1D`` / ``2D`` raise :class:`ste.UnsupportedLayerError` (Keras 3 has no locally connected
layers).
"""

from typing import Any

from .. import layers as _ste_layers
from ..layers import (
    QuantConv1D,
    QuantConv1DTranspose,
    QuantConv2D,
    QuantConv2DTranspose,
    QuantConv3D,
    QuantConv3DTranspose,
    QuantDense,
    QuantDepthwiseConv2D,
    QuantSeparableConv1D,
    QuantSeparableConv2D,
)

__all__ = [
    "QuantConv1D",
    "QuantConv1DTranspose",
    "QuantConv2D",
    "QuantConv2DTranspose",
    "QuantConv3D",
    "QuantConv3DTranspose",
    "QuantDense",
    "QuantDepthwiseConv2D",
    "QuantSeparableConv1D",
    "QuantSeparableConv2D",
]


def __getattr__(name: str) -> Any:
    return getattr(_ste_layers, name)  # ste.layers explains the larq names it does not have
