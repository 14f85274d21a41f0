"""``lq.quantizers``: larq's quantizer classes, aliases, function forms and ``get``/``serialize``/``deserialize``."""

from __future__ import annotations

from typing import Any

import keras

from ..quantizers import (
    ApproxSign,
    DoReFa,
    DoReFaQuantizer,
    MagnitudeAwareSign,
    NoOp,
    Quantizer,
    SteHeaviside,
    SteSign,
    SteTern,
    SwishSign,
    approx_sign,
    dorefa_quantizer,
    get,
    magnitude_aware_sign,
    serialize,
    ste_heaviside,
    ste_sign,
    ste_tern,
    swish_sign,
)

__all__ = [
    "ApproxSign",
    "DoReFa",
    "DoReFaQuantizer",
    "MagnitudeAwareSign",
    "NoOp",
    "NoOpQuantizer",
    "Quantizer",
    "SteHeaviside",
    "SteSign",
    "SteTern",
    "SwishSign",
    "approx_sign",
    "deserialize",
    "dorefa_quantizer",
    "get",
    "magnitude_aware_sign",
    "serialize",
    "ste_heaviside",
    "ste_sign",
    "ste_tern",
    "swish_sign",
]

NoOpQuantizer = NoOp  # larq's alias


def deserialize(name: Any, custom_objects: dict[str, Any] | None = None) -> Any:
    """larq's ``deserialize``: a quantizer from a name or config (``custom_objects`` for user quantizers)."""
    with keras.saving.custom_object_scope(custom_objects or {}):
        return get(name)
