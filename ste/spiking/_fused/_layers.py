"""``SynapseLayer`` (what ``SpikingDense`` and ``SpikingConv2D`` share) and ``Fused``: synapses and spiking neurons
over time, run as one loop.

A synapse layer computes what its Keras layer (``Dense``, ``Conv2D``) followed by the neuron's layer over time
computes, with the same weights. ``Fused([...])`` runs a stack of them in one loop, each step through every layer.
Both train with one custom gradient over the whole sequence (``_fused``): the backward pass recomputes the states
from checkpoints, so it keeps far less than the unfused layers (which keep float spikes and the gradient of every
layer boundary for the whole sequence), at the price of running the forward steps again.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from ..._common._arguments import check_bool
from ..._patches import apply as apply_patches
from ...errors import CallError, InputError, ParameterError
from .._cell import SpikingCell
from .._layer import SpikingRNN, time_mask
from .._lif import LIFCell
from .._names import NEURONS
from ._loop import Stage, fused_stack
from ._synapses import Synapse

__all__ = ["Fused", "SynapseLayer"]


class _Loop:
    """The fused loop's options, shared by the synapse layers and ``Fused``: checked, and in the config."""

    segment: int | None
    jit_compile: bool

    def _set_loop(self, where: str, segment: Any, jit_compile: Any) -> None:
        if segment is not None and (isinstance(segment, bool) or not isinstance(segment, int) or segment < 1):
            raise ParameterError(f"{where}: segment must be a positive integer or None; received {segment!r}.")
        self.segment = segment
        self.jit_compile = check_bool(where, "jit_compile", jit_compile)

    def _loop_config(self) -> dict[str, Any]:
        return {"segment": self.segment, "jit_compile": self.jit_compile}


def _sequences(where: str, inputs: Any, dtype: Any) -> tf.Tensor:
    tensor = tf.convert_to_tensor(inputs)
    if not (tensor.dtype.is_integer or tensor.dtype == tf.bool or tensor.dtype.is_floating):
        raise InputError(f"{where} takes floating, integer or boolean inputs; received {tensor.dtype.name}.")
    return tf.cast(tensor, dtype)


class SynapseLayer(_Loop, keras.layers.Layer):  # type: ignore[misc]
    """A synapse and spiking neurons over time in one fused loop (``SpikingDense``, ``SpikingConv2D``).

    Subclasses say which frames they take (:meth:`_synapse_for`, which checks them) and their kernel's shape; the
    neuron, the weights, the loop and the config are here.
    """

    def __init__(
        self,
        neuron: SpikingCell | SpikingRNN | str | None,
        use_bias: bool,
        kernel_initializer: Any,
        bias_initializer: Any,
        kernel_regularizer: Any,
        bias_regularizer: Any,
        kernel_constraint: Any,
        bias_constraint: Any,
        segment: int | None,
        jit_compile: bool,
        **kwargs: Any,
    ) -> None:
        apply_patches()  # once per process: the Keras and TensorFlow patches ste needs (ste/_patches.py)
        super().__init__(**kwargs)
        self.supports_masking = True  # a [batch, time] mask skips steps (as the neuron layers do) and passes on
        label = type(self).__name__
        if isinstance(neuron, SpikingRNN):
            neuron = neuron.cell
        if neuron is None:
            neuron = LIFCell()
        if isinstance(neuron, str):
            neuron = NEURONS.lookup(neuron, label)()
        if not isinstance(neuron, SpikingCell):
            raise ParameterError(
                f"{label}: neuron must be a spiking cell (ste.spiking.LIFCell(...), SynapticCell, ...), a neuron "
                f"layer (ste.spiking.LIF(...)) or a registered neuron name ({', '.join(NEURONS.names())}); received "
                f"{type(neuron).__name__}."
            )
        self.neuron = neuron
        self.use_bias = check_bool(label, "use_bias", use_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self._set_loop(label, segment, jit_compile)
        self.synapse: Synapse | None = None

    @abc.abstractmethod
    def _synapse_for(self, where: str, frame: tuple[Any, ...]) -> Synapse:
        """The synapse for input frames of this shape (``[batch, time, *frame]`` inputs), or a ``CallError``."""

    @abc.abstractmethod
    def _kernel_shape(self, synapse: Synapse) -> tuple[int, ...]:
        """The kernel's shape (that of the Keras layer this layer's synapse is)."""

    def _output_frame(self) -> tuple[int, ...]:
        """One step's output shape (after ``build``): the synapse's."""
        assert self.synapse is not None, "built"
        return self.synapse.out_frame

    def _stacked_shape(self, shape: tuple[Any, ...]) -> tuple[Any, ...]:
        """The input shape this layer is built for in a ``Fused`` stack, after a layer with outputs ``shape``."""
        return shape

    def build(self, input_shape: Any) -> None:
        where = f"{type(self).__name__} '{self.name}'"
        shape = tuple(input_shape)
        if len(shape) < 3:
            raise CallError(
                f"{where} takes [batch, time, ...] inputs; received shape {shape}. Fix: add a time axis "
                f"(ste.spiking.rate_encode or keras.layers.RepeatVector)."
            )
        if shape[1] == 0:
            raise CallError(f"{where}: the input has 0 time steps; a spiking layer needs at least one.")
        self.synapse = self._synapse_for(where, shape[2:])
        units = self.synapse.units
        if self.neuron.units is not None and self.neuron.units != units:
            raise ParameterError(
                f"{where}: the layer has {units} neurons, but its neuron cell has units={self.neuron.units}. Fix: "
                f"leave the cell's units None."
            )
        self.kernel = self.add_weight(
            name="kernel",
            shape=self._kernel_shape(self.synapse),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(
                name="bias",
                shape=(self.synapse.out_frame[-1],),
                initializer=self.bias_initializer,
                regularizer=self.bias_regularizer,
                constraint=self.bias_constraint,
            )
        if not self.neuron.built:
            self.neuron.build((shape[0], units))
        self.built = True

    def stage(self) -> Stage:
        """This layer's part of a fused loop."""
        assert self.synapse is not None
        return Stage(self.neuron, self.synapse, self.use_bias, tuple(self.neuron._learned))

    def values(self, dtype: Any) -> tuple[tf.Tensor, tf.Tensor | None, list[tf.Tensor]]:
        """The kernel and bias in ``dtype`` and the neuron's learned parameters (read once, outside the loop)."""
        kernel = tf.cast(self.kernel.value, dtype)
        bias = None if self.bias is None else tf.cast(self.bias.value, dtype)
        return kernel, bias, [tf.identity(v.value) for v in self.neuron._learned.values()]

    def call(self, inputs: Any, mask: Any = None) -> tf.Tensor:
        where = f"{type(self).__name__} '{self.name}'"
        return _run(where, [self], inputs, self.compute_dtype, self.segment, self.jit_compile, mask)

    def compute_output_shape(self, input_shape: Any) -> tuple[Any, ...]:
        if not self.built:
            self.build(input_shape)
        return (input_shape[0], input_shape[1], *self._output_frame())

    def _weights_config(self) -> dict[str, Any]:
        return dict(
            neuron=keras.saving.serialize_keras_object(self.neuron),
            use_bias=self.use_bias,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
            kernel_regularizer=keras.regularizers.serialize(self.kernel_regularizer),
            bias_regularizer=keras.regularizers.serialize(self.bias_regularizer),
            kernel_constraint=keras.constraints.serialize(self.kernel_constraint),
            bias_constraint=keras.constraints.serialize(self.bias_constraint),
            **self._loop_config(),
        )

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Any:
        config = dict(config)
        config["neuron"] = keras.saving.deserialize_keras_object(config["neuron"])
        return cls(**config)


def _run(
    where: str,
    layers: Sequence[SynapseLayer],
    inputs: Any,
    dtype: Any,
    segment: int | None,
    jit_compile: bool,
    mask: Any = None,
) -> tf.Tensor:
    x = _sequences(where, inputs, dtype)
    keep = time_mask(where, mask, x.shape)
    shape = tf.shape(x)
    flat = tf.reshape(x, tf.stack([shape[0], shape[1], -1]))  # frames flat (Keras's Flatten order)
    flat.set_shape([x.shape[0], x.shape[1], math.prod(x.shape[2:])])
    kernels, biases, parameters = [], [], []
    for layer in layers:
        kernel, bias, values = layer.values(dtype)
        kernels.append(kernel)
        biases.append(bias)
        parameters.append(values)
    stages = [layer.stage() for layer in layers]
    out = fused_stack(
        flat, stages, kernels, biases, parameters, segment=segment, where=where, jit_compile=jit_compile, mask=keep
    )
    frame = layers[-1]._output_frame()
    result = tf.reshape(out, tf.concat([shape[:2], frame], axis=0))
    result.set_shape([x.shape[0], x.shape[1], *frame])
    return result


@keras.saving.register_keras_serializable(package="ste.spiking")
class Fused(_Loop, keras.layers.Layer):  # type: ignore[misc]
    """A stack of ``SpikingConv2D`` and ``SpikingDense`` layers run as one loop: at every step, every layer in turn.

    ``Fused([SpikingDense(256, LIFCell(0.9)), SpikingDense(10, LIFCell(0.9))])`` computes what the two layers one
    after the other compute (and what ``Dense(256), LIF(0.9), Dense(10), LIF(0.9)`` computes), but the spikes and
    gradients between the layers exist one step at a time: the backward pass keeps only the checkpoints of every
    layer's states (spikes as bits) and one segment of them. A ``SpikingDense`` after a ``SpikingConv2D`` takes its
    feature maps flattened (as ``keras.layers.Flatten``).

    Args:
        layers: the ``SpikingConv2D`` and ``SpikingDense`` layers, in order.
        segment: steps between checkpoints, as [`SpikingDense`][ste.spiking.SpikingDense] (``None``: ⌈√T⌉).
        jit_compile: compile the loop with XLA in a graph, as [`SpikingDense`][ste.spiking.SpikingDense].
        **kwargs: Keras layer arguments.

    The layers' own ``segment`` and ``jit_compile`` are not used inside the stack. A Keras mask (``[batch, time]``,
    from ``keras.layers.Masking`` or ``mask=``) skips steps as the neuron layers do: every layer keeps its states and
    outputs 0 there.
    """

    def __init__(
        self, layers: Sequence[SynapseLayer], *, segment: int | None = None, jit_compile: bool = True, **kwargs: Any
    ) -> None:
        apply_patches()  # once per process: the Keras and TensorFlow patches ste needs (ste/_patches.py)
        super().__init__(**kwargs)
        self.supports_masking = True  # a [batch, time] mask skips steps (as the neuron layers do) and passes on
        label = type(self).__name__
        given: list[Any] = list(layers) if isinstance(layers, (list, tuple)) else [layers]
        if not given or not all(isinstance(layer, SynapseLayer) for layer in given):
            raise ParameterError(
                f"{label}: layers must be a non-empty list of ste.spiking.SpikingConv2D and SpikingDense layers; "
                f"received {[type(layer).__name__ for layer in given]}."
            )
        self.fused_layers: list[SynapseLayer] = given
        self._set_loop(label, segment, jit_compile)

    def build(self, input_shape: Any) -> None:
        shape = tuple(input_shape)
        if len(shape) < 3:
            raise CallError(
                f"{type(self).__name__} '{self.name}' takes [batch, time, ...] inputs; received shape {shape}. Fix: "
                f"add a time axis (ste.spiking.rate_encode or keras.layers.RepeatVector)."
            )
        for layer in self.fused_layers:
            if not layer.built:
                layer.build(layer._stacked_shape(shape))
            shape = (shape[0], shape[1], *layer._output_frame())
        self.built = True

    def call(self, inputs: Any, mask: Any = None) -> tf.Tensor:
        where = f"{type(self).__name__} '{self.name}'"
        return _run(where, self.fused_layers, inputs, self.compute_dtype, self.segment, self.jit_compile, mask)

    def compute_output_shape(self, input_shape: Any) -> tuple[Any, ...]:
        if not self.built:
            self.build(input_shape)
        return (input_shape[0], input_shape[1], *self.fused_layers[-1]._output_frame())

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.update(
            layers=[keras.saving.serialize_keras_object(layer) for layer in self.fused_layers], **self._loop_config()
        )
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Fused:
        config = dict(config)
        config["layers"] = [keras.saving.deserialize_keras_object(layer) for layer in config["layers"]]
        return cls(**config)
