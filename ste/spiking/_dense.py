"""``SpikingDense`` and ``Fused``: dense synapses and spiking neurons over time, fused into one loop.

``SpikingDense(units, neuron=LIFCell(...))`` computes what ``keras.layers.Dense(units)`` followed by the neuron's
layer over time computes (``ste.spiking.LIF``, ``Synaptic``, ...), with the same weights: ``[batch, time, features]``
-> ``[batch, time, units]`` spikes. ``Fused([SpikingDense(256, ...), SpikingDense(10, ...)])`` runs a stack of them
in one loop, each step through every layer. Both train with one custom gradient over the whole sequence
(``_fused``): the backward pass recomputes the states from checkpoints, so it keeps far less than the unfused layers
(which keep float spikes and the gradient of every layer boundary for the whole sequence), at the price of running
the forward steps again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from .._arguments import check_bool
from .._errors import CallError, InputError, ParameterError
from ._cell import SpikingCell
from ._fused import Stage, fused_dense
from ._layer import SpikingRNN
from ._lif import LIFCell

__all__ = ["Fused", "SpikingDense"]


class _Loop:
    """The fused loop's options, shared by ``SpikingDense`` and ``Fused``: checked, and in the config."""

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
    if tensor.dtype.is_integer or tensor.dtype == tf.bool:
        return tf.cast(tensor, dtype)
    if not tensor.dtype.is_floating:
        raise InputError(f"{where} takes floating, integer or boolean inputs; received {tensor.dtype.name}.")
    return tf.cast(tensor, dtype)


def _check_shape(where: str, shape: Any) -> None:
    if len(shape) != 3 or shape[-1] is None:
        raise CallError(
            f"{where} takes [batch, time, features] inputs with a known feature axis; received shape {tuple(shape)}. "
            f"Fix: flatten feature maps per step first (ste.spiking.TimeDistributed(keras.layers.Flatten()))."
        )
    if shape[1] == 0:
        raise CallError(f"{where}: the input has 0 time steps; a spiking layer needs at least one.")


@keras.saving.register_keras_serializable(package="ste.spiking")
class SpikingDense(_Loop, keras.layers.Layer):  # type: ignore[misc]
    """A dense synapse and spiking neurons over time in one fused loop: ``Dense(units)`` then the neuron's layer.

    Args:
        units: number of neurons.
        neuron: the neuron's cell (``ste.spiking.LIFCell(beta=0.9)``, ``SynapticCell``, ``ALIFCell``, ``RLIFCell``,
            ``LICell``, ...) or a neuron layer (``ste.spiking.LIF(...)``, whose cell is taken); default
            ``LIFCell()``. Its dynamics, reset, surrogate and learned parameters are used as they are.
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
    kernel's gradient step by step). A gradient of its gradient raises :class:`ste.HigherOrderError`.
    """

    def __init__(
        self,
        units: int,
        neuron: SpikingCell | SpikingRNN | None = None,
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
        super().__init__(**kwargs)
        label = type(self).__name__
        if isinstance(units, bool) or not isinstance(units, int) or units < 1:
            raise ParameterError(f"{label}: units must be a positive integer; received {units!r}.")
        if isinstance(neuron, SpikingRNN):
            neuron = neuron.cell
        if neuron is None:
            neuron = LIFCell()
        if not isinstance(neuron, SpikingCell):
            raise ParameterError(
                f"{label}: neuron must be a spiking cell (ste.spiking.LIFCell(...), SynapticCell, ...) or a neuron "
                f"layer (ste.spiking.LIF(...)); received {type(neuron).__name__}."
            )
        if neuron.units is not None and neuron.units != units:
            raise ParameterError(
                f"{label}: units={units}, but the neuron has units={neuron.units}. Fix: leave it None."
            )
        self.units = units
        self.neuron = neuron
        self.use_bias = check_bool(label, "use_bias", use_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self._set_loop(label, segment, jit_compile)

    def build(self, input_shape: Any) -> None:
        _check_shape(f"{type(self).__name__} '{self.name}'", input_shape)
        self.kernel = self.add_weight(
            name="kernel",
            shape=(int(input_shape[-1]), self.units),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(
                name="bias",
                shape=(self.units,),
                initializer=self.bias_initializer,
                regularizer=self.bias_regularizer,
                constraint=self.bias_constraint,
            )
        if not self.neuron.built:
            self.neuron.build((input_shape[0], self.units))
        self.built = True

    def stage(self) -> Stage:
        """This layer's part of a fused loop."""
        return Stage(self.neuron, self.use_bias, tuple(self.neuron._learned))

    def values(self, dtype: Any) -> tuple[tf.Tensor, tf.Tensor | None, list[tf.Tensor]]:
        """The kernel and bias in ``dtype`` and the neuron's learned parameters (read once, outside the loop)."""
        kernel = tf.cast(self.kernel.value, dtype)
        bias = None if self.bias is None else tf.cast(self.bias.value, dtype)
        return kernel, bias, [tf.identity(v.value) for v in self.neuron._learned.values()]

    def call(self, inputs: Any) -> tf.Tensor:
        where = f"{type(self).__name__} '{self.name}'"
        return _run(where, [self], inputs, self.compute_dtype, self.segment, self.jit_compile)

    def compute_output_shape(self, input_shape: Any) -> tuple[Any, ...]:
        return (input_shape[0], input_shape[1], self.units)

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.update(
            units=self.units,
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
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> SpikingDense:
        config = dict(config)
        config["neuron"] = keras.saving.deserialize_keras_object(config["neuron"])
        return cls(**config)


def _run(
    where: str, layers: Sequence[SpikingDense], inputs: Any, dtype: Any, segment: int | None, jit_compile: bool
) -> tf.Tensor:
    x = _sequences(where, inputs, dtype)
    kernels, biases, parameters = [], [], []
    for layer in layers:
        kernel, bias, values = layer.values(dtype)
        kernels.append(kernel)
        biases.append(bias)
        parameters.append(values)
    stages = [layer.stage() for layer in layers]
    return fused_dense(x, stages, kernels, biases, parameters, segment=segment, where=where, jit_compile=jit_compile)


@keras.saving.register_keras_serializable(package="ste.spiking")
class Fused(_Loop, keras.layers.Layer):  # type: ignore[misc]
    """A stack of ``SpikingDense`` layers run as one loop: at every step, every layer in turn.

    ``Fused([SpikingDense(256, LIFCell(0.9)), SpikingDense(10, LIFCell(0.9))])`` computes what the two layers one
    after the other compute (and what ``Dense(256), LIF(0.9), Dense(10), LIF(0.9)`` computes), but the spikes and
    gradients between the layers exist one step at a time: the backward pass keeps only the checkpoints of every
    layer's states (spikes as bits) and one segment of them.

    Args:
        layers: the ``SpikingDense`` layers, in order.
        segment: steps between checkpoints, as [`SpikingDense`][ste.spiking.SpikingDense] (``None``: ⌈√T⌉).
        jit_compile: compile the loop with XLA in a graph, as [`SpikingDense`][ste.spiking.SpikingDense].
        **kwargs: Keras layer arguments.

    The layers' own ``segment`` and ``jit_compile`` are not used inside the stack.
    """

    def __init__(
        self, layers: Sequence[SpikingDense], *, segment: int | None = None, jit_compile: bool = True, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        label = type(self).__name__
        given: list[Any] = list(layers) if isinstance(layers, (list, tuple)) else [layers]
        if not given or not all(isinstance(layer, SpikingDense) for layer in given):
            raise ParameterError(
                f"{label}: layers must be a non-empty list of ste.spiking.SpikingDense layers; received "
                f"{[type(layer).__name__ for layer in given]}."
            )
        self.fused_layers: list[SpikingDense] = given
        self._set_loop(label, segment, jit_compile)

    def build(self, input_shape: Any) -> None:
        _check_shape(f"{type(self).__name__} '{self.name}'", input_shape)
        shape = tuple(input_shape)
        for layer in self.fused_layers:
            if not layer.built:
                layer.build(shape)
            shape = layer.compute_output_shape(shape)
        self.built = True

    def call(self, inputs: Any) -> tf.Tensor:
        where = f"{type(self).__name__} '{self.name}'"
        return _run(where, self.fused_layers, inputs, self.compute_dtype, self.segment, self.jit_compile)

    def compute_output_shape(self, input_shape: Any) -> tuple[Any, ...]:
        return (input_shape[0], input_shape[1], self.fused_layers[-1].units)

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
