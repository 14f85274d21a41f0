"""Integrate-and-fire (no leak, β = 1): ``IFCell`` and ``IF`` (SpikingJelly's ``IFNode``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from ..errors import ParameterError
from ._layer import SpikingRNN
from ._leaky import LeakyCell

__all__ = ["IF", "IFCell"]


@keras.saving.register_keras_serializable(package="ste.spiking")
class IFCell(LeakyCell):
    """One time step of integrate-and-fire neurons: ``U[t] = U[t−1] + I[t] − R[t]`` (a LIF with β = 1).

    Args:
        threshold: firing threshold ϑ (> 0).
        **kwargs: ``reset``, ``detach_reset``, ``surrogate``, ``learn_threshold``, ``learn_surrogate``, ``emit``,
            ``units``: see [`SpikingCell`][ste.spiking.SpikingCell].
    """

    refused_arguments = ("beta", "learn_beta")
    nir_form = "if"

    def __init__(self, threshold: float = 1.0, **kwargs: Any) -> None:
        for key in self.refused_arguments:
            if key in kwargs:
                raise ParameterError(
                    f"IFCell: an integrate-and-fire neuron has no leak (β = 1); received {key}={kwargs[key]!r}. "
                    f"Fix: use ste.spiking.LIF / LIFCell for a leaky neuron."
                )
        super().__init__(1.0, threshold, **kwargs)

    def step(self, inputs: tf.Tensor, states: Sequence[tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor, list[tf.Tensor]]:
        membrane, spikes = states[0], states[1]
        threshold = self.value("threshold", inputs.dtype)
        return self.integrate(self.decayed(membrane, inputs.dtype), inputs, spikes, threshold), threshold, []

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        del config["beta"], config["learn_beta"]
        return config


@keras.saving.register_keras_serializable(package="ste.spiking")
class IF(SpikingRNN):
    """Integrate-and-fire neurons over a time axis; the arguments of [`IFCell`][ste.spiking.IFCell] and
    [`SpikingRNN`][ste.spiking.SpikingRNN]."""

    cell_class = IFCell
