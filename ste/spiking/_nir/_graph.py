"""What both directions share about a NIR graph: the optional ``nir`` package, the metadata keys ste writes into
a node, the time step, and the edges (checked, and the nodes put in the order they feed each other)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import ConversionError, MissingDependencyError

#: metadata keys ste writes into a NIR node (NIR has no field for the surrogate, a training detail)
SURROGATE_KEY = "ste_surrogate"
LAYER_KEY = "ste_layer"
BETA_KEY = "ste_beta"  # β itself: 1 − dt/τ cannot hit every float64 below 0.5, and a round trip is bit for bit
ALPHA_KEY = "ste_alpha"  # α of a synaptic neuron, for the same reason


def _nir() -> Any:
    try:
        import nir
    except ImportError:
        raise MissingDependencyError(
            "ste.spiking.to_nir / from_nir need the nir package, which is not installed. "
            "Fix: pip install 'ste[nir]' (or pip install nir)."
        ) from None
    return nir


def _checked_dt(dt: Any, op: str) -> float:
    if isinstance(dt, bool) or not isinstance(dt, (int, float)) or not np.isfinite(dt) or dt <= 0:
        raise ConversionError(f"{op}: dt must be a positive number (the time step); received {dt!r}.")
    return float(dt)


def _checked_edges(graph: Any, where: str) -> list[tuple[str, str]]:
    """The graph's edges as (source, target) pairs of node names; an edge that is not a pair or names no node of
    the graph is a ConversionError naming it and the nodes there are."""
    nodes = list(graph.nodes)
    edges = []
    for edge in graph.edges:
        pair = tuple(edge) if isinstance(edge, (tuple, list, np.ndarray)) else (edge,)
        missing = [end for end in pair if end not in graph.nodes] if len(pair) == 2 else []
        if len(pair) != 2 or missing:
            why = f"names no node {missing[0]!r}" if missing else "is not a pair (source, target)"
            raise ConversionError(
                f"from_nir: the edge {edge!r} of {where} {why}; its nodes are {nodes}. Fix: make every edge a pair "
                f"of node names of the graph (correct the name, or add the node)."
            )
        edges.append((str(pair[0]), str(pair[1])))
    return edges


def _order(nodes: dict[str, Any], edges: Sequence[tuple[str, str]]) -> list[str]:
    """The nodes in an order where each comes after those that feed it; a cycle is an error naming its nodes."""
    feeding: dict[str, list[str]] = {name: [] for name in nodes}
    for source, target in edges:
        feeding[target].append(source)
    done: list[str] = []
    placed: set[str] = set()
    pending = list(nodes)
    while pending:
        ready = [name for name in pending if all(s in placed for s in feeding[name])]
        if not ready:
            raise ConversionError(
                f"from_nir: nodes {sorted(pending)} feed each other (a recurrent loop) in a way ste has no "
                f"recurrent neuron for. Fix: a loop of one neuron node and one Affine/Linear node."
            )
        for name in ready:
            done.append(name)
            placed.add(name)
        pending = [name for name in pending if name not in placed]
    return done
