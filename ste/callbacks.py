"""Training callbacks (larq's ``lq.callbacks`` on Keras 3): :class:`HyperparameterScheduler`."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from ._errors import ParameterError

__all__ = ["HyperparameterScheduler"]


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
    hyperparameter given as a schedule is already scheduled; both raise :class:`ste.ParameterError` when training
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
