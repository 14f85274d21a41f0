"""Import of the neurons NIR writes as more than one node: a recurrent neuron (a neuron that feeds itself through
an ``Affine`` / ``Linear`` node, as a subgraph or flat in the graph) and a synaptic neuron's two stages."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np

from .._recurrent import RLIF, RSynaptic
from .._synaptic import Synaptic
from ._graph import ALPHA_KEY, _checked_edges
from ._import_context import _Import
from ._neuron_import import _cuba_parameters, _integrator, _membrane, _neuron, _scale_layers

_SPIKING = ("LIF", "IF", "CubaLIF")  # the neurons a recurrent loop can hold


def _recurrent_parts(graph: Any, ctx: _Import) -> tuple[Any, Any]:
    """The neuron and the recurrent weight node of a subgraph input -> neuron -> output with neuron <-> weight."""
    kinds = {name: type(node).__name__ for name, node in graph.nodes.items()}
    neurons = [n for n, k in kinds.items() if k in _SPIKING]
    weights = [n for n, k in kinds.items() if k in ("Affine", "Linear")]
    ends = [n for n, k in kinds.items() if k in ("Input", "Output")]
    if len(neurons) != 1 or len(weights) != 1 or len(ends) != 2 or len(kinds) != 4:
        raise ctx.refuse(
            graph,
            f"is a subgraph of {sorted(kinds.values())}; the ones ste maps are a recurrent neuron (Input, LIF, IF "
            "or CubaLIF, Affine or Linear, Output) and a synaptic neuron's two stages (Input -> LI or I -> LIF or "
            "IF -> Output)",
            "flatten the subgraph",
        )
    loop = {(neurons[0], weights[0]), (weights[0], neurons[0])}
    if not loop <= set(map(tuple, graph.edges)):
        raise ctx.refuse(graph, "has no loop between its neuron and its weight", "a recurrent neuron subgraph")
    return graph.nodes[neurons[0]], graph.nodes[weights[0]]


def _recurrent_layer(neuron: Any, ctx: _Import, weight_node: Any) -> list[keras.layers.Layer]:
    """RLIF / RSynaptic: the NIR neuron sums its input and W·z[t−1]; the gain scales both, so V = (g ⊙ W)ᵀ."""
    inner = _Import(ctx.dt, ctx.name, ctx.shape, dict(getattr(neuron, "metadata", None) or {}))
    weight = np.asarray(weight_node.weight, np.float64)
    bias = getattr(weight_node, "bias", None)
    threshold: float | None
    if type(neuron).__name__ == "CubaLIF":
        alpha, beta, threshold, gain = _cuba_parameters(neuron, inner)
        parameters: tuple[Any, ...] = (neuron.r, neuron.tau_mem, neuron.w_in, neuron.tau_syn)
        make: Callable[..., Any] = functools.partial(RSynaptic, alpha=alpha)
    else:  # LIF, or IF (β = 1)
        d = _membrane(neuron, inner)
        beta, threshold, gain, parameters, make = d.decay, d.threshold, d.gain, d.parameters, RLIF
    scale = _scale_layers(inner, gain, *parameters)
    g = np.broadcast_to(np.asarray(gain, np.float64), ctx.shape) if scale else np.ones(ctx.shape)
    diagonal = np.array_equal(weight, np.diag(np.diag(weight)))
    layer = make(
        beta=beta,
        threshold=threshold,
        reset="zero",
        surrogate=inner.surrogate(),
        all_to_all=not diagonal,
        recurrent_bias=bias is not None,
        name=ctx.layer_name(),
    )
    layer.build((None, None, *ctx.shape))
    kernel = (g[:, None] * weight).T if not diagonal else g * np.diag(weight)
    layer.cell._learned["recurrent_kernel"].assign(kernel)
    if bias is not None:
        layer.cell._learned["recurrent_bias"].assign(g * np.asarray(bias, np.float64))
    return [*scale, layer]


def _stages_of(graph: Any) -> tuple[Any, Any] | None:
    """The current and membrane nodes of a subgraph input -> LI or I -> LIF or IF -> output (what ``to_nir`` writes
    for a synaptic neuron with α = 1 or β = 1), or None."""
    kinds = {name: type(node).__name__ for name, node in graph.nodes.items()}
    ordered = [[n for n, k in kinds.items() if k in group] for group in (("Input",), ("LI", "I"), ("LIF", "IF"))]
    ordered.append([n for n, k in kinds.items() if k == "Output"])
    if len(kinds) != 4 or any(len(names) != 1 for names in ordered):
        return None
    chain = [names[0] for names in ordered]
    if {tuple(edge) for edge in graph.edges} != set(itertools.pairwise(chain)):
        return None
    return graph.nodes[chain[1]], graph.nodes[chain[2]]


def _import_synaptic_stages(current: Any, membrane: Any, ctx: _Import) -> list[keras.layers.Layer]:
    """ste's Synaptic from its two stages: I_syn[t] = α·I_syn[t−1] + g_syn·x[t] feeds U[t] = β·U[t−1] + g·I_syn[t];
    both recursions are linear, so the two gains multiply the input once."""
    metadata = dict(getattr(membrane, "metadata", None) or {})
    inner = _Import(ctx.dt, ctx.name, ctx.shape, metadata)
    synapse, neuron = _integrator(current, inner, ALPHA_KEY, "α"), _membrane(membrane, inner)
    layer = Synaptic(
        alpha=synapse.decay,
        beta=neuron.decay,
        threshold=neuron.threshold,
        reset="zero",
        surrogate=inner.surrogate(),
        name=ctx.layer_name(),
    )
    gain = np.asarray(synapse.gain, np.float64) * np.asarray(neuron.gain, np.float64)
    return _scale_layers(ctx, gain, *synapse.parameters, *neuron.parameters) + _neuron(layer, ctx)


def _import_subgraph(node: Any, ctx: _Import) -> list[keras.layers.Layer]:
    _checked_edges(node, f"subgraph '{ctx.name}'")
    stages = _stages_of(node)
    if stages is not None:
        return _import_synaptic_stages(*stages, ctx)
    neuron, weight = _recurrent_parts(node, ctx)
    return _recurrent_layer(neuron, ctx, weight)


def _recurrent_loops(nodes: dict[str, Any], edges: Sequence[tuple[str, ...]]) -> dict[str, str]:
    """neuron -> weight node for every loop where a LIF, IF or CubaLIF feeds itself through an Affine/Linear node that
    nothing else feeds or reads (the flat form of a recurrent neuron)."""
    loops: dict[str, str] = {}
    for source, target in edges:
        neuron, weight = source, target
        if type(nodes[neuron]).__name__ not in _SPIKING or type(nodes[weight]).__name__ not in (
            "Affine",
            "Linear",
        ):
            continue
        into = [e for e in edges if e[1] == weight]
        out = [e for e in edges if e[0] == weight]
        if into == [(neuron, weight)] and out == [(weight, neuron)]:
            loops[neuron] = weight
    return loops
