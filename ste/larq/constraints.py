"""``lq.constraints``: ``WeightClip`` and its name ``"weight_clip"``; ``get`` / ``deserialize`` also read the configs
larq saved (``{"module": "larq.constraints", "class_name": "WeightClip", "config": {...}}``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras

from .. import constraints as _ste_constraints
from ..constraints import WeightClip, weight_clip
from ..errors import ParameterError, UnknownConstraintError

__all__ = ["WeightClip", "deserialize", "get", "serialize", "weight_clip"]

#: larq 0.14's constraint class name and alias.
LARQ_CONSTRAINTS = ("WeightClip", "weight_clip")


def _is_larq_config(identifier: Any) -> bool:
    return isinstance(identifier, Mapping) and str(identifier.get("module", "")).split(".")[0] == "larq"


def get(identifier: Any) -> Any:
    """larq's ``get``: a config larq saved (its ``WeightClip``), else :func:`ste.constraints.get` (``"weight_clip"``,
    ``"weight_clip(clip_value=0.5)"``, anything Keras accepts)."""
    if _is_larq_config(identifier):
        name = identifier.get("class_name")
        if name not in LARQ_CONSTRAINTS:
            raise UnknownConstraintError(
                f"ste.larq.constraints.get: the larq config {dict(identifier)!r} names class {name!r}; larq 0.14's "
                f"constraint is WeightClip (alias weight_clip). Fix: for a constraint of your own, pass the object "
                f"itself."
            )
        config = identifier.get("config") or {}
        if not isinstance(config, Mapping):
            raise ParameterError(
                f"ste.larq.constraints.get: the larq config {dict(identifier)!r} has config {config!r}, not a dict. "
                f"Fix: {{'clip_value': 1.0}}, as larq saves it."
            )
        return WeightClip.from_config(config)
    return _ste_constraints.get(identifier)


def serialize(constraint: Any) -> Any:
    """larq's ``serialize``: a constraint's Keras config."""
    return keras.constraints.serialize(constraint)


def deserialize(config: Any, custom_objects: dict[str, Any] | None = None) -> Any:
    """larq's ``deserialize``: a constraint from a name or config (larq's saved configs included)."""
    with keras.saving.custom_object_scope(custom_objects or {}):
        return get(config)
