"""``ste.spiking.fuse(model)``: a Sequential model's ``Dense`` → neuron-layer pairs as one fused loop.

A spiking network written the plain Keras way (``keras.layers.Dense`` followed by ``ste.spiking.LIF`` and the other
neuron layers, over ``[batch, time, features]`` inputs) computes each layer over the whole sequence before the next
one starts, and its backward pass keeps every layer boundary's tensors. :class:`ste.spiking.Fused` of
:class:`ste.spiking.SpikingDense` layers computes the same thing in one loop with a checkpointed backward pass
(docs/spiking.md). :func:`fuse` rewrites the first into the second, weights included, so that a network written the
first way trains at the second's speed.
"""

from __future__ import annotations

from typing import Any

import keras

from ..._common._arguments import check_bool
from ...errors import ParameterError
from .._cell import SpikingCell
from .._dense import SpikingDense
from .._layer import SpikingRNN
from ._layers import Fused

__all__ = ["fuse"]


def _plain_sequence_neuron(layer: Any) -> bool:
    """A neuron layer that returns its spikes over time and nothing else (what ``SpikingDense`` computes)."""
    return (
        isinstance(layer, SpikingRNN)
        and isinstance(layer.cell, SpikingCell)
        and layer.return_sequences
        and not layer.return_state
        and not layer.go_backwards
        and not layer.stateful
    )


def _fusable(dense: Any, neuron: Any) -> bool:
    """``dense`` then ``neuron`` is what one ``SpikingDense`` computes: a plain ``keras.layers.Dense`` (no
    activation, no activity regularizer, on ``[batch, time, features]``), then such a neuron layer."""
    if type(dense) is not keras.layers.Dense or not _plain_sequence_neuron(neuron):
        return False
    linear = dense.activation in (None, keras.activations.linear)
    shape = getattr(dense, "input", None)
    rank = len(shape.shape) if shape is not None else None
    return linear and dense.activity_regularizer is None and rank == 3


def _copy(layer: Any) -> Any:
    return type(layer).from_config(layer.get_config())


def _spiking_dense(dense: Any, neuron: Any, segment: int | None, jit_compile: bool) -> SpikingDense:
    cell = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(neuron.cell))
    return SpikingDense(
        dense.units,
        cell,
        use_bias=dense.use_bias,
        kernel_initializer=dense.kernel_initializer,
        bias_initializer=dense.bias_initializer,
        kernel_regularizer=dense.kernel_regularizer,
        bias_regularizer=dense.bias_regularizer,
        kernel_constraint=dense.kernel_constraint,
        bias_constraint=dense.bias_constraint,
        segment=segment,
        jit_compile=jit_compile,
        dtype=dense.dtype_policy,
        name=f"{dense.name}_{neuron.name}",
    )


def fuse(model: keras.Sequential, *, segment: int | None = None, jit_compile: bool = True) -> keras.Sequential:
    """A new ``keras.Sequential`` with the same weights in which every run of ``keras.layers.Dense`` → spiking
    neuron layer pairs (``ste.spiking.LIF``, ``Synaptic``, ``ALIF``, ... returning their spikes over time) is one
    [`Fused`][ste.spiking.Fused] stack of [`SpikingDense`][ste.spiking.SpikingDense] layers; every other layer is
    copied as it is.

    Outputs and gradients are those of ``model`` up to the order of floating-point sums (the fused loop sums the
    kernel's gradient step by step), and the training step is faster with far less memory. A gradient of its
    gradient raises ``ste.errors.HigherOrderError``. The model must be built (``keras.Input`` first).

    Args:
        model: a built ``keras.Sequential`` of ``[batch, time, features]`` sequences.
        segment: steps between the checkpoints of the fused backward pass (``None``: ⌈√T⌉).
        jit_compile: compile the fused loop with XLA in a graph.

    >>> import keras, ste
    >>> plain = keras.Sequential([keras.Input((25, 64)), keras.layers.Dense(100), ste.spiking.LIF(beta=0.9),
    ...                           keras.layers.Dense(10), ste.spiking.LIF(beta=0.9)])
    >>> fast = ste.spiking.fuse(plain)
    >>> type(fast.layers[0]).__name__, len(fast.layers)
    ('Fused', 1)
    """
    check_bool("ste.spiking.fuse", "jit_compile", jit_compile)
    if not isinstance(model, keras.Sequential):
        raise ParameterError(
            f"ste.spiking.fuse: expected a keras.Sequential model; received {type(model).__name__}. Fix: write the "
            f"network as a Sequential, or use ste.spiking.Fused([ste.spiking.SpikingDense(...), ...]) directly."
        )
    if not model.built or not getattr(model, "inputs", None):
        raise ParameterError(
            f"ste.spiking.fuse: the model '{model.name}' is not built, so its layers' input shapes are unknown. Fix: "
            f"start it with keras.Input((time, features)) (or call it once) before fusing."
        )
    layers = list(model.layers)
    built: list[Any] = []
    pairs: list[tuple[Any, Any, Any]] = []
    stack: list[SpikingDense] = []

    def close() -> None:
        if stack:
            built.append(Fused(list(stack), segment=segment, jit_compile=jit_compile))
            stack.clear()

    index = 0
    while index < len(layers):
        layer = layers[index]
        following = layers[index + 1] if index + 1 < len(layers) else None
        if following is not None and _fusable(layer, following):
            fused = _spiking_dense(layer, following, segment, jit_compile)
            stack.append(fused)
            pairs.append((fused, layer, following))
            index += 2
            continue
        close()
        copy = _copy(layer)
        built.append(copy)
        pairs.append((copy, layer, None))
        index += 1
    close()
    inputs = model.inputs[0]
    result = keras.Sequential([keras.Input(inputs.shape[1:], dtype=inputs.dtype), *built], name=f"{model.name}_fused")
    for new, old, neuron in pairs:
        if neuron is None:
            new.set_weights(old.get_weights())
            continue
        new.kernel.assign(old.kernel)
        if old.use_bias and new.bias is not None:
            new.bias.assign(old.bias)
        new.neuron.set_weights(neuron.cell.get_weights())
    return result
