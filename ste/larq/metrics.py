"""``lq.metrics``: ``FlipRatio`` (a quantized layer's ``metrics=["flip_ratio"]`` creates it)."""

from ..metrics import FlipRatio

__all__ = ["FlipRatio"]
