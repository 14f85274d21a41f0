"""Which layers of a model a non-negative tensor feeds, as the graph shows it.

A tensor is known non-negative when a non-negative activation computes it: a layer whose ``activation`` is one of
ReLU, ReLU6, sigmoid, hard sigmoid, softmax, softplus, exponential (Keras's or ``tf.nn``'s; ``Dense(...,
activation="relu")``, ``Activation("sigmoid")``), a ``ReLU`` layer with ``negative_slope=0`` and ``threshold >= 0``,
or a ``Softmax`` layer. It stays known non-negative through layers that cannot make a value negative: pooling,
reshapes, dropout, padding, cropping, nearest or bilinear upsampling, and Add, Average, Concatenate, Maximum,
Minimum, Multiply of known non-negative tensors; and through nested graph models, whose inputs take the signs of what
the outer model feeds them. A nested model without a graph (a subclassed model) is opaque: its outputs have an unknown
sign, and the layers inside it are not looked at. Anything else (a BatchNormalization, a model input, a custom
layer) has an unknown sign.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

__all__ = ["non_negative_feeds"]

L = keras.layers

_NON_NEGATIVE: dict[Any, str] = {
    keras.activations.relu: "relu",
    keras.activations.relu6: "relu6",
    keras.activations.sigmoid: "sigmoid",
    keras.activations.hard_sigmoid: "hard_sigmoid",
    keras.activations.softmax: "softmax",
    keras.activations.softplus: "softplus",
    keras.activations.exponential: "exponential",
    tf.nn.relu: "relu",
    tf.nn.relu6: "relu6",
    tf.nn.sigmoid: "sigmoid",
    tf.nn.softmax: "softmax",
    tf.nn.softplus: "softplus",
    tf.math.exp: "exponential",
}

_KEEPS_SIGN = (
    L.MaxPooling1D,
    L.MaxPooling2D,
    L.MaxPooling3D,
    L.AveragePooling1D,
    L.AveragePooling2D,
    L.AveragePooling3D,
    L.GlobalMaxPooling1D,
    L.GlobalMaxPooling2D,
    L.GlobalMaxPooling3D,
    L.GlobalAveragePooling1D,
    L.GlobalAveragePooling2D,
    L.GlobalAveragePooling3D,
    L.Flatten,
    L.Reshape,
    L.Permute,
    L.RepeatVector,
    L.Dropout,
    L.SpatialDropout1D,
    L.SpatialDropout2D,
    L.SpatialDropout3D,
    L.ZeroPadding1D,
    L.ZeroPadding2D,
    L.ZeroPadding3D,
    L.Cropping1D,
    L.Cropping2D,
    L.Cropping3D,
    L.UpSampling1D,
    L.UpSampling3D,
    L.Identity,
    L.ActivityRegularization,
    L.Masking,
    L.Add,
    L.Average,
    L.Concatenate,
    L.Maximum,
    L.Minimum,
    L.Multiply,
)


def _non_negative_output(layer: keras.layers.Layer) -> str | None:
    """How ``layer`` itself makes its output non-negative (e.g. ``"relu"``), or ``None``."""
    if type(layer) is L.ReLU:
        if layer.negative_slope == 0 and layer.threshold >= 0:
            return "relu6" if layer.max_value in (6, 6.0) else "relu"
        return None
    if type(layer) is L.Softmax:
        return "softmax"
    activation = getattr(layer, "activation", None)
    try:
        return _NON_NEGATIVE.get(activation)
    except TypeError:  # an unhashable callable
        return None


def _keeps_sign(layer: keras.layers.Layer) -> bool:
    if type(layer) is L.UpSampling2D:
        return layer.interpolation in ("nearest", "bilinear")
    return type(layer) in _KEEPS_SIGN


def non_negative_feeds(
    model: keras.Model, functional: Callable[[keras.Model], Any], nodes: Callable[[Any], list[Any]]
) -> dict[int, tuple[keras.layers.Layer, str, list[str]]]:
    """Every layer (nested models' included) that some call feeds only known non-negative float tensors: ``id`` →
    (the layer, its path, what makes its inputs non-negative, e.g. ``"'conv1' (relu)"``). ``functional(model)`` is
    a model's functional graph and ``nodes(graph)`` its layer calls in the order it computes them."""
    found: dict[int, tuple[keras.layers.Layer, str, list[str]]] = {}

    def visit(graph_model: keras.Model, signs: list[str | None], prefix: str) -> list[str | None]:
        graph = functional(graph_model)
        tensors: dict[int, str | None] = {id(t): sign for t, sign in zip(graph.inputs, signs)}
        for node in nodes(graph):
            layer = node.operation
            floats = [t for t in node.input_tensors if keras.backend.is_float_dtype(t.dtype)]
            sources = [tensors.get(id(t)) for t in floats]
            known = [s for s in sources if s is not None]
            all_known = bool(floats) and len(known) == len(floats)
            if isinstance(layer, keras.Model) and functional(layer) is None:  # opaque: no graph to follow
                for tensor in node.outputs:
                    tensors[id(tensor)] = None
                continue
            if isinstance(layer, keras.Model):
                outs = visit(layer, [tensors.get(id(t)) for t in node.input_tensors], f"{prefix}{layer.name}/")
                for tensor, out in zip(node.outputs, outs):
                    tensors[id(tensor)] = out
                continue
            if all_known:
                path = f"{prefix}{layer.name}"
                entry = found.setdefault(id(layer), (layer, path, []))
                entry[2].extend(s for s in dict.fromkeys(known) if s not in entry[2])
            own = _non_negative_output(layer)
            if own is not None:
                sign: str | None = f"'{prefix}{layer.name}' ({own})"
            elif all_known and _keeps_sign(layer):
                sign = ", ".join(dict.fromkeys(known))
            else:
                sign = None
            for tensor in node.outputs:
                tensors[id(tensor)] = sign
        return [tensors.get(id(t)) for t in graph.outputs]

    visit(model, [None] * len(functional(model).inputs), "")
    return found
