"""Weight constraints for quantized layers: :class:`WeightClip` (name ``"weight_clip"``).

Binary and ternary kernel quantizers have a zero (or clipped) gradient for large latent weights; without a clip
the latent weights drift away from the quantization range and stop learning. ``WeightClip`` keeps them in
[−clip_value, clip_value] after every optimizer step.
"""

from __future__ import annotations

from typing import Any

import keras

from ._errors import ParameterError, SpecError
from .registry import parse_spec

__all__ = ["WeightClip", "get"]


@keras.saving.register_keras_serializable(package="ste")
class WeightClip(keras.constraints.Constraint):  # type: ignore[misc]
    """Clip weights to [−clip_value, clip_value] (larq's ``WeightClip`` / ``"weight_clip"``)."""

    def __init__(self, clip_value: float = 1.0) -> None:
        if isinstance(clip_value, bool) or not isinstance(clip_value, (int, float)) or not clip_value > 0:
            raise ParameterError(f"WeightClip: clip_value must be a number > 0; received {clip_value!r}.")
        self.clip_value = float(clip_value)

    def __call__(self, w: Any) -> Any:
        return keras.ops.clip(w, -self.clip_value, self.clip_value)

    def get_config(self) -> dict[str, Any]:
        return {"clip_value": self.clip_value}

    def __repr__(self) -> str:
        return f"WeightClip(clip_value={self.clip_value!r})"


_NAMES: dict[str, type[keras.constraints.Constraint]] = {"weight_clip": WeightClip}


def get(identifier: Any) -> Any:
    """Resolve a constraint: ``"weight_clip"``, ``"weight_clip(clip_value=0.5)"``, or anything Keras accepts."""
    if isinstance(identifier, str):
        try:
            name, args, kwargs = parse_spec(identifier)
        except SpecError:
            return keras.constraints.get(identifier)
        if name in _NAMES:
            return _NAMES[name](*args, **kwargs)
    return keras.constraints.get(identifier)
