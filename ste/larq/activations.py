"""``lq.activations``: larq's ``hard_tanh`` and ``leaky_tanh``."""

from ..activations import hard_tanh, leaky_tanh

__all__ = ["hard_tanh", "leaky_tanh"]
