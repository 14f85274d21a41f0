"""Readouts: a spike train or membrane trace ``[batch, time, units]`` -> one vector per sample ``[batch, units]``.

Functions (:func:`spike_count`, :func:`spike_rate`, :func:`last_membrane`, :func:`max_membrane`) and the Keras
layer :class:`Readout` that applies one of them inside a model. A membrane trace comes from a spiking layer built
with ``emit="membrane"`` (with ``reset="none"`` it is a leaky integrator: snnTorch's usual output layer).
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from .._patches import apply as apply_patches
from ..errors import CallError, ParameterError

__all__ = ["Readout", "last_membrane", "max_membrane", "spike_count", "spike_rate"]


def _check_rank(shape: Any, where: str) -> None:
    """A readout reduces axis 1, time: an input of rank < 3 is refused, not reduced over its units."""
    if shape is not None and len(shape) < 3:
        raise CallError(
            f"{where}: expected a spike train or membrane trace [batch, time, units]; received shape "
            f"{tuple(shape)}, which would reduce axis 1 (the units of a [batch, units] input). Fix: pass "
            f"the whole sequence (return_sequences=True), or x[:, :, None] for a single unit."
        )


def _sequence(values: Any, where: str) -> tf.Tensor:
    tensor = tf.convert_to_tensor(values)
    _check_rank(None if tensor.shape.rank is None else tensor.shape, where)
    return tensor


def spike_count(spikes: Any) -> tf.Tensor:
    """Number of spikes per neuron over the time axis (axis 1)."""
    return tf.reduce_sum(_sequence(spikes, "spike_count"), axis=1)


def spike_rate(spikes: Any) -> tf.Tensor:
    """Spikes per step per neuron (the count divided by the number of steps)."""
    return tf.reduce_mean(_sequence(spikes, "spike_rate"), axis=1)


def last_membrane(membrane: Any) -> tf.Tensor:
    """The membrane potential at the last step."""
    return _sequence(membrane, "last_membrane")[:, -1]


def max_membrane(membrane: Any) -> tf.Tensor:
    """The largest membrane potential over the time axis, per neuron (gradient to the step where it is reached)."""
    return tf.reduce_max(_sequence(membrane, "max_membrane"), axis=1)


_MODES = {"count": spike_count, "rate": spike_rate, "last": last_membrane, "max": max_membrane}


@keras.saving.register_keras_serializable(package="ste.spiking")
class Readout(keras.layers.Layer):  # type: ignore[misc]
    """Reduce the time axis: ``mode`` is ``"count"`` (default), ``"rate"``, ``"last"`` or ``"max"``."""

    def __init__(self, mode: str = "count", **kwargs: Any) -> None:
        apply_patches()  # once per process: the Keras and TensorFlow patches ste needs (ste/_patches.py)
        if mode not in _MODES:
            raise ParameterError(f"Readout: mode must be one of {sorted(_MODES)}; received {mode!r}.")
        super().__init__(**kwargs)
        self.mode = mode

    def build(self, input_shape: Any) -> None:
        _check_rank(input_shape, f"Readout '{self.name}'")
        self.built = True

    def call(self, inputs: Any) -> tf.Tensor:
        return _MODES[self.mode](inputs)

    def compute_output_shape(self, input_shape: Any) -> tuple[Any, ...]:
        return (input_shape[0], *input_shape[2:])

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config["mode"] = self.mode
        return config
