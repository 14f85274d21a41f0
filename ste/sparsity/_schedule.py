"""Pruning schedules: when the mask is recomputed and at which sparsity (TFMOT's ``pruning_schedule`` formulas).

A schedule is called with the pruning step (an integer tensor) and returns ``(should_prune, sparsity)``: a boolean
scalar, and the float32 fraction of zeros the mask must hold at that step. Pruning happens when
``begin_step <= step <= end_step`` (``end_step = -1``: for ever) and ``(step - begin_step) % frequency == 0``.
"""

from __future__ import annotations

import abc
import numbers
from typing import Any

import keras
import tensorflow as tf

from .._common._abstract import Extension
from ..errors import ParameterError, ParameterTypeError

__all__ = ["ConstantSparsity", "PolynomialDecay", "PruningSchedule", "schedule_arguments"]


def number_error(value: Any) -> type[ParameterError]:
    """The error for a number argument out of range (ParameterError), or not a number at all (ParameterTypeError)."""
    return ParameterError if isinstance(value, numbers.Real) and not isinstance(value, bool) else ParameterTypeError


_EXAMPLES = {"begin_step": 0, "end_step": 1000, "frequency": 100}


def _integer(owner: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        example: Any = _EXAMPLES[name]
        try:
            if float(value) == int(float(value)) and not isinstance(value, bool):
                example = int(float(value))
        except (TypeError, ValueError, OverflowError):
            pass
        raise ParameterTypeError(
            f"{owner}: {name} must be an integer (a count of training steps); received {value!r} "
            f"({type(value).__name__}). Fix: pass a Python int, e.g. {name}={example}."
        )
    return int(value)


def _sparsity(owner: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= float(value) < 1.0:
        kind = number_error(value)
        raise kind(
            f"{owner}: {name} must be a number in [0, 1) (the fraction of weights set to zero); received {value!r}. "
            f"Fix: pass e.g. {name}=0.5 for half of the weights pruned (1.0 would prune every weight)."
        )
    return float(value)


def _steps(owner: str, begin_step: Any, end_step: Any, frequency: Any, forever: bool) -> tuple[int, int, int]:
    begin = _integer(owner, "begin_step", begin_step)
    end = _integer(owner, "end_step", end_step)
    every = _integer(owner, "frequency", frequency)
    if begin < 0:
        raise ParameterError(
            f"{owner}: begin_step must be >= 0 (the step of the first mask update; steps count from 0); received "
            f"{begin}. Fix: pass begin_step=0 to prune from the start of training, or the step to start at."
        )
    if end < -1:
        fix = "-1 to prune until training ends, or " if forever else ""
        raise ParameterError(
            f"{owner}: end_step must be {'-1 or >= 0 (-1: no end)' if forever else '>= 0'}; received {end}. "
            f"Fix: pass {'end_step=' + fix if forever else 'end_step as '}the last step at which the mask is "
            f"updated (>= begin_step={begin})."
        )
    if end == -1 and not forever:
        raise ParameterError(
            f"{owner}: end_step cannot be -1 (prune for ever): the sparsity decays from begin_step to end_step. "
            f"Fix: pass the step at which the final sparsity is reached, or use ConstantSparsity."
        )
    if end != -1 and end < begin:
        raise ParameterError(
            f"{owner}: end_step ({end}) is before begin_step ({begin}). Fix: pass end_step >= begin_step"
            f"{'' if not forever else ', or end_step=-1 to prune until training ends'}."
        )
    if every <= 0:
        raise ParameterError(
            f"{owner}: frequency must be > 0 (the mask is updated every `frequency` steps); received "
            f"{every}. Fix: pass frequency=1 to update the mask at every step, or e.g. frequency=100 (the default)."
        )
    return begin, end, every


class PruningSchedule(Extension):
    """Base class of pruning schedules: ``schedule(step) -> (should_prune, sparsity)``.

    Subclasses implement the abstract ``__call__`` and ``get_config`` (and register with Keras to be saved with a
    model; :func:`ste.sparsity.register_schedule` names them); see "Write your own pruning schedule" in
    docs/sparsity.md.
    :meth:`should_prune_in_step` is TFMOT's rule for when to prune. ``get_config`` may return TFMOT's
    ``{"class_name": ..., "config": {arguments}}`` (as ste's schedules do) or the arguments alone; ``from_config``
    reads both.
    """

    @staticmethod
    def should_prune_in_step(step: Any, begin_step: int, end_step: int, frequency: int) -> tf.Tensor:
        """True when ``begin_step <= step <= end_step`` (``end_step=-1``: no end) and ``(step - begin_step)`` is a
        multiple of ``frequency``."""
        step = tf.cast(step, tf.int64)
        in_range = tf.logical_and(
            tf.greater_equal(step, begin_step), tf.logical_or(tf.less_equal(step, end_step), end_step < 0)
        )
        return tf.logical_and(in_range, tf.equal(tf.math.floormod(step - begin_step, frequency), 0))

    @abc.abstractmethod
    def __call__(self, step: Any) -> tuple[tf.Tensor, tf.Tensor]:
        """``(should_prune, sparsity)`` at ``step``: a boolean scalar and the target fraction of zeros (float32).

        Args:
            step: the training step, an integer scalar (a tensor inside ``tf.function``).
        """

    @abc.abstractmethod
    def get_config(self) -> dict[str, Any]:
        """The arguments of ``__init__`` (saving a pruned model stores them)."""

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> PruningSchedule:
        """The schedule of ``config``: TFMOT's ``{"class_name": ..., "config": {...}}`` (what ``get_config``
        returns) or the arguments alone."""
        return cls(**_unwrapped(config))

    def __repr__(self) -> str:
        arguments = ", ".join(f"{k}={v!r}" for k, v in schedule_arguments(self).items())
        return f"{type(self).__name__}({arguments})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, PruningSchedule)
            and type(self) is type(other)
            and schedule_arguments(self) == schedule_arguments(other)
        )

    def __hash__(self) -> int:
        return hash((type(self), tuple(sorted(schedule_arguments(self).items()))))


def _unwrapped(config: dict[str, Any]) -> dict[str, Any]:
    """The arguments in a schedule's config: TFMOT's format nests them under ``"config"``."""
    if isinstance(config, dict) and "class_name" in config and isinstance(config.get("config"), dict):
        return dict(config["config"])
    return dict(config)


def schedule_arguments(schedule: PruningSchedule) -> dict[str, Any]:
    """The arguments of ``schedule``, from its ``get_config()`` in TFMOT's format or as a plain dict (a schedule
    class of your own may return either)."""
    return _unwrapped(schedule.get_config())


@keras.saving.register_keras_serializable(package="ste")
class ConstantSparsity(PruningSchedule):
    """The same sparsity at every pruning step in ``[begin_step, end_step]``, every ``frequency`` steps (TFMOT's
    ``ConstantSparsity``; ``end_step=-1`` prunes until training ends)."""

    def __init__(self, target_sparsity: float, begin_step: int, end_step: int = -1, frequency: int = 100) -> None:
        owner = "ste.sparsity.ConstantSparsity"
        self.target_sparsity = _sparsity(owner, "target_sparsity", target_sparsity)
        self.begin_step, self.end_step, self.frequency = _steps(owner, begin_step, end_step, frequency, True)

    def __call__(self, step: Any) -> tuple[tf.Tensor, tf.Tensor]:
        should = self.should_prune_in_step(step, self.begin_step, self.end_step, self.frequency)
        return should, tf.constant(self.target_sparsity, tf.float32)

    def get_config(self) -> dict[str, Any]:
        """TFMOT's format: ``{"class_name": "ConstantSparsity", "config": {target_sparsity, begin_step, end_step,
        frequency}}``."""
        return {
            "class_name": type(self).__name__,
            "config": {
                "target_sparsity": self.target_sparsity,
                "begin_step": self.begin_step,
                "end_step": self.end_step,
                "frequency": self.frequency,
            },
        }


@keras.saving.register_keras_serializable(package="ste")
class PolynomialDecay(PruningSchedule):
    """Sparsity rising from ``initial_sparsity`` to ``final_sparsity`` between ``begin_step`` and ``end_step``
    (TFMOT's ``PolynomialDecay``, Zhu & Gupta 2017)::

        p = clip((step - begin_step) / (end_step - begin_step), 0, 1)
        sparsity = final_sparsity + (initial_sparsity - final_sparsity) * (1 - p) ** power

    With ``end_step == begin_step`` (where TFMOT divides zero by zero) ``p`` is 1 from ``begin_step`` on.
    """

    def __init__(
        self,
        initial_sparsity: float,
        final_sparsity: float,
        begin_step: int,
        end_step: int,
        power: float = 3,
        frequency: int = 100,
    ) -> None:
        owner = "ste.sparsity.PolynomialDecay"
        self.initial_sparsity = _sparsity(owner, "initial_sparsity", initial_sparsity)
        self.final_sparsity = _sparsity(owner, "final_sparsity", final_sparsity)
        self.begin_step, self.end_step, self.frequency = _steps(owner, begin_step, end_step, frequency, False)
        if isinstance(power, bool) or not isinstance(power, numbers.Real) or not float(power) > 0:
            kind = number_error(power)
            raise kind(
                f"{owner}: power must be a number > 0 (the exponent of the decay from initial_sparsity to "
                f"final_sparsity); received {power!r}. Fix: pass power=3 (the default, Zhu & Gupta's cubic schedule), "
                f"or power=1 for a linear rise."
            )
        self.power: float = power

    def __call__(self, step: Any) -> tuple[tf.Tensor, tf.Tensor]:
        elapsed = tf.cast(tf.cast(step, tf.int64) - self.begin_step, tf.float32)
        if self.end_step == self.begin_step:  # no steps to decay over: the final sparsity from begin_step on
            p = tf.cast(elapsed >= 0, tf.float32)
        else:
            p = tf.clip_by_value(elapsed / float(self.end_step - self.begin_step), 0.0, 1.0)
        sparsity = self.final_sparsity + (self.initial_sparsity - self.final_sparsity) * tf.pow(
            1.0 - p, float(self.power)
        )
        return self.should_prune_in_step(step, self.begin_step, self.end_step, self.frequency), sparsity

    def get_config(self) -> dict[str, Any]:
        """TFMOT's format: ``{"class_name": "PolynomialDecay", "config": {initial_sparsity, final_sparsity, power,
        begin_step, end_step, frequency}}``."""
        return {
            "class_name": type(self).__name__,
            "config": {
                "initial_sparsity": self.initial_sparsity,
                "final_sparsity": self.final_sparsity,
                "power": self.power,
                "begin_step": self.begin_step,
                "end_step": self.end_step,
                "frequency": self.frequency,
            },
        }
