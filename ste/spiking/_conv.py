"""``SpikingConv2D``: a convolution and spiking neurons over time, fused into one loop (``_fused``).

``SpikingConv2D(filters, kernel_size, neuron=LIFCell(...))`` computes what
``ste.spiking.TimeDistributed(keras.layers.Conv2D(filters, kernel_size))`` followed by the neuron's layer over time
computes, with the same weights: ``[batch, time, height, width, channels]`` -> ``[batch, time, height', width',
filters]`` spikes. The cells' states are the feature maps flattened (one neuron per position and filter).
"""

from __future__ import annotations

from typing import Any

import keras

from ..errors import CallError, ParameterError
from ._cell import SpikingCell
from ._fused._layers import SynapseLayer
from ._fused._synapses import Conv2DSynapse, Synapse
from ._layer import SpikingRNN

__all__ = ["SpikingConv2D"]


def _pair(where: str, name: str, value: Any) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int) and not isinstance(value, bool) else tuple(value)
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in pair):
        raise ParameterError(f"{where}: {name} must be a positive integer or a pair of them; received {value!r}.")
    return (int(pair[0]), int(pair[1]))


@keras.saving.register_keras_serializable(package="ste.spiking")
class SpikingConv2D(SynapseLayer):
    """A 2-D convolution and spiking neurons over time in one fused loop: ``Conv2D`` at every step, then the neuron.

    Args:
        filters: number of output channels.
        kernel_size: the window, an integer or a pair.
        neuron: the neuron's cell or layer, as [`SpikingDense`][ste.spiking.SpikingDense] (default ``LIFCell()``).
        strides: an integer or a pair (default 1).
        padding: ``"valid"`` (default, as ``keras.layers.Conv2D``) or ``"same"``.
        use_bias: add a bias per filter.
        kernel_initializer: Keras initializer of the ``[kh, kw, channels, filters]`` kernel.
        bias_initializer: Keras initializer of the bias.
        kernel_regularizer: Keras regularizer of the kernel.
        bias_regularizer: Keras regularizer of the bias.
        kernel_constraint: Keras constraint of the kernel.
        bias_constraint: Keras constraint of the bias.
        segment: steps between checkpoints, as [`SpikingDense`][ste.spiking.SpikingDense].
        jit_compile: compile the loops with XLA, as [`SpikingDense`][ste.spiking.SpikingDense].
        **kwargs: Keras layer arguments (``name``, ``dtype``, ...).

    Channels last, no dilation and no groups. The kernel and bias are those of ``keras.layers.Conv2D`` with the same
    arguments (copy them over with ``set_weights``). A gradient of its gradient raises
    :class:`ste.errors.HigherOrderError`.
    """

    def __init__(
        self,
        filters: int,
        kernel_size: int | tuple[int, int],
        neuron: SpikingCell | SpikingRNN | str | None = None,
        *,
        strides: int | tuple[int, int] = 1,
        padding: str = "valid",
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
        if isinstance(filters, bool) or not isinstance(filters, int) or filters < 1:
            raise ParameterError(f"{label}: filters must be a positive integer; received {filters!r}.")
        if not isinstance(padding, str) or padding.lower() not in ("valid", "same"):
            raise ParameterError(f"{label}: padding must be 'valid' or 'same'; received {padding!r}.")
        self.filters = filters
        self.kernel_size = _pair(label, "kernel_size", kernel_size)
        self.strides = _pair(label, "strides", strides)
        self.padding = padding.lower()
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
        if len(frame) != 3 or any(d is None for d in frame):
            raise CallError(
                f"{where} takes [batch, time, height, width, channels] inputs with known frame sizes; received "
                f"frames of shape {frame}. Fix: give the input its frame shape (keras.Input((time, height, width, "
                f"channels)))."
            )
        synapse = Conv2DSynapse(frame, self.filters, self.kernel_size, self.strides, self.padding)
        if min(synapse.out_frame[:2]) < 1:
            raise CallError(
                f"{where}: a {self.kernel_size} window with padding='{self.padding}' does not fit {frame[:2]} frames. "
                f"Fix: padding='same' or a smaller kernel_size."
            )
        return synapse

    def _kernel_shape(self, synapse: Synapse) -> tuple[int, ...]:
        return (*self.kernel_size, synapse.frame[-1], self.filters)

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.update(
            filters=self.filters,
            kernel_size=self.kernel_size,
            strides=self.strides,
            padding=self.padding,
            **self._weights_config(),
        )
        return config
