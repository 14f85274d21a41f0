"""``lq.constraints``: ``WeightClip`` and its name ``"weight_clip"``."""

from __future__ import annotations

from typing import Any

import keras

from ..constraints import WeightClip, get, weight_clip

__all__ = ["WeightClip", "deserialize", "get", "serialize", "weight_clip"]


def serialize(constraint: Any) -> Any:
    """larq's ``serialize``: a constraint's Keras config."""
    return keras.constraints.serialize(constraint)


def deserialize(config: Any, custom_objects: dict[str, Any] | None = None) -> Any:
    """larq's ``deserialize``: a constraint from a name or config."""
    with keras.saving.custom_object_scope(custom_objects or {}):
        return get(config)
