"""Optimizer hyperparameters that are either a number (held in a variable a callback can set) or a schedule."""

from __future__ import annotations

import math
import numbers
from typing import Any

import keras
import tensorflow as tf

from ..errors import ParameterError

__all__ = ["Hyperparameter", "current", "make", "serialize_value"]

#: A number, a ``keras.optimizers.schedules.LearningRateSchedule`` (called with the optimizer's iteration count) or
#: a callable without arguments (as Keras 3 accepts for ``learning_rate``).
Hyperparameter = Any

_Schedule = keras.optimizers.schedules.LearningRateSchedule


def make(optimizer: keras.optimizers.Optimizer, name: str, value: Any, *, positive: bool) -> Any:
    """A float ``value`` becomes a tracked scalar variable of ``optimizer``; a schedule or callable stays as it is."""
    if isinstance(value, _Schedule) or callable(value):
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise ParameterError(
            f"{type(optimizer).__name__}: {name} must be a finite number, a "
            f"keras.optimizers.schedules.LearningRateSchedule or a callable; received {value!r}."
        )
    if float(value) < 0 or (positive and float(value) == 0):
        raise ParameterError(
            f"{type(optimizer).__name__}: {name} must be {'> 0' if positive else '>= 0'}; received {value!r}."
        )
    return optimizer.add_variable(
        shape=(),
        initializer=keras.initializers.Constant(float(value)),
        dtype="float32",
        name=name,
        aggregation="only_first_replica",
    )


def current(value: Any, iterations: Any) -> tf.Tensor:
    """The value in force at step ``iterations``."""
    if isinstance(value, _Schedule):
        return tf.convert_to_tensor(value(iterations))
    if isinstance(value, keras.Variable):
        return value.value
    return tf.convert_to_tensor(value())


def serialize_value(value: Any) -> Any:
    """A float for a variable; the Keras serialization of a schedule or callable."""
    if isinstance(value, keras.Variable):
        return float(value.numpy())
    return keras.saving.serialize_keras_object(value)


def deserialize_value(value: Any, custom_objects: Any = None) -> Any:
    if isinstance(value, dict):
        return keras.saving.deserialize_keras_object(value, custom_objects=custom_objects)
    return value
