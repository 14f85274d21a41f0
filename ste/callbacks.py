"""Training callbacks: :class:`HyperparameterScheduler` (larq's ``lq.callbacks`` on Keras 3) and
:class:`BackupAndRestore` (Keras's, with a chief's directory under ``MultiWorkerMirroredStrategy``)."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from ._common._arguments import check_bool
from ._patches import multi_worker
from .errors import BackupError, ParameterError

__all__ = ["BackupAndRestore", "HyperparameterScheduler"]


def _takes_two_arguments(schedule: Callable[..., Any]) -> bool:
    """True for ``schedule(t, current_value)``, False for ``schedule(t)`` (larq accepts both)."""
    try:
        parameters = list(inspect.signature(schedule).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return any(p.kind == p.VAR_POSITIONAL for p in parameters) or len(positional) >= 2


class HyperparameterScheduler(keras.callbacks.Callback):  # type: ignore[misc]
    """Sets an optimizer hyperparameter from a schedule during ``fit`` (larq's callback, for Keras 3).

    ``schedule(t)`` (or ``schedule(t, current_value)``) returns the new value; ``t`` is the epoch index
    (``update_freq="epoch"``, set at the start of each epoch) or the optimizer's iteration count
    (``update_freq="step"``, set before each training batch). The value is logged at the end of every epoch as
    ``log_name`` (default: the hyperparameter's name), so ``History`` and ``TensorBoard`` see it.

    ``optimizer`` defaults to the model's (the inner optimizer of a mixed-precision ``LossScaleOptimizer``); pass
    one sub-optimizer of a :class:`ste.optimizers.CaseOptimizer` to schedule, e.g., Bop's ``gamma``::

        bop = ste.optimizers.Bop()
        HyperparameterScheduler(lambda epoch: 1e-3 * 0.1 ** (epoch // 30), "gamma", bop)

    The hyperparameter must be held in a variable (``learning_rate`` and Bop's ``gamma``/``threshold`` given as
    numbers are): a Python number such as Adam's ``beta_1`` is fixed when the training step is traced, and a
    hyperparameter given as a schedule is already scheduled; both raise :class:`ste.errors.ParameterError` when training
    starts. ``verbose=1`` prints each change.
    """

    def __init__(
        self,
        schedule: Callable[..., Any],
        hyperparameter: str,
        optimizer: keras.optimizers.Optimizer | None = None,
        update_freq: str = "epoch",
        verbose: int = 0,
        log_name: str | None = None,
    ) -> None:
        super().__init__()
        if not callable(schedule):
            raise ParameterError(f"HyperparameterScheduler: schedule must be callable; received {schedule!r}.")
        if update_freq not in ("epoch", "step"):
            raise ParameterError(
                f"HyperparameterScheduler: update_freq must be 'epoch' or 'step'; received {update_freq!r}."
            )
        if not isinstance(hyperparameter, str) or not hyperparameter.isidentifier():
            raise ParameterError(
                f"HyperparameterScheduler: hyperparameter must be an attribute name such as 'gamma'; "
                f"received {hyperparameter!r}."
            )
        self.schedule = schedule
        self.hyperparameter = hyperparameter
        self.optimizer = optimizer
        self.update_freq = update_freq
        self.verbose = verbose
        self.log_name = log_name or hyperparameter
        self._two_arguments = _takes_two_arguments(schedule)

    def set_model(self, model: keras.Model) -> None:
        super().set_model(model)
        if self.optimizer is None:
            optimizer = model.optimizer
            if not hasattr(optimizer, self.hyperparameter) and hasattr(optimizer, "inner_optimizer"):
                optimizer = optimizer.inner_optimizer  # keras.optimizers.LossScaleOptimizer
            self.optimizer = optimizer

    def _variable(self) -> Any:
        optimizer = self.optimizer
        if optimizer is None or not hasattr(optimizer, self.hyperparameter):
            raise ParameterError(
                f"HyperparameterScheduler: optimizer {optimizer!r} has no hyperparameter {self.hyperparameter!r}. "
                f"Fix: pass the optimizer that has it (e.g. the Bop inside a CaseOptimizer) as optimizer=."
            )
        value = getattr(optimizer, self.hyperparameter)
        if not isinstance(value, (keras.Variable, tf.Variable)):
            raise ParameterError(
                f"HyperparameterScheduler: {type(optimizer).__name__}.{self.hyperparameter} is {value!r}, not a "
                f"variable: a Python number is fixed when the training step is traced, and a schedule is already "
                f"scheduled. Fix: schedule a hyperparameter held in a variable (learning_rate, Bop's gamma or "
                f"threshold given as a number)."
            )
        return value

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._variable()  # fail before the first step

    def _set(self, t: int) -> Any:
        variable = self._variable()
        current = float(keras.ops.convert_to_numpy(variable))
        value = self.schedule(t, current) if self._two_arguments else self.schedule(t)
        variable.assign(float(value))
        if self.verbose > 0:
            unit = "Epoch" if self.update_freq == "epoch" else "Step"
            print(f"{unit} {t}: {self.log_name} is now {float(value)}.")
        return value

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self.update_freq == "epoch":
            self._set(epoch)

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self.update_freq == "step":
            optimizer: Any = self.optimizer  # set by set_model
            self._set(int(keras.ops.convert_to_numpy(optimizer.iterations)))

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if logs is not None:
            logs[self.log_name] = float(keras.ops.convert_to_numpy(self._variable()))


class BackupAndRestore(keras.callbacks.BackupAndRestore):  # type: ignore[misc]
    """``keras.callbacks.BackupAndRestore`` that several workers can share (same arguments and files).

    Keras 3's callback makes every worker of a ``tf.distribute.MultiWorkerMirroredStrategy`` write the same files in
    ``backup_dir``: on a shared file system they overwrite each other mid-write. Here only the chief (worker 0)
    writes ``backup_dir``; every other worker writes its own ``<backup_dir>_worker<i>`` (it must still save: reading
    a metric's state is a collective all workers take part in) and removes it at the end. Every worker restores from
    the chief's files, which are the same state (the variables are mirrored). So a checkpoint written by one process
    restores into several workers and one written by the chief restores into one process. With one worker (or
    without a multi-worker strategy) this is Keras's callback unchanged.

    Like Keras's, it resumes at an epoch boundary: an epoch interrupted in the middle runs again from its first batch
    (Keras 3's ``save_freq=<int>`` saves mid-epoch but resumes at the start of the saved epoch, with the weights of
    the middle of it; keep ``save_freq="epoch"`` for a run that ends as an uninterrupted one). See docs/distributed.md.

    A backup it cannot resume from (a weights file that cannot be read or does not fit the model, metadata that is
    not JSON or whose epoch is not a count, metadata without its weights) raises :class:`ste.errors.BackupError` when
    training starts, naming the file and what to delete, before any weight changes. As in Keras, a weights file that
    cannot be read is first replaced by the previous backup when ``double_checkpoint=True`` kept one.
    """

    backup_dir: str

    def __init__(
        self,
        backup_dir: str,
        save_freq: str | int = "epoch",
        double_checkpoint: bool = False,
        delete_checkpoint: bool = True,
    ) -> None:
        super().__init__(
            backup_dir,
            save_freq=save_freq,
            double_checkpoint=check_bool("BackupAndRestore", "double_checkpoint", double_checkpoint),
            delete_checkpoint=check_bool("BackupAndRestore", "delete_checkpoint", delete_checkpoint),
        )

    def _task(self) -> int:
        strategy: Any = self.model.distribute_strategy if self.model is not None else None
        if not multi_worker(strategy):
            return 0
        return int(strategy.cluster_resolver.task_id or 0)

    def _use_dir(self, backup_dir: str) -> None:
        self._weights_path = f"{backup_dir}/latest.weights.h5"
        self._training_metadata_path = f"{backup_dir}/training_metadata.json"
        self._prev_weights_path = f"{self._weights_path}.bkp"
        self._prev_training_metadata_path = f"{self._training_metadata_path}.bkp"

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._chief_dir: str = getattr(self, "_chief_dir", None) or self.backup_dir
        task = self._task()
        self.backup_dir = self._chief_dir
        self._use_dir(self._chief_dir)
        self._restore()  # every worker restores the chief's state
        if task != 0:
            self.backup_dir = f"{self._chief_dir}_worker{task}"
            self._use_dir(self.backup_dir)

    def _restore(self) -> None:
        """Keras's ``on_train_begin``: the latest backup, else (its weights cannot be read, and ``double_checkpoint``
        kept a previous one) the previous one; every kind of damage is a :class:`ste.errors.BackupError`."""
        try:
            self._load_checked()
        except BackupError as damage:
            if not isinstance(damage.__cause__, OSError) or not tf.io.gfile.exists(self._prev_weights_path):
                raise
            tf.io.gfile.copy(self._prev_weights_path, self._weights_path, overwrite=True)
            if tf.io.gfile.exists(self._prev_training_metadata_path):
                tf.io.gfile.copy(self._prev_training_metadata_path, self._training_metadata_path, overwrite=True)
            elif tf.io.gfile.exists(self._training_metadata_path):
                tf.io.gfile.remove(self._training_metadata_path)
            self._load_checked()

    def _damaged(self, file: str, what: str) -> BackupError:
        return BackupError(
            f"BackupAndRestore: cannot resume from the backup in {self.backup_dir!r}: {file!r} {what}. No weight was "
            f"changed. Fix: delete {self.backup_dir!r} to start training afresh (at epoch 0), or put back the backup "
            f"this model wrote."
        )

    def _epoch(self) -> int | None:
        """The epoch to resume at from the metadata file (None: there is none), checked before any weight changes."""
        path = self._training_metadata_path
        if not tf.io.gfile.exists(path):
            return None
        if not tf.io.gfile.exists(self._weights_path):
            raise self._damaged(path, f"says to resume, but its weights {self._weights_path!r} are missing")
        try:
            with tf.io.gfile.GFile(path, "r") as file:
                metadata = json.loads(file.read())
        except (OSError, ValueError) as error:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise self._damaged(path, f"cannot be read as JSON ({type(error).__name__}: {error})") from error
        epoch = metadata.get("epoch") if isinstance(metadata, dict) else None
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise self._damaged(
                path, f"gives {epoch!r} as the epoch to resume at (in {metadata!r}); it must be an integer >= 0"
            )
        return epoch

    def _load_checked(self) -> None:
        """Keras's ``_load_model`` with its damage refused: the metadata read and checked first, the weights loaded
        over a copy of every variable, which is put back when the load fails."""
        model: Any = self.model
        if not model.built:
            super()._load_model()  # Keras's error: the model must be built
        epoch = self._epoch()
        if tf.io.gfile.exists(self._weights_path):
            optimizer = model.optimizer
            if optimizer is not None and not optimizer.built:
                optimizer.build(model.trainable_variables)  # as Keras: the optimizer's variables exist to load into
            variables = {id(v): v for v in [*model.variables, *(optimizer.variables if optimizer else [])]}
            variables.update({id(v): v for metric in model.metrics for v in metric.variables})
            kept = [(v, np.array(v.numpy())) for v in variables.values()]
            try:
                model.load_weights(self._weights_path)
            except Exception as error:  # any failure: put every variable back first
                for variable, value in kept:
                    variable.assign(value)
                first = str(error).strip().splitlines()[0] if str(error).strip() else ""
                raise self._damaged(
                    self._weights_path,
                    f"cannot be loaded into model '{model.name}' ({type(error).__name__}: {first}): it is damaged, or "
                    f"another model wrote it",
                ) from error
        if epoch is not None:
            model._initial_epoch = epoch
