"""Attention quantized inside the layer that computes it, whatever its class: Keras's ``MultiHeadAttention`` and its
subclasses (KerasHub's ``CachedMultiHeadAttention``, which overrides ``call`` for its key/value cache), and layers
that compute attention as they do (KerasHub's ``CachedGemmaAttention`` and ``LlamaAttention``: a
``_compute_attention`` method, a ``Softmax`` sublayer and ``EinsumDense`` projections).

Such a layer keeps its class and its ``call``; a private copy of it is changed in place (:func:`quantize_attention`):

* each projection the scheme covers (``EinsumDense``, ``Dense``) becomes the scheme's quantized layer;
* the inputs of the two attention matmuls are quantized where the scheme has activation quantizers. In Keras's
  attention (any subclass) ``_compute_attention`` is replaced, on that object, by the explicit path of
  :func:`explicit_attention` (never Keras's fused ``dot_product_attention``): the projected query (before and after
  its scaling by 1/√key_dim, so that TFLite's converter finds a range on both sides of the scaling), key and value,
  the scores, the probabilities (TFLite's fixed softmax range [0, 255/256]) and the attention output. In the other
  attention layers the query, key and value are quantized where ``_compute_attention`` receives them (after the
  rotary embedding) and the ``Softmax`` sublayer becomes :class:`QuantSoftmax`, whose output (the probabilities)
  is quantized: both matmuls then take quantized operands (a query quantized before a constant scaling is still
  on a grid of 2^bits levels);
* outside a rebuilt graph the layer quantizes its own inputs and outputs (:mod:`ste.qat._outside`).

The changed copy is not a class of its own: ``model.save`` writes the layer's own config, which rebuilds the float
layer. Keras's exact ``MultiHeadAttention`` is :class:`ste.qat.QuantMultiHeadAttention` under the int8 scheme, which
saves and loads.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Any

import keras

from .. import quantizers as ste_quantizers
from .._keras._rewrite import sublayers, swap
from .._patches import apply as apply_patches
from ..quantizers._sharing import claim

__all__ = [
    "INNER",
    "IN_PLACE",
    "QuantSoftmax",
    "attention_projections",
    "explicit_attention",
    "is_attention",
    "quantize_attention",
]

#: The activations inside Keras's attention that :func:`explicit_attention` quantizes, in the order it computes them.
INNER = ("query", "scaled_query", "key", "value", "scores", "probabilities", "attention_output")
#: Set on a layer quantized in place (it holds its weights already).
IN_PLACE = "_ste_quantized_in_place"
_DUCK_INNER = ("query", "key", "value")


def explicit_attention(
    layer: Any,
    quantize: Callable[[str, Any], Any],
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any = None,
    training: Any = None,
    return_attention_scores: bool = False,
    use_causal_mask: bool = False,
) -> tuple[Any, Any]:
    """Keras's ``MultiHeadAttention._compute_attention`` on its explicit path (scores, masked softmax, dropout,
    combination), with ``quantize(name, x)`` applied to each activation of :data:`INNER`."""
    if use_causal_mask:  # Keras passes it only to its own _compute_attention; kept for a future Keras
        causal = layer._compute_causal_mask(query, value)
        given = attention_mask
        attention_mask = causal if given is None else keras.ops.logical_and(keras.ops.cast(given, "bool"), causal)
    query = quantize("query", query)
    query = keras.ops.multiply(query, keras.ops.cast(layer._inverse_sqrt_key_dim, query.dtype))
    query = quantize("scaled_query", query)
    key, value = quantize("key", key), quantize("value", value)
    scores = quantize("scores", keras.ops.einsum(layer._dot_product_equation, key, query))
    scores = quantize("probabilities", _masked_softmax(layer, scores, attention_mask))
    dropped = layer._dropout_layer(scores, training=training) if layer._dropout > 0.0 else scores
    output = keras.ops.einsum(layer._combine_equation, dropped, value)
    return quantize("attention_output", output), scores


def _masked_softmax(layer: Any, scores: Any, attention_mask: Any) -> Any:
    """Keras's masked softmax, the mask added to the scores as a large negative bias (Keras's Softmax selects
    -1e9 where the mask is False: the same probabilities). In TFLite the masked softmax then stays float: an int8
    selection would give the masked scores the least value of the scores' int8 range, whose probability is not
    0 (a causal model would see its future tokens); the two matmuls around it stay int8."""
    if attention_mask is None:
        return layer._masked_softmax(scores, None)
    mask = attention_mask
    axis = -len(layer._attention_axes) * 2 - 1
    for _ in range(len(scores.shape) - len(mask.shape)):
        mask = keras.ops.expand_dims(mask, axis=axis)
    negative = -3e4 if keras.backend.standardize_dtype(scores.dtype) == "float16" else -1e9  # Keras's Softmax's
    bias = (1.0 - keras.ops.cast(mask, scores.dtype)) * keras.ops.cast(negative, scores.dtype)
    return layer._softmax(keras.ops.add(scores, bias))


def _softmaxes(layer: keras.layers.Layer) -> list[keras.layers.Layer]:
    return [child for child in sublayers(layer) if type(child) is keras.layers.Softmax]


def is_attention(layer: keras.layers.Layer) -> bool:
    """Whether ``layer`` computes attention: Keras's ``MultiHeadAttention`` (any subclass), or a layer with a
    ``_compute_attention`` method, a ``keras.layers.Softmax`` sublayer and an ``EinsumDense`` or ``Dense``
    projection (KerasHub's Gemma and Llama attention)."""
    if isinstance(layer, keras.layers.MultiHeadAttention):
        return True
    if not callable(getattr(type(layer), "_compute_attention", None)):
        return False
    children = sublayers(layer)
    projections = [child for child in children if type(child) in (keras.layers.EinsumDense, keras.layers.Dense)]
    return bool(projections) and bool(_softmaxes(layer))


def attention_projections(layer: keras.layers.Layer, covered: Callable[[Any], bool]) -> list[keras.layers.Layer]:
    """The projections of the attention ``layer`` that ``covered`` accepts (its direct sublayers)."""
    return [child for child in sublayers(layer) if covered(child)]


@keras.saving.register_keras_serializable(package="ste")
class QuantSoftmax(keras.layers.Softmax):  # type: ignore[misc]
    """``keras.layers.Softmax`` whose output (attention probabilities) goes through ``output_quantizer`` (a
    quantizer spec or config, ``ste.quantizers.get``; ``None`` for none)."""

    def __init__(self, axis: int = -1, *, output_quantizer: Any = None, **kwargs: Any) -> None:
        apply_patches()  # once per process: the Keras and TensorFlow patches ste needs (ste/_patches.py)
        super().__init__(axis=axis, **kwargs)
        self.output_quantizer = ste_quantizers.get(output_quantizer)

    def build(self, input_shape: Any) -> None:
        if isinstance(self.output_quantizer, keras.layers.Layer) and not self.output_quantizer.built:
            self.output_quantizer.build(input_shape)
        claim(self.output_quantizer, self, "output_quantizer")
        super().build(input_shape)

    def call(self, inputs: Any, mask: Any = None) -> Any:
        outputs = super().call(inputs, mask=mask)
        return outputs if self.output_quantizer is None else self.output_quantizer(outputs)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "output_quantizer": ste_quantizers.serialize(self.output_quantizer)}


def _add_state(layer: keras.layers.Layer, name: str, value: Any) -> None:
    """Set the attribute ``name`` of the built ``layer`` to ``value`` (a quantizer layer: tracked, so that its
    variables are the layer's)."""
    layer._tracker.unlock()
    try:
        setattr(layer, name, value)
    finally:
        layer._lock_state()


def _after(name: str) -> Any:
    """The activation that computes the inner activation ``name`` (softmax for the probabilities)."""
    return keras.activations.softmax if name == "probabilities" else None


def _built(quantizer: Any) -> Any:
    if isinstance(quantizer, keras.layers.Layer) and not quantizer.built:
        quantizer.build(None)
    return quantizer


def quantize_attention(
    layer: keras.layers.Layer,
    owner: str,
    project: Callable[[keras.layers.Layer], keras.layers.Layer],
    covered: Callable[[Any], bool],
    activation_quantizer: Callable[[str, Any], Any],
) -> keras.layers.Layer:
    """The built attention ``layer`` (a private copy, with its weights) quantized inside, in place (see the module
    docstring): ``project`` makes the quantized layer, built with its weights, for each projection that
    ``covered`` accepts; ``activation_quantizer(name, after)`` a new activation quantizer (``None``: the scheme
    has none)."""
    del owner
    new = layer
    for projection in attention_projections(new, covered):
        swap(new, projection, project(projection))
    keras_attention = isinstance(new, keras.layers.MultiHeadAttention)
    names = INNER if keras_attention else _DUCK_INNER
    quantizers = {name: _built(activation_quantizer(f"{name}_quantizer", _after(name))) for name in names}
    if all(quantizer is None for quantizer in quantizers.values()):
        object.__setattr__(new, IN_PLACE, True)
        return new
    for name, quantizer in quantizers.items():
        _add_state(new, f"_ste_{name}_quantizer", quantizer)

    def quantize(name: str, x: Any) -> Any:
        quantizer = getattr(new, f"_ste_{name}_quantizer", None)
        return x if quantizer is None else quantizer(x)

    if keras_attention:

        def compute(self: Any, *args: Any, **kwargs: Any) -> Any:
            return explicit_attention(self, quantize, *args, **kwargs)

    else:
        original = new._compute_attention
        parameters = list(inspect.signature(original).parameters)[:3]
        for softmax in _softmaxes(new):
            config = softmax.get_config()
            probabilities = _built(activation_quantizer(f"{softmax.name}_quantizer", keras.activations.softmax))
            quantized = QuantSoftmax(**config, output_quantizer=probabilities)
            swap(new, softmax, quantized)

        def compute(self: Any, *args: Any, **kwargs: Any) -> Any:
            bound = inspect.signature(original).bind(*args, **kwargs)
            for name, role in zip(parameters, _DUCK_INNER):
                bound.arguments[name] = quantize(role, bound.arguments[name])
            return original(*bound.args, **bound.kwargs)

    object.__setattr__(new, "_compute_attention", types.MethodType(compute, new))
    object.__setattr__(new, IN_PLACE, True)
    return new
