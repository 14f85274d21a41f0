"""Adaptive leaky integrate-and-fire (Bellec et al. 2018, LSNN): ``ALIFCell`` and ``ALIF``.

``b[t] = ρ·b[t−1] + (1 − ρ)·S[t−1]``, threshold ``A[t] = ϑ₀ + β_a·b[t]``; ``U[t] = β·U[t−1] + I[t] − R[t]`` with
``R[t] = A[t−1]·S[t−1]`` for ``reset="subtract"`` (the threshold the neuron crossed); ``S[t] = Θ(U[t] − A[t])``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from ._cell import checked_number
from ._layer import SpikingRNN
from ._leaky import LeakyCell

__all__ = ["ALIF", "ALIFCell"]


@keras.saving.register_keras_serializable(package="ste.spiking")
class ALIFCell(LeakyCell):
    """One time step of adaptive LIF neurons: each spike raises the threshold, which decays back with ρ.

    Args:
        beta: membrane decay β in [0, 1].
        threshold: baseline threshold ϑ₀ (> 0).
        rho: decay ρ of the adaptation variable b, in [0, 1] (``exp(−Δt/τ_a)``).
        adaptation: β_a ≥ 0, how far b raises the threshold (Bellec et al. use 1.8 in units of ϑ₀).
        **kwargs: ``learn_beta`` and the arguments of [`SpikingCell`][ste.spiking.SpikingCell].

    States: ``[U, S, b]``.
    """

    state_names = ("membrane", "spikes", "adaptation")
    nir_form = None  # NIR has no adaptive-threshold neuron

    def __init__(
        self, beta: float = 0.9, threshold: float = 1.0, *, rho: float = 0.95, adaptation: float = 1.8, **kwargs: Any
    ) -> None:
        super().__init__(beta, threshold, **kwargs)
        self.rho = checked_number("ALIFCell", "rho", rho, 0.0, 1.0)
        self.adaptation = checked_number("ALIFCell", "adaptation", adaptation, 0.0, None)

    @property
    def trainable_drop(self) -> bool:
        return True

    def step(self, inputs: tf.Tensor, states: Sequence[tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor, list[tf.Tensor]]:
        membrane, spikes, adapt = states[0], states[1], states[2]
        dtype = inputs.dtype
        base = self.value("threshold", dtype)
        scale = self.value("adaptation", dtype)
        rho = self.value("rho", dtype)
        new_adapt = rho * adapt + (1 - rho) * spikes
        crossed = base + scale * adapt  # A[t−1], the threshold S[t−1] crossed
        return (
            self.integrate(self.decayed(membrane, dtype), inputs, spikes, crossed),
            base + scale * new_adapt,
            [new_adapt],
        )

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(rho=self.rho, adaptation=self.adaptation)
        return config


@keras.saving.register_keras_serializable(package="ste.spiking")
class ALIF(SpikingRNN):
    """Adaptive LIF neurons over a time axis; the arguments of [`ALIFCell`][ste.spiking.ALIFCell] and
    [`SpikingRNN`][ste.spiking.SpikingRNN]."""

    cell_class = ALIFCell
