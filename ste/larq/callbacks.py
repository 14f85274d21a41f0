"""``lq.callbacks``: ``HyperparameterScheduler``."""

from ..callbacks import HyperparameterScheduler

__all__ = ["HyperparameterScheduler"]
