"""``lq.quantizers``: larq's quantizer classes, aliases, spec names and function forms, ``get``/``serialize``/
``deserialize`` (which read larq's class names and saved configs, ``{"module": "larq.quantizers", ...}``) and
``get_kernel_quantizer``. The classes and spec names are defined here, in ``ste.larq``, on :mod:`ste.quantizers`'
public API; :mod:`ste.quantizers` itself has ste's names and arguments only (``sign``, ``heaviside``, ``ternary``,
``DoReFa(bits=...)``, ...). ``DoReFa`` and ``MagnitudeAwareSign`` here are ste's classes with larq's arguments
(``k_bit``, ``clip_value``), and ``get`` reads ``"magnitude_aware_sign"`` as larq's."""

from __future__ import annotations

from typing import Any

import keras

from ..quantizers import NoOp, Quantizer, serialize
from . import context
from ._functions import (
    approx_sign,
    dorefa_quantizer,
    magnitude_aware_sign,
    ste_heaviside,
    ste_sign,
    ste_tern,
    swish_sign,
)
from ._quantizers import (
    ApproxSign,
    DoReFa,
    DoReFaQuantizer,
    MagnitudeAwareSign,
    SteHeaviside,
    SteSign,
    SteTern,
    SwishSign,
    get,
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
    "get_kernel_quantizer",
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


def get_kernel_quantizer(identifier: Any) -> Any:
    """larq's ``get_kernel_quantizer``: :func:`get`, and a quantizer made inside ``lq.context.metrics_scope`` (with no
    ``metrics=`` of its own) takes that scope's metrics, so the layer using it tracks its kernel's flip ratio."""
    quantizer = get(identifier)
    if isinstance(quantizer, Quantizer) and not quantizer.kernel_metrics:
        quantizer.kernel_metrics = sorted(context.get_training_metrics())
    return quantizer
