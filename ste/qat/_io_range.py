"""TFMOT's ``fix_input_output_range`` and ``remove_input_range`` for a quantization-aware model.

The input quantizers are the activation quantizers that read a model input, directly or through layers that pass a
quantized tensor on (Dropout, Flatten, Reshape, ...: the int8 scheme's "passthrough" layers); the output quantizers
are the ones that produce a model output, directly or through such layers. :func:`fix_input_output_range` gives
them a fixed range (an :class:`ste.qat.ActivationFakeQuant` whose range never moves, ``ema_decay=1``);
:func:`remove_input_range` replaces the input quantizers by the identity. Both return a new model with the trained
weights (TFMOT's rebuilds the model from its config without them).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import keras

from .._common._arguments import check_bool
from .._keras._rewrite import graph_nodes, graph_of
from ..errors import ParameterError
from ..quantizers import NoOp
from ..quantizers._base import check_bits
from ._int8 import Int8Scheme
from ._quantizers import ActivationFakeQuant
from ._tfmot_quantizers import check_fixed_range

__all__ = ["fix_input_output_range", "remove_input_range"]

_INT8 = Int8Scheme()  # its "passthrough" layers pass a quantized tensor on


def _passes(layer: Any) -> bool:
    """Whether ``layer`` passes a quantized tensor on unchanged in range (Dropout, Flatten, Reshape, ...)."""
    return _INT8.role(layer) == "passthrough"


def _input_quantizers(model: keras.Model, owner: str) -> list[str]:
    graph = graph_of(model)
    nodes = graph_nodes(graph)

    def reached(tensor: Any) -> list[str]:
        found = []
        for node in nodes:
            if not any(t is tensor for t in node.input_tensors):
                continue
            if isinstance(node.operation, ActivationFakeQuant):
                found.append(node.operation.name)
            elif _passes(node.operation) and len(node.outputs) == 1:
                found.extend(reached(node.outputs[0]))
        return found

    names = []
    for tensor in graph.inputs:
        found = reached(tensor)
        if not found:
            raise ParameterError(
                f"{owner}: the input '{tensor._keras_history[0].name}' of model '{model.name}' is not read by an "
                f"activation quantizer (ste.qat.ActivationFakeQuant): its first layer stays float, or quantizes its "
                f"own input (the binary and ternary schemes). Expected a model from ste.quantize_model or "
                f"ste.qat.quantize_apply with the int8 or n-bit scheme whose first layer is quantized."
            )
        names.extend(found)
    return names


def _output_quantizers(model: keras.Model, owner: str) -> list[str]:
    names = []
    for tensor in graph_of(model).outputs:
        producer, index, _ = tensor._keras_history
        while not isinstance(producer, ActivationFakeQuant) and _passes(producer):
            inputs = producer._inbound_nodes[index].input_tensors
            if len(inputs) != 1:
                break
            producer, index, _ = inputs[0]._keras_history
        if not isinstance(producer, ActivationFakeQuant):
            raise ParameterError(
                f"{owner}: the output of model '{model.name}' made by '{producer.name}' ({type(producer).__name__}) "
                f"is not quantized by an activation quantizer (ste.qat.ActivationFakeQuant), so it has no range to "
                f"fix. Fix: quantize the last layer, or pass output_min=None, output_max=None to fix only the input."
            )
        names.append(producer.name)
    return names


def _rebuilt(model: keras.Model, changes: dict[str, Callable[[dict[str, Any]], None]]) -> keras.Model:
    """``model`` rebuilt from its config, each layer named in ``changes`` changed by its function (which edits the
    layer's serialized entry in place), and the weights of every other layer copied from ``model``'s layer of the
    same name."""
    config = model.get_config()
    for layer in config["layers"]:
        change = changes.get(layer["config"]["name"])
        if change is not None:
            change(layer)
    new = type(model).from_config(config)
    old = {layer.name: layer for layer in model.layers}
    for layer in new.layers:
        source = old[layer.name]
        if len(source.weights) == len(layer.weights) and layer.name not in changes:
            layer.set_weights(source.get_weights())
    return new


def _update_config(entry: dict[str, Any], fixed: dict[str, Any]) -> None:
    entry["config"].update(fixed)


def fix_input_output_range(
    model: keras.Model,
    num_bits: int = 8,
    input_min: float | None = 0.0,
    input_max: float | None = 1.0,
    output_min: float | None = 0.0,
    output_max: float | None = 1.0,
    narrow_range: bool = False,
) -> keras.Model:
    """A copy of the quantization-aware ``model`` whose inputs are quantized on the fixed range [input_min,
    input_max] and whose outputs on [output_min, output_max], with ``num_bits`` bits (TFMOT's
    ``fix_input_output_range``): known scales for the TFLite model's edges, e.g. [0, 1] for an image scaled to
    [0, 1] (scale 1/255, zero point −128 on 8 bits). Each range must contain 0; ``None`` for both bounds of one side
    leaves that side as it is. The trained weights are kept; the fixed ranges do not move in training. The model is
    rebuilt from its config: one with your own classes (a QuantizeConfig, a custom layer) needs them in
    ``ste.qat.quantize_scope({...})``, as TFMOT's does."""
    owner = "ste.qat.fix_input_output_range"
    narrow = check_bool(owner, "narrow_range", narrow_range)
    if not isinstance(model, keras.Model):
        raise ParameterError(f"{owner}: expected a quantization-aware Keras model; received {type(model).__name__}.")
    bits = check_bits(owner, num_bits, low=2, high=8, name="num_bits")
    changes: dict[str, Callable[[dict[str, Any]], None]] = {}
    for side, low, high, find in (
        ("input ", input_min, input_max, _input_quantizers),
        ("output ", output_min, output_max, _output_quantizers),
    ):
        if low is None and high is None:
            continue
        low, high = check_fixed_range(owner, low, high, side)
        fixed = {"bits": bits, "ema_decay": 1.0, "initial_min": low, "initial_max": high, "narrow_range": narrow}
        for name in find(model, owner):
            changes[name] = functools.partial(_update_config, fixed=fixed)
    new = _rebuilt(model, changes)
    for name in changes:
        layer = new.get_layer(name)
        layer.min.assign(layer.initial_min)
        layer.max.assign(layer.initial_max)
    return new


def remove_input_range(model: keras.Model) -> keras.Model:
    """A copy of the quantization-aware ``model`` without its input quantizers (TFMOT's ``remove_input_range``): its
    inputs enter the first quantized layer as they are, e.g. for a model that is part of a larger one whose
    previous layer already quantizes them. The trained weights are kept."""
    owner = "ste.qat.remove_input_range"
    if not isinstance(model, keras.Model):
        raise ParameterError(f"{owner}: expected a quantization-aware Keras model; received {type(model).__name__}.")
    identity = keras.saving.serialize_keras_object(NoOp(precision=32))

    def replace(entry: dict[str, Any]) -> None:
        entry.update({**identity, "config": {**identity["config"], "name": entry["config"]["name"]}})

    return _rebuilt(model, {name: replace for name in _input_quantizers(model, owner)})
