"""Keras 3's ``fit`` under ``MultiWorkerMirroredStrategy``: two guarded fixes, installed by ``import ste``.

Keras 3 (checked up to 3.15) cannot ``fit`` a model under ``MultiWorkerMirroredStrategy`` with more than one worker
(keras-team/keras#20585, open):

1. ``TensorFlowTrainer._maybe_symbolic_build`` builds the model from the first batch, which it gets by
   ``strategy.reduce("MEAN", batch, axis=None)`` of the whole distributed ``(x, y)`` batch. Only shapes and dtypes
   matter there, and with workers that reduce fails (a ``PerReplica`` cannot be converted to a tensor). The fix
   builds from this worker's first replica's batch (``strategy.experimental_local_results(batch)[0]``).
2. ``reduce_per_replica(..., "mean")`` reduces each log (scalar metric results) with
   ``strategy.reduce("MEAN", value, axis=0)``: an axis a scalar does not have. The fix reduces with ``axis=None``,
   the mean over all replicas of all workers: what Keras computes over one worker's replicas
   (``tf.reduce_mean`` of the local results).

Both replacements call Keras's own function unchanged unless the strategy is a ``MultiWorkerMirroredStrategy`` in
multi-worker mode, so one process (with or without ``MirroredStrategy``) runs Keras's code. They are installed only
for the Keras versions in :data:`CHECKED_KERAS` and only when the patched names exist with the expected signature;
:func:`installed` says whether they are. See docs/distributed.md.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import keras
import tensorflow as tf

__all__ = ["CHECKED_KERAS", "install", "installed", "multi_worker"]

#: Keras versions (major, minor) whose ``fit`` under multi-worker strategies these fixes were checked on (the
#: versions that have ``_maybe_symbolic_build``); a newer Keras runs its own code until it is checked here too.
CHECKED_KERAS = ((3, 6), (3, 15))

_MARK = "_ste_multi_worker_fix"


def _keras_version() -> tuple[int, int]:
    major, minor, *_ = (int("".join(c for c in part if c.isdigit()) or 0) for part in keras.__version__.split("."))
    return major, minor


def multi_worker(strategy: Any) -> bool:
    """True for a ``MultiWorkerMirroredStrategy`` with more than one worker (the case Keras gets wrong)."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return False
    in_multi_worker_mode = getattr(strategy.extended, "_in_multi_worker_mode", None)
    return bool(in_multi_worker_mode()) if in_multi_worker_mode is not None else False


def _first_local_batch(batch: Any) -> Any:
    """This worker's first replica's part of a distributed batch (its shapes and dtypes are the model's input)."""
    strategy = tf.distribute.get_strategy()

    def local(value: Any) -> Any:
        if isinstance(value, tf.distribute.DistributedValues):
            return strategy.experimental_local_results(value)[0]
        return value

    return tf.nest.map_structure(local, batch)


def _fixed_symbolic_build(original: Any) -> Any:
    @functools.wraps(original)
    def _maybe_symbolic_build(self: Any, iterator: Any = None, data_batch: Any = None) -> Any:
        strategy: Any = getattr(self, "_distribute_strategy", None)
        if iterator is None or not multi_worker(strategy):
            return original(self, iterator=iterator, data_batch=data_batch)
        for _, _, it in iterator:
            with strategy.scope():
                data_batch = _first_local_batch(next(it))
            break
        with strategy.scope():
            self._symbolic_build(data_batch=data_batch)

    setattr(_maybe_symbolic_build, _MARK, True)
    return _maybe_symbolic_build


def _fixed_reduce_per_replica(original: Any) -> Any:
    @functools.wraps(original)
    def reduce_per_replica(values: Any, strategy: Any, reduction: Any) -> Any:
        if reduction not in ("auto", "mean") or not multi_worker(strategy):
            return original(values, strategy, reduction)
        return tf.nest.map_structure(lambda value: strategy.reduce("MEAN", value, axis=None), values)

    setattr(reduce_per_replica, _MARK, True)
    return reduce_per_replica


def _targets() -> tuple[Any, Any] | None:
    """Keras's TensorFlow trainer module and class, when they have the two functions with the expected signatures."""
    try:
        from keras.src.backend.tensorflow import trainer
    except ImportError:  # pragma: no cover - another Keras layout
        return None
    build = getattr(getattr(trainer, "TensorFlowTrainer", None), "_maybe_symbolic_build", None)
    reduce = getattr(trainer, "reduce_per_replica", None)
    if build is None or reduce is None:
        return None
    if list(inspect.signature(build).parameters) != ["self", "iterator", "data_batch"]:
        return None
    if list(inspect.signature(reduce).parameters) != ["values", "strategy", "reduction"]:
        return None
    return trainer, trainer.TensorFlowTrainer


def install() -> bool:
    """Install both fixes when this Keras is a checked version with the TensorFlow backend; True when installed."""
    if keras.backend.backend() != "tensorflow" or not CHECKED_KERAS[0] <= _keras_version() <= CHECKED_KERAS[1]:
        return False
    targets = _targets()
    if targets is None:
        return False
    module, trainer = targets
    if not getattr(trainer._maybe_symbolic_build, _MARK, False):
        trainer._maybe_symbolic_build = _fixed_symbolic_build(trainer._maybe_symbolic_build)
    if not getattr(module.reduce_per_replica, _MARK, False):
        module.reduce_per_replica = _fixed_reduce_per_replica(module.reduce_per_replica)
    return True


def installed() -> bool:
    """Whether Keras's ``fit`` runs with ste's multi-worker fixes (see the module docstring)."""
    targets = _targets()
    if targets is None:
        return False
    module, trainer = targets
    return bool(
        getattr(trainer._maybe_symbolic_build, _MARK, False) and getattr(module.reduce_per_replica, _MARK, False)
    )
