"""A compute layer outside a rebuilt graph (inside a composite layer such as a transformer block, or in a model the
rewriter changes in place, such as a KerasHub backbone) quantizes its own inputs and its own output, since no graph
edge can hold a quantizer there.

* **Inputs**: the layer's ``input_quantizer``; for an attention layer, the query, key and value projections' (those
  of Keras's attention) or every projection's (the other attention layers, whose attention output reaches the
  output projection unquantized).
* **Output**: the converter makes an int8 kernel (FULLY_CONNECTED, CONV_2D) only where the output has a range, as
  the graph rewrite's activation quantizer gives it; here the layer's own output quantizer does. An activation the
  scheme fuses (ReLU, ReLU6) runs before it; any other (GELU, tanh) runs between two quantizers, as in a graph (the
  layer computes its linear output, then the quantizer, the activation and a second quantizer): TFLite runs it as
  its own int8 op. A ``ReversibleEmbedding`` quantizes the output of its reverse projection (the logits), not its
  lookups (they are values of the quantized table); Keras's attention quantizes the output of its output projection
  (its query, key and value projections' outputs are quantized inside it).

A tensor that such an output quantizer made carries a mark, and an input quantizer of this kind passes a marked
tensor through unchanged: the output of one layer that feeds the next (a feed-forward block's two Dense layers) is
quantized once, on one range, as a graph edge would be (two ranges on one tensor would also leave a reshape
between two scales, which the converter refuses). The quantizers are tracked by the layer (their variables are
the model's); the layer's ``call`` (the quantizer's, for an input quantizer) is wrapped on that object, which keeps
its class.
"""

from __future__ import annotations

import types
from typing import Any

import keras

from .._keras._rewrite import sublayers
from ..quantizers._sharing import claim
from ._attention import is_attention
from ._scheme import Scheme

__all__ = ["quantize_outside"]


def _built(quantizer: Any) -> Any:
    if isinstance(quantizer, keras.layers.Layer) and not quantizer.built:
        quantizer.build(None)
    return quantizer


def _track(layer: keras.layers.Layer, name: str, value: Any) -> None:
    """Set the attribute ``name`` of the built ``layer`` to ``value`` (tracked: its variables are the layer's)."""
    layer._tracker.unlock()
    try:
        setattr(layer, name, value)
    finally:
        layer._lock_state()


#: The mark of a tensor that an output quantizer of this module made.
_MARK = "_ste_quantized_output"


def _mark(outputs: Any) -> Any:
    try:
        setattr(outputs, _MARK, True)
    except AttributeError:  # a tensor type without attributes: quantized again by the next layer
        pass
    return outputs


def _passes_marked(quantizer: Any) -> Any:
    """``quantizer`` whose call leaves a marked tensor as it is."""
    call = quantizer.call

    def guarded(self: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        return inputs if getattr(inputs, _MARK, False) else call(inputs, *args, **kwargs)

    object.__setattr__(quantizer, "call", types.MethodType(guarded, quantizer))
    return quantizer


def _own_input(layer: keras.layers.Layer, scheme: Scheme) -> None:
    if getattr(layer, "input_quantizer", False) is not None:
        return  # it has one, or no input quantizer slot
    quantizer = _built(scheme.activation_quantizer(f"{layer.name}_input_quant"))
    if quantizer is not None:
        _passes_marked(quantizer)
        _track(layer, "input_quantizer", quantizer)
        claim(quantizer, layer, "input_quantizer")


def _own_output(layer: keras.layers.Layer, scheme: Scheme, only_reverse: bool = False) -> None:
    """Wrap ``layer``'s call so that its output is quantized (see the module docstring)."""
    if getattr(layer, "_ste_output_quantizer", None) is not None:
        return
    activation = getattr(layer, "activation", None) or keras.activations.linear
    fused = scheme.fuses_into(layer, activation)
    output = _built(scheme.activation_quantizer(f"{layer.name}_output_quant", activation if fused else None))
    if output is None:
        return
    _track(layer, "_ste_output_quantizer", output)
    after = None
    if not fused:
        after = _built(scheme.activation_quantizer(f"{layer.name}_activation_quant", activation))
        _track(layer, "_ste_activation_quantizer", after)
        layer.activation = keras.activations.linear  # computed by the wrapper, between the two quantizers
    call = layer.call

    def quantized_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        outputs = call(*args, **kwargs)
        if only_reverse and not kwargs.get("reverse", args[1] if len(args) > 1 else False):
            return outputs
        outputs = output(outputs)
        return _mark(outputs if after is None else after(activation(outputs)))

    object.__setattr__(layer, "call", types.MethodType(quantized_call, layer))


def quantize_outside(layer: keras.layers.Layer, scheme: Scheme) -> None:
    """Make the quantized compute ``layer`` (built, outside a rebuilt graph) quantize its own inputs and output (see
    the module docstring)."""
    if is_attention(layer):
        keras_attention = isinstance(layer, keras.layers.MultiHeadAttention)
        output_projection = getattr(layer, "_output_dense", None) if keras_attention else None
        for child in sublayers(layer):
            if child is not output_projection and hasattr(child, "input_quantizer"):
                _own_input(child, scheme)
            if not keras_attention and hasattr(child, "input_quantizer"):
                _own_output(child, scheme)
        if output_projection is not None:
            _own_output(output_projection, scheme)
        return
    if isinstance(layer, keras.layers.Embedding):
        if hasattr(layer, "tie_weights"):  # a ReversibleEmbedding: the input and output of its reverse projection
            _own_input(layer, scheme)
            _own_output(layer, scheme, only_reverse=True)
        return  # a lookup's inputs are indices, its outputs values of the quantized table
    _own_input(layer, scheme)
    _own_output(layer, scheme)
