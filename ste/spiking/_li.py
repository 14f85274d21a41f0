"""The leaky integrator (NIR's ``LI``): ``LICell`` and ``LI``, a readout that never spikes.

``U[t] = β·U[t−1] + X[t]``, ``U[−1] = 0``; the output is the membrane U[t]. There is no threshold, no spike and no
reset, so no surrogate: its gradient is exact. The usual output layer of a spiking classifier (read with
``ste.spiking.Readout("last")`` or ``"max"``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from .._common._arguments import check_bool
from ..errors import ParameterError
from ._cell import LearnedValue, SpikingCell, checked_number
from ._constraint import Interval
from ._layer import SpikingRNN

__all__ = ["LI", "LICell"]

#: What a leaky integrator does not have (it never spikes).
_SPIKING_ONLY = ("threshold", "reset", "detach_reset", "surrogate", "learn_threshold", "learn_surrogate", "emit")


@keras.saving.register_keras_serializable(package="ste.spiking")
class LICell(SpikingCell):
    """One time step of leaky integrators (NIR's ``LI``): ``U[t] = β·U[t−1] + X[t]``, output U[t].

    Args:
        beta: membrane decay β per step, in [0, 1] (NIR: ``1 − dt/τ``).
        learn_beta: make β a trainable variable, kept in [0, 1].
        units: number of neurons (``None``: the input's last axis), as [`SpikingCell`][ste.spiking.SpikingCell].
        **kwargs: Keras layer arguments.

    States: ``[U]``.
    """

    state_names = ("membrane",)
    refused_arguments = _SPIKING_ONLY
    nir_form = "li"
    beta = LearnedValue()

    def __init__(self, beta: float = 0.9, *, learn_beta: bool = False, units: int | None = None, **kwargs: Any) -> None:
        label = type(self).__name__
        given = [key for key in _SPIKING_ONLY if key in kwargs]
        if given:
            raise ParameterError(
                f"{label}: a leaky integrator never spikes, so it takes none of {given}. "
                f"Fix: drop them, or use ste.spiking.LIF(..., emit='membrane') for a spiking neuron's membrane."
            )
        super().__init__(reset="none", emit="membrane", units=units, **kwargs)
        self.beta = checked_number(label, "beta", beta, 0.0, 1.0)
        self.learn_beta = check_bool(type(self).__name__, "learn_beta", learn_beta)

    def learned_parameters(self) -> dict[str, tuple[float, Interval]]:
        out = super().learned_parameters()
        if self.learn_beta:
            out["beta"] = (self.initial("beta"), Interval(0.0, 1.0))
        return out

    def step(self, inputs: tf.Tensor, states: Sequence[tf.Tensor]) -> tuple[tf.Tensor, None, list[tf.Tensor]]:
        return self.value("beta", inputs.dtype) * states[0] + inputs, None, []

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        for key in _SPIKING_ONLY:
            config.pop(key, None)
        config.update(beta=self.initial("beta"), learn_beta=self.learn_beta)
        return config


@keras.saving.register_keras_serializable(package="ste.spiking")
class LI(SpikingRNN):
    """Leaky integrators over a time axis (NIR's ``LI``): ``[batch, time, features]`` -> membrane ``U[t]``.

    The arguments of [`LICell`][ste.spiking.LICell] and [`SpikingRNN`][ste.spiking.SpikingRNN].
    """

    cell_class = LICell
