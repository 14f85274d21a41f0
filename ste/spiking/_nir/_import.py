"""``from_nir``: a Keras model of ste layers from a NIR graph, through the table ``_IMPORTERS`` (a NIR node class
name -> its importer)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import keras
import numpy as np

from ..._patches import apply as apply_patches
from ...errors import ConversionError
from ._elementwise import _import_scale, _import_threshold
from ._flatten import _import_flatten
from ._graph import _checked_dt, _checked_edges, _nir, _order
from ._import_context import _Import
from ._layout import _keras_shape, _nir_shape
from ._neuron_import import _import_cuba_lif, _import_integrator, _import_spiking
from ._pooling import _import_avg_pool, _import_sum_pool
from ._subgraph_import import _import_subgraph, _recurrent_layer, _recurrent_loops
from ._synapses import _import_affine, _import_conv


def _missing(reason: str) -> Callable[[Any, _Import], list[keras.layers.Layer]]:
    def refuse(node: Any, ctx: _Import) -> list[keras.layers.Layer]:
        raise ctx.refuse(node, f"has no ste layer: {reason}", "leave it out of the graph, or convert it by hand")

    return refuse


_IMPORTERS: dict[str, Callable[[Any, _Import], list[keras.layers.Layer]]] = {
    "Affine": _import_affine,
    "Linear": _import_affine,
    "LIF": _import_spiking,
    "IF": _import_spiking,
    "LI": _import_integrator,
    "I": _import_integrator,
    "Scale": _import_scale,
    "Threshold": _import_threshold,
    "Flatten": _import_flatten,
    "Conv1d": _import_conv,
    "Conv2d": _import_conv,
    "AvgPool2d": _import_avg_pool,
    "SumPool2d": _import_sum_pool,
    "Delay": _missing("ste has no delay line"),
    "CubaLI": _missing("ste has no current-based leaky integrator"),
    "CubaLIF": _import_cuba_lif,
    "NIRGraph": _import_subgraph,
}


def _real_parameters(node: Any, ctx: _Import) -> None:
    """Refuse a parameter that is not an array of real numbers (text, complex numbers, objects); integer and boolean
    arrays are numbers, read as float64."""
    if type(node).__name__ == "NIRGraph":
        for name, inner in node.nodes.items():
            _real_parameters(inner, _Import(ctx.dt, f"{ctx.name}.{name}", ctx.shape, ctx.metadata))
        return
    for name, value in vars(node).items():
        if name in ("input_type", "output_type", "metadata") or not isinstance(value, np.ndarray):
            continue
        if value.dtype.kind not in "biuf":
            raise ctx.refuse(
                node,
                f"has a parameter {name} of dtype {value.dtype}; NIR's parameters are real numbers",
                f"write {name} as an array of numbers (float, or integer, which is read as float64)",
            )


def from_nir(graph_or_path: Any, dt: float = 1.0) -> keras.Model:
    """A Keras model of ste layers from a NIR graph (``nir.NIRGraph``, or the path of a file ``nir.write`` wrote).

    ``dt`` is the time step of the discretization (β = 1 − dt/τ); snnTorch's exporter assumes ``dt=1e-4``. The model
    takes ``[batch, time, *features]`` with the features of a step channels last (``[batch, time, H, W, C]``),
    and returns every output node's values at every step. See docs/spiking.md for the mapping of every node.

    Raises :class:`ste.errors.ConversionError` for a node with no exact ste counterpart, a parameter that is not an
    array of numbers (integers are read as float64) and an edge that names no node, naming it and saying why.
    """
    apply_patches()  # once per process: the Keras and TensorFlow patches ste needs (ste/_patches.py)
    nir = _nir()
    dt = _checked_dt(dt, "from_nir")
    graph = nir.read(os.fspath(graph_or_path)) if isinstance(graph_or_path, (str, os.PathLike)) else graph_or_path
    nodes: dict[str, Any] = dict(graph.nodes)
    inputs, outputs = dict(graph.inputs), dict(graph.outputs)
    if not inputs or not outputs:
        raise ConversionError("from_nir: the graph has no Input or no Output node.")
    edges = _checked_edges(graph, "the graph")
    recurrent = _recurrent_loops(nodes, edges)
    for weight in recurrent.values():
        del nodes[weight]
    edges = [e for e in edges if e[0] not in recurrent.values() and e[1] not in recurrent.values()]
    feeding: dict[str, list[str]] = {name: [] for name in nodes}
    for source, target in edges:
        if target in feeding:
            feeding[target].append(source)
    tensors: dict[str, Any] = {}
    keras_inputs = []
    for name in _order(nodes, edges):
        node = nodes[name]
        if name in inputs:
            shape = _keras_shape([int(n) for n in np.asarray(node.input_type["input"]).reshape(-1)])
            tensors[name] = keras.Input((None, *shape), name=name.replace("/", "_"))
            keras_inputs.append(tensors[name])
            continue
        if not feeding[name]:
            raise ConversionError(f"from_nir: node '{name}' has no input edge.")
        arriving = [tensors[s] for s in feeding[name]]
        x = arriving[0] if len(arriving) == 1 else keras.layers.Add(name=f"{name}_sum".replace("/", "_"))(arriving)
        if name in outputs:
            tensors[name] = x
            continue
        importer = _IMPORTERS.get(type(node).__name__)
        context = _Import(dt, name, _nir_shape(x.shape[2:]), dict(getattr(node, "metadata", None) or {}))
        if importer is None:
            raise context.refuse(node, "has no ste layer", f"use nodes of the types {sorted(_IMPORTERS)}")
        _real_parameters(node, context)
        if name in recurrent:
            weight = graph.nodes[recurrent[name]]
            _real_parameters(weight, _Import(dt, recurrent[name], context.shape))
            importer = functools.partial(_recurrent_layer, weight_node=weight)
        for layer in importer(node, context):
            x = layer(x)
        tensors[name] = x
    model_outputs = [tensors[name] for name in outputs]
    return keras.Model(
        keras_inputs[0] if len(keras_inputs) == 1 else keras_inputs,
        model_outputs[0] if len(model_outputs) == 1 else model_outputs,
        name="from_nir",
    )
