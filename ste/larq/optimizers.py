"""``lq.optimizers``: ``Bop`` and ``CaseOptimizer`` as Keras 3 optimizers."""

from ..optimizers import Bop, CaseOptimizer

__all__ = ["Bop", "CaseOptimizer"]
