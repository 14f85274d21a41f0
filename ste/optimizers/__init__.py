"""Optimizers for binarized networks (larq's ``lq.optimizers`` on Keras 3): :class:`Bop` and :class:`CaseOptimizer`.

>>> import keras, ste
>>> optimizer = ste.optimizers.CaseOptimizer(
...     (ste.optimizers.Bop.is_binary_variable, ste.optimizers.Bop()),
...     default_optimizer=keras.optimizers.Adam(0.01),
... )
"""

from ._bop import Bop
from ._case import CaseOptimizer

__all__ = ["Bop", "CaseOptimizer"]
