"""Leaky integrate-and-fire: ``LIFCell`` (one time step, for ``keras.layers.RNN``) and ``LIF`` (over a time axis).

``U[t] = β·U[t−1] + I[t] − R[t]``, ``U[−1] = 0``; ``S[t] = Θ(U[t] − ϑ)`` with the surrogate's gradient; R[t] by the
reset mode (``ϑ·S[t−1]`` for ``"subtract"``). snnTorch's ``Leaky(beta, threshold=1.0, reset_mechanism="subtract")``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from .._common._arguments import check_bool
from ._cell import LearnedValue, SpikingCell, checked_number
from ._constraint import Interval
from ._layer import SpikingRNN

__all__ = ["LIF", "LIFCell"]


@keras.saving.register_keras_serializable(package="ste.spiking")
class LIFCell(SpikingCell):
    """One time step of leaky integrate-and-fire neurons (snnTorch's ``Leaky``), for ``keras.layers.RNN``.

    Args:
        beta: membrane decay β per step, in [0, 1] (snnTorch's ``beta``; ``β = exp(−Δt/τ_mem)``).
        threshold: firing threshold ϑ (> 0).
        learn_beta: make β a trainable variable, kept in [0, 1] after every optimizer step.
        **kwargs: ``reset``, ``detach_reset``, ``surrogate``, ``learn_threshold``, ``learn_surrogate``, ``emit``,
            ``units`` and Keras layer arguments: see [`SpikingCell`][ste.spiking.SpikingCell].

    States: ``[U, S]`` (membrane and last spikes), each ``[batch, units]``.
    """

    beta = LearnedValue()

    def __init__(self, beta: float = 0.9, threshold: float = 1.0, *, learn_beta: bool = False, **kwargs: Any) -> None:
        super().__init__(threshold, **kwargs)
        self.beta = checked_number(type(self).__name__, "beta", beta, 0.0, 1.0)
        self.learn_beta = check_bool(type(self).__name__, "learn_beta", learn_beta)

    def learned_parameters(self) -> dict[str, tuple[float, Interval]]:
        out = super().learned_parameters()
        if self.learn_beta:
            out["beta"] = (self.beta, Interval(0.0, 1.0))
        return out

    def step(self, inputs: tf.Tensor, states: Sequence[tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor, list[tf.Tensor]]:
        membrane, spikes = states[0], states[1]
        threshold = self.value("threshold", inputs.dtype)
        decayed = self.value("beta", inputs.dtype) * membrane
        return self.integrate(decayed, inputs, spikes, threshold), threshold, []

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(beta=self.initial("beta"), learn_beta=self.learn_beta)
        return config


@keras.saving.register_keras_serializable(package="ste.spiking")
class LIF(SpikingRNN):
    """Leaky integrate-and-fire neurons over a time axis: ``[batch, time, features]`` currents -> spikes.

    ``ste.spiking.LIF(beta=0.9, threshold=1.0, reset="subtract", detach_reset=True, surrogate="atan(alpha=2.0)",
    learn_beta=False, learn_threshold=False, return_sequences=True)``. The neuron arguments are those of
    [`LIFCell`][ste.spiking.LIFCell]; the sequence arguments those of [`SpikingRNN`][ste.spiking.SpikingRNN].
    """

    cell_class = LIFCell
