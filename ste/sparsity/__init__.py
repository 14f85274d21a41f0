"""Magnitude pruning and N:M structured sparsity for Keras 3, with TFMOT's ``tfmot.sparsity.keras`` API.

>>> import ste, keras
>>> model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8), keras.layers.Dense(2)])
>>> pruned = ste.sparsity.prune_low_magnitude(model, ste.sparsity.ConstantSparsity(0.5, begin_step=0, frequency=1))
>>> # pruned.compile(...); pruned.fit(x, y, callbacks=[ste.sparsity.UpdatePruningStep()])
>>> plain = ste.sparsity.strip_pruning(pruned)   # plain Keras layers, zeros in place

The mask is applied by a straight-through op: ``gradient="masked"`` (TFMOT's: pruned weights get no gradient) or
``gradient="sr_ste"`` (SR-STE: every weight gets the gradient straight through, plus ``decay·(1 − mask)·weight``).
See docs/sparsity.md.
"""

from ..errors import MissingCallbackError, PruningTargetError
from ._api import prune_low_magnitude, prune_scope, strip_pruning
from ._callbacks import PruningSummaries, UpdatePruningStep
from ._layers import PrunableLayer
from ._mask import apply_mask, magnitude_mask, n_by_m_mask, sr_ste
from ._schedule import ConstantSparsity, PolynomialDecay, PruningSchedule
from ._schedule_names import register_schedule, schedules, unregister_schedule
from ._wrapper import PruneLowMagnitude

__all__ = [
    "ConstantSparsity",
    "MissingCallbackError",
    "PolynomialDecay",
    "PrunableLayer",
    "PruneLowMagnitude",
    "PruningSchedule",
    "PruningSummaries",
    "PruningTargetError",
    "UpdatePruningStep",
    "apply_mask",
    "magnitude_mask",
    "n_by_m_mask",
    "prune_low_magnitude",
    "prune_scope",
    "register_schedule",
    "schedules",
    "sr_ste",
    "strip_pruning",
    "unregister_schedule",
]
