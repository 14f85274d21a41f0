"""``Interval``: the constraint that keeps a learned neuron parameter (β, ϑ, a surrogate's width) in its range."""

from __future__ import annotations

from typing import Any

import keras

__all__ = ["Interval"]


@keras.saving.register_keras_serializable(package="ste.spiking")
class Interval(keras.constraints.Constraint):  # type: ignore[misc]
    """Clip a variable to [low, high] after every optimizer step (``None``: unbounded on that side)."""

    def __init__(self, low: float | None = None, high: float | None = None) -> None:
        self.low = low
        self.high = high

    def __call__(self, w: Any) -> Any:
        if self.low is not None:
            w = keras.ops.maximum(w, self.low)
        if self.high is not None:
            w = keras.ops.minimum(w, self.high)
        return w

    def get_config(self) -> dict[str, Any]:
        return {"low": self.low, "high": self.high}

    def __repr__(self) -> str:
        return f"Interval(low={self.low!r}, high={self.high!r})"
