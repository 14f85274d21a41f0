"""``to_nir``: a Keras model of spiking layers as a NIR graph, through the table ``_EXPORTERS`` (a Keras layer
class -> its exporter)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np

from ...errors import ConversionError
from .._layer import SpikingRNN
from ._elementwise import _export_scale, _export_threshold
from ._export_context import PASS, _Export, _refuse
from ._flatten import _export_flatten
from ._graph import _checked_dt, _nir
from ._layers import ChannelsFirstFlatten, ElementwiseScale, SumPooling, ThresholdSpike
from ._layout import _nir_shape
from ._neuron_export import _export_neuron
from ._pooling import _export_avg_pool, _export_sum_pool
from ._synapses import _export_conv, _export_dense


def _export_time_distributed(layer: keras.layers.TimeDistributed, ctx: _Export) -> Any:
    inner = layer.layer
    exporter = _lookup(_STEP_EXPORTERS, inner)
    if exporter is None:
        raise _refuse(
            layer,
            f"wraps {type(inner).__name__}, which has no NIR node",
            f"use one of {sorted(c.__name__ for c in _STEP_EXPORTERS)}",
        )
    return exporter(inner, ctx)


def _lookup(table: dict[type, Callable[..., Any]], layer: Any) -> Callable[..., Any] | None:
    for klass in type(layer).__mro__:
        if klass in table:
            return table[klass]
    return None


def _export_pass(layer: keras.layers.Layer, ctx: _Export) -> Any:
    return PASS


_STEP_EXPORTERS: dict[type, Callable[..., Any]] = {
    keras.layers.Conv1D: _export_conv,
    keras.layers.Conv2D: _export_conv,
    keras.layers.AveragePooling2D: _export_avg_pool,
}


_EXPORTERS: dict[type, Callable[..., Any]] = {
    keras.layers.Dense: _export_dense,
    SpikingRNN: _export_neuron,
    ElementwiseScale: _export_scale,
    ThresholdSpike: _export_threshold,
    ChannelsFirstFlatten: _export_flatten,
    SumPooling: _export_sum_pool,
    keras.layers.TimeDistributed: _export_time_distributed,
    keras.layers.Add: _export_pass,  # NIR sums the edges into a node
    keras.layers.Dropout: _export_pass,  # the identity at inference
    keras.layers.InputLayer: _export_pass,
}


def _per_step(layer: keras.layers.Layer, tensor: Any) -> tuple[int, ...]:
    shape = tuple(tensor.shape)
    if len(shape) < 3 or any(n is None for n in shape[2:]):
        raise _refuse(
            layer,
            f"takes a tensor of shape {shape}; NIR needs [batch, time, features...] with known features",
            "give the model a keras.Input((steps or None, *features))",
        )
    return tuple(int(n) for n in shape[2:])


def to_nir(model: keras.Model, dt: float = 1.0) -> Any:
    """A NIR graph (``nir.NIRGraph``) of a Keras model of spiking layers, at time step ``dt``.

    Maps ``Dense`` -> ``Affine`` / ``Linear``; ``LIF``, ``IF`` (``reset="zero"``) -> ``LIF`` / ``IF``; ``LI`` and
    a ``LIF`` with ``reset="none", emit="membrane"`` -> ``LI`` (``I`` for β = 1); ``Synaptic`` -> ``CubaLIF`` (a
    subgraph ``LI`` or ``I`` -> ``LIF`` or ``IF`` for α = 1 or β = 1, which NIR's CubaLIF cannot hold);
    ``RLIF`` / ``RSynaptic`` -> a subgraph of the neuron and its recurrent ``Linear`` / ``Affine``;
    ``TimeDistributed(Conv1D / Conv2D / AveragePooling2D)`` ->
    ``Conv1d`` / ``Conv2d`` / ``AvgPool2d``; the layers ``from_nir`` builds for ``Scale``, ``Threshold``,
    ``SumPool2d`` and ``Flatten`` back to those; ``Add`` -> edges summed into the next node. Each neuron node's
    ``metadata`` holds the layer's surrogate (``"ste_surrogate"``), which ``from_nir`` restores.

    Raises :class:`ste.errors.ConversionError` for a layer NIR cannot represent exactly (reset by subtraction, ALIF, an
    ``RSynaptic`` with α = 1 or β = 1, a layer with no NIR node), naming the layer and the fix.
    """
    nir = _nir()
    dt = _checked_dt(dt, "to_nir")
    if not isinstance(model, keras.Model):
        raise ConversionError(
            f"to_nir: expected a Keras model (functional or Sequential); received {type(model).__name__}. "
            f"Fix: pass the keras.Model whose layers to export."
        )
    if not model.built or not getattr(model, "inputs", None):
        raise ConversionError(
            f"to_nir: model '{model.name}' has no known inputs. Fix: build it from keras.Input((None, *features))."
        )
    nodes: dict[str, Any] = {}
    edges: list[tuple[str, str]] = []
    sources: dict[str, list[str]] = {}
    for index, tensor in enumerate(model.inputs):
        name = "input" if len(model.inputs) == 1 else f"input_{index}"
        op = tensor._keras_history.operation
        nodes[name] = nir.Input(input_type={"input": np.array(_nir_shape(_per_step(op, tensor)))})
        sources[op.name] = [name]
    for layer in model.layers:
        if layer.name in sources:
            continue
        if len(layer._inbound_nodes) != 1:
            raise _refuse(
                layer,
                f"is called {len(layer._inbound_nodes)} times; a NIR node is one operation",
                "use a separate layer for each call",
            )
        inputs = list(layer._inbound_nodes[0].input_tensors)
        producers = [sources[t._keras_history.operation.name] for t in inputs]
        exporter = _lookup(_EXPORTERS, layer)
        if exporter is None:
            raise _refuse(layer, "has no NIR node", f"use layers from {sorted(c.__name__ for c in _EXPORTERS)}")
        node = exporter(layer, _Export(dt, _per_step(layer, inputs[0]), layer.name))
        feeding = [source for group in producers for source in group]
        if node is PASS:
            if len(set(feeding)) != len(feeding):
                raise _refuse(layer, "adds a tensor to itself; NIR sums distinct edges", "scale by 2 instead")
            sources[layer.name] = feeding
            continue
        nodes[layer.name] = node
        edges.extend((source, layer.name) for source in feeding)
        sources[layer.name] = [layer.name]
    for index, tensor in enumerate(model.outputs):
        name = "output" if len(model.outputs) == 1 else f"output_{index}"
        op = tensor._keras_history.operation
        nodes[name] = nir.Output(output_type={"output": np.array(_nir_shape(_per_step(op, tensor)))})
        edges.extend((source, name) for source in sources[op.name])
    return nir.NIRGraph(nodes=nodes, edges=edges, metadata={"ste_dt": dt}, type_check=False)
