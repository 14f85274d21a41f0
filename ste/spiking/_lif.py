"""Leaky integrate-and-fire: ``LIFCell`` (one time step, for ``keras.layers.RNN``) and ``LIF`` (over a time axis).

``U[t] = β·U[t−1] + I[t] − R[t]``, ``U[−1] = 0``; ``S[t] = Θ(U[t] − ϑ)`` with the surrogate's gradient; R[t] by the
reset mode (``ϑ·S[t−1]`` for ``"subtract"``). snnTorch's ``Leaky(beta, threshold=1.0, reset_mechanism="subtract")``.
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
import tensorflow as tf

from ._layer import SpikingRNN
from ._leaky import LeakyCell

__all__ = ["LIF", "LIFCell"]


@keras.saving.register_keras_serializable(package="ste.spiking")
class LIFCell(LeakyCell):
    """One time step of leaky integrate-and-fire neurons (snnTorch's ``Leaky``), for ``keras.layers.RNN``.

    Args:
        beta: membrane decay β per step, in [0, 1] (snnTorch's ``beta``; ``β = exp(−Δt/τ_mem)``).
        threshold: firing threshold ϑ (> 0).
        learn_beta: make β a trainable variable, kept in [0, 1] after every optimizer step.
        **kwargs: ``reset``, ``detach_reset``, ``surrogate``, ``learn_threshold``, ``learn_surrogate``, ``emit``,
            ``units`` and Keras layer arguments: see [`SpikingCell`][ste.spiking.SpikingCell].

    States: ``[U, S]`` (membrane and last spikes), each ``[batch, units]``.
    """

    nir_form = "lif"

    def step(self, inputs: tf.Tensor, states: Sequence[tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor, list[tf.Tensor]]:
        membrane, spikes = states[0], states[1]
        threshold = self.value("threshold", inputs.dtype)
        return self.integrate(self.decayed(membrane, inputs.dtype), inputs, spikes, threshold), threshold, []


@keras.saving.register_keras_serializable(package="ste.spiking")
class LIF(SpikingRNN):
    """Leaky integrate-and-fire neurons over a time axis: ``[batch, time, features]`` currents -> spikes.

    ``ste.spiking.LIF(beta=0.9, threshold=1.0, reset="subtract", detach_reset=True, surrogate="atan(alpha=2.0)",
    learn_beta=False, learn_threshold=False, return_sequences=True)``. The neuron arguments are those of
    [`LIFCell`][ste.spiking.LIFCell]; the sequence arguments those of [`SpikingRNN`][ste.spiking.SpikingRNN].
    """

    cell_class = LIFCell
