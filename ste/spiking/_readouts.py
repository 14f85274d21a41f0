"""Readouts: a spike train or membrane trace ``[batch, time, units]`` -> one vector per sample ``[batch, units]``.

Functions (:func:`spike_count`, :func:`spike_rate`, :func:`last_membrane`, :func:`max_membrane`) and the Keras
layer :class:`Readout` that applies one of them inside a model. A membrane trace comes from a spiking layer built
with ``emit="membrane"`` (with ``reset="none"`` it is a leaky integrator: snnTorch's usual output layer).
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from .._errors import ParameterError

__all__ = ["Readout", "last_membrane", "max_membrane", "spike_count", "spike_rate"]


def spike_count(spikes: Any) -> tf.Tensor:
    """Number of spikes per neuron over the time axis (axis 1)."""
    return tf.reduce_sum(spikes, axis=1)


def spike_rate(spikes: Any) -> tf.Tensor:
    """Spikes per step per neuron (the count divided by the number of steps)."""
    return tf.reduce_mean(spikes, axis=1)


def last_membrane(membrane: Any) -> tf.Tensor:
    """The membrane potential at the last step."""
    return tf.convert_to_tensor(membrane)[:, -1]


def max_membrane(membrane: Any) -> tf.Tensor:
    """The largest membrane potential over the time axis, per neuron (gradient to the step where it is reached)."""
    return tf.reduce_max(membrane, axis=1)


_MODES = {"count": spike_count, "rate": spike_rate, "last": last_membrane, "max": max_membrane}


@keras.saving.register_keras_serializable(package="ste.spiking")
class Readout(keras.layers.Layer):  # type: ignore[misc]
    """Reduce the time axis: ``mode`` is ``"count"`` (default), ``"rate"``, ``"last"`` or ``"max"``."""

    def __init__(self, mode: str = "count", **kwargs: Any) -> None:
        if mode not in _MODES:
            raise ParameterError(f"Readout: mode must be one of {sorted(_MODES)}; received {mode!r}.")
        super().__init__(**kwargs)
        self.mode = mode

    def call(self, inputs: Any) -> tf.Tensor:
        return _MODES[self.mode](inputs)

    def compute_output_shape(self, input_shape: Any) -> tuple[Any, ...]:
        return (input_shape[0], *input_shape[2:])

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config["mode"] = self.mode
        return config
