"""Current-based synaptic neurons (snnTorch's ``Synaptic``, NIR's ``CubaLIF``): ``SynapticCell`` and ``Synaptic``.

``I_syn[t] = α·I_syn[t−1] + X[t]``; ``U[t] = β·U[t−1] + I_syn[t] − R[t]`` (the membrane takes the new current, as
snnTorch and NIR's CubaLIF); ``S[t] = Θ(U[t] − ϑ)``. The reset R[t] is that of LIF (the previous step's spike), so
with ``reset="zero"`` the membrane (not the synaptic current) is set to 0 after a spike, as NIR's CubaLIF.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from .._common._arguments import check_bool
from ._cell import LearnedValue, checked_number
from ._constraint import Interval
from ._layer import SpikingRNN
from ._leaky import LeakyCell

__all__ = ["Synaptic", "SynapticCell"]


@keras.saving.register_keras_serializable(package="ste.spiking")
class SynapticCell(LeakyCell):
    """One time step of current-based synaptic LIF neurons (snnTorch's ``Synaptic``, NIR's ``CubaLIF``).

    Args:
        alpha: synaptic current decay α per step, in [0, 1] (``α = exp(−Δt/τ_syn)``; NIR: ``1 − dt/τ_syn``).
        learn_alpha: make α a trainable variable, kept in [0, 1].
        *args: ``beta`` and ``threshold``, as [`LIFCell`][ste.spiking.LIFCell].
        **kwargs: the other arguments of [`LIFCell`][ste.spiking.LIFCell] (``learn_beta``, ``reset``,
            ``detach_reset``, ``surrogate``, ``learn_threshold``, ``learn_surrogate``, ``emit``, ``units``) and
            Keras layer arguments (``name``, ``dtype``, ...); ``inspect.signature(SynapticCell)`` lists them all.

    States: ``[U, S, I_syn]`` (membrane, last spikes, synaptic current), each ``[batch, units]``.
    """

    state_names = ("membrane", "spikes", "current")
    nir_form = "cuba_lif"
    alpha = LearnedValue()

    def __init__(self, alpha: float = 0.9, *args: Any, learn_alpha: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # LeakyCell's arguments: beta, threshold, reset, surrogate, ...
        self.alpha = checked_number(type(self).__name__, "alpha", alpha, 0.0, 1.0)
        self.learn_alpha = check_bool(type(self).__name__, "learn_alpha", learn_alpha)

    def learned_parameters(self) -> dict[str, tuple[float, Interval]]:
        out = super().learned_parameters()
        if self.learn_alpha:
            out["alpha"] = (self.initial("alpha"), Interval(0.0, 1.0))
        return out

    def synaptic_input(self, inputs: tf.Tensor, states: Sequence[tf.Tensor]) -> tf.Tensor:
        """What the synapse adds to its current at this step (the input; recurrent neurons add their spikes)."""
        return inputs

    def step(self, inputs: tf.Tensor, states: Sequence[tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor, list[tf.Tensor]]:
        current = self.value("alpha", inputs.dtype) * states[2] + self.synaptic_input(inputs, states)
        membrane, spikes = states[0], states[1]
        threshold = self.value("threshold", inputs.dtype)
        return self.integrate(self.decayed(membrane, inputs.dtype), current, spikes, threshold), threshold, [current]

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(alpha=self.initial("alpha"), learn_alpha=self.learn_alpha)
        return config


@keras.saving.register_keras_serializable(package="ste.spiking")
class Synaptic(SpikingRNN):
    """Current-based synaptic LIF neurons over a time axis (snnTorch's ``Synaptic``, NIR's ``CubaLIF``).

    The neuron arguments are those of [`SynapticCell`][ste.spiking.SynapticCell]; the sequence arguments those of
    [`SpikingRNN`][ste.spiking.SpikingRNN]. ``return_state=True`` returns ``[U, S, I_syn]``.
    """

    cell_class = SynapticCell
