"""``SpikingDense``: a dense synapse and spiking neurons over time, fused into one loop (``_fused``).

``SpikingDense(units, neuron=LIFCell(...))`` computes what ``keras.layers.Dense(units)`` followed by the neuron's
layer over time computes (``ste.spiking.LIF``, ``Synaptic``, ...), with the same weights: ``[batch, time, features]``
-> ``[batch, time, units]`` spikes.
"""

from __future__ import annotations

import math
from typing import Any

import keras

from ..errors import CallError, ParameterError
from ._cell import SpikingCell
from ._fused._layers import SynapseLayer
from ._fused._synapses import DenseSynapse, Synapse
from ._layer import SpikingRNN

__all__ = ["SpikingDense"]


@keras.saving.register_keras_serializable(package="ste.spiking")
class SpikingDense(SynapseLayer):
    """A dense synapse and spiking neurons over time in one fused loop: ``Dense(units)`` then the neuron's layer.

    Args:
        units: number of neurons.
        neuron: the neuron's cell (``ste.spiking.LIFCell(beta=0.9)``, ``SynapticCell``, ``ALIFCell``, ``RLIFCell``,
            ``LICell``, ...), a neuron layer (``ste.spiking.LIF(...)``, whose cell is taken) or a registered neuron
            name (``"lif"``, see ``ste.spiking.neurons()``), built with its defaults; default ``LIFCell()``. Its
            dynamics, reset, surrogate and learned parameters are used as they are.
        use_bias: add a bias to the currents (as ``keras.layers.Dense``).
        kernel_initializer: Keras initializer of the ``[features, units]`` kernel.
        bias_initializer: Keras initializer of the bias.
        kernel_regularizer: Keras regularizer of the kernel.
        bias_regularizer: Keras regularizer of the bias.
        kernel_constraint: Keras constraint of the kernel.
        bias_constraint: Keras constraint of the bias.
        segment: steps between the checkpoints the backward pass recomputes from (``None``: ⌈√T⌉; ``1``: keep
            every step's states and recompute nothing but each step's own derivative).
        jit_compile: compile the loops with XLA in a graph (default True: one kernel for the whole sequence; the
            first call compiles for a few seconds). False runs them as TensorFlow ops (slower per step).
        **kwargs: Keras layer arguments (``name``, ``dtype``, ...).

    The kernel and bias are those of ``keras.layers.Dense(units)`` (copy them over with ``set_weights``). Outputs
    and gradients are those of the unfused layers up to the order of floating-point sums (the fused loop sums the
    kernel's gradient step by step). A gradient of its gradient raises :class:`ste.errors.HigherOrderError`. In a
    [`Fused`][ste.spiking.Fused] stack after a [`SpikingConv2D`][ste.spiking.SpikingConv2D] it takes the feature
    maps flattened (``keras.layers.Flatten``'s order).
    """

    def __init__(
        self,
        units: int,
        neuron: SpikingCell | SpikingRNN | str | None = None,
        *,
        use_bias: bool = True,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        kernel_regularizer: Any = None,
        bias_regularizer: Any = None,
        kernel_constraint: Any = None,
        bias_constraint: Any = None,
        segment: int | None = None,
        jit_compile: bool = True,
        **kwargs: Any,
    ) -> None:
        label = type(self).__name__
        if isinstance(units, bool) or not isinstance(units, int) or units < 1:
            raise ParameterError(f"{label}: units must be a positive integer; received {units!r}.")
        cell = neuron.cell if isinstance(neuron, SpikingRNN) else neuron
        if isinstance(cell, SpikingCell) and cell.units is not None and cell.units != units:
            raise ParameterError(f"{label}: units={units}, but the neuron has units={cell.units}. Fix: leave it None.")
        self.units = units
        super().__init__(
            neuron,
            use_bias,
            kernel_initializer,
            bias_initializer,
            kernel_regularizer,
            bias_regularizer,
            kernel_constraint,
            bias_constraint,
            segment,
            jit_compile,
            **kwargs,
        )

    def _synapse_for(self, where: str, frame: tuple[Any, ...]) -> Synapse:
        if len(frame) != 1 or frame[0] is None:
            raise CallError(
                f"{where} takes [batch, time, features] inputs with a known feature axis; received frames of shape "
                f"{frame}. Fix: flatten feature maps per step first (ste.spiking.TimeDistributed("
                f"keras.layers.Flatten())), or put the layer in a ste.spiking.Fused stack after a SpikingConv2D."
            )
        return DenseSynapse(int(frame[0]), self.units)

    def _stacked_shape(self, shape: tuple[Any, ...]) -> tuple[Any, ...]:
        return (shape[0], shape[1], math.prod(shape[2:]))

    def _kernel_shape(self, synapse: Synapse) -> tuple[int, ...]:
        return (synapse.inputs, self.units)

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.update(units=self.units, **self._weights_config())
        return config
