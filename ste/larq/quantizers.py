"""``lq.quantizers``: larq's quantizer classes, aliases and ``get``/``serialize``/``deserialize``."""

from __future__ import annotations

from typing import Any

import keras

from ..quantizers import (
    ApproxSign,
    DoReFa,
    DoReFaQuantizer,
    MagnitudeAwareSign,
    Quantizer,
    SteHeaviside,
    SteSign,
    SteTern,
    SwishSign,
    get,
    serialize,
)

__all__ = [
    "ApproxSign",
    "DoReFa",
    "DoReFaQuantizer",
    "MagnitudeAwareSign",
    "Quantizer",
    "SteHeaviside",
    "SteSign",
    "SteTern",
    "SwishSign",
    "deserialize",
    "get",
    "serialize",
]


def deserialize(name: Any, custom_objects: dict[str, Any] | None = None) -> Any:
    """larq's ``deserialize``: a quantizer from a name or config (``custom_objects`` for user quantizers)."""
    with keras.saving.custom_object_scope(custom_objects or {}):
        return get(name)
