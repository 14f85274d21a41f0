"""NIR import and export: ``to_nir(model, dt)`` and ``from_nir(graph_or_path, dt)``.

NIR (the Neuromorphic Intermediate Representation, ``pip install 'ste[nir]'``) describes neurons in continuous time;
ste's neurons are discrete. At a step ``dt`` the two meet by Euler's rule, as snnTorch's importer does:

* LIF ``τ·dv/dt = (v_leak − v) + R·I``: ``β = 1 − dt/τ`` and the input is scaled by ``R·dt/τ``;
* IF ``dv/dt = R·I``: ``β = 1``, the input scaled by ``R·dt``;
* LI: a LIF without spikes (``reset="none"``, ``emit="membrane"``);
* a decay of exactly 1 (τ = ∞, no leak): NIR's ``I`` (``dv/dt = R·I``) for a leaky integrator, ``IF`` for a
  spiking neuron. NIR's LIF, LI and CubaLIF with τ = ∞ would take no input at all (``dt/τ = 0``), so a synaptic
  neuron with α = 1 or β = 1 is written as the subgraph of its two stages, the current (``LI`` or ``I``) feeding
  the membrane (``LIF`` or ``IF``).

NIR resets a neuron that fired to ``v_reset`` on the same step; ste's ``reset="zero"`` sets the membrane to 0 before
the next step's decay, which gives the same spikes. NIR has no reset by subtraction (ste's default) and no neuron
that never resets: those layers are refused, never approximated.

Every conversion goes through two tables: ``_EXPORTERS`` (a Keras layer class -> its NIR node) and ``_IMPORTERS``
(a NIR node class name -> the Keras layers it becomes). Nothing else looks at concrete classes.

Layout: NIR (like PyTorch) orders the features of a step channels first, ``(C, H, W)``; a model from ``from_nir``
takes ``[batch, time, H, W, C]`` (Keras's channels-last layout, the one TensorFlow's CPU convolutions have).
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import keras
import numpy as np

from ...errors import ConversionError, MissingDependencyError, STEError
from ...registry import get
from .._cell import SpikingCell
from .._if import IF, IFCell
from .._layer import SpikingRNN
from .._li import LI, LICell
from .._lif import LIF, LIFCell
from .._nir_layers import ChannelsFirstFlatten, ElementwiseScale, SumPooling, ThresholdSpike
from .._recurrent import RLIF, RLIFCell, RSynaptic, RSynapticCell
from .._spike import DEFAULT_SURROGATE
from .._synaptic import Synaptic, SynapticCell
from .._time import TimeDistributed

__all__ = ["from_nir", "to_nir"]

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


# -- the discretization, written once for both directions ----------------------------------------------------------


def _beta(dt: float, tau: Any) -> Any:
    return 1 - dt / np.asarray(tau, np.float64)


def _lif_gain(r: Any, dt: float, tau: Any) -> Any:
    return np.asarray(r, np.float64) * dt / np.asarray(tau, np.float64)


def _if_gain(r: Any, dt: float) -> Any:
    return np.asarray(r, np.float64) * dt


def _solve(function: Callable[[float], float], target: float, guess: float) -> float:
    """A float x next to ``guess`` with ``function(x) == target`` exactly (so that the import gives back ste's value
    bit for bit); ``guess`` when no neighbour within 64 ulps does."""
    if function(guess) == target:
        return guess
    low = high = guess
    for _ in range(64):
        low, high = np.nextafter(low, -np.inf), np.nextafter(high, np.inf)
        for x in (low, high):
            if function(float(x)) == target:
                return float(x)
    return guess


def _tau_of(beta: float, dt: float) -> float:
    return _solve(lambda tau: float(_beta(dt, tau)), beta, dt / (1 - beta))


def _unit_r(dt: float, tau: float) -> float:
    return _solve(lambda r: float(_lif_gain(r, dt, tau)), 1.0, tau / dt)


def _nir_shape(keras_shape: Sequence[int]) -> tuple[int, ...]:
    """Per-step features in NIR's layout (channels first) from Keras's (channels last)."""
    shape = tuple(int(n) for n in keras_shape)
    return shape if len(shape) < 2 else (shape[-1], *shape[:-1])


def _keras_shape(nir_shape: Sequence[int]) -> tuple[int, ...]:
    shape = tuple(int(n) for n in nir_shape)
    return shape if len(shape) < 2 else (*shape[1:], shape[0])


def _channels_last(array: Any) -> np.ndarray:
    a = np.asarray(array, np.float64)
    return a if a.ndim < 2 else np.moveaxis(a, 0, -1)


def _uniform(node: str, name: str, values: Any) -> float:
    flat = np.unique(np.asarray(values, np.float64))
    if flat.size != 1:
        raise ConversionError(
            f"from_nir: node '{node}' has {flat.size} different values of {name}; ste's neurons have one per layer. "
            f"Fix: give every neuron of the node the same {name}."
        )
    return float(flat[0])


# -- export ------------------------------------------------------------------------------------------------------


@dataclass
class _Export:
    dt: float
    shape: tuple[int, ...]  # per-step input features, Keras layout
    name: str


class _Pass:
    """An exporter's answer for a layer that is the identity (or a sum of its inputs) in NIR: no node of its own."""


PASS = _Pass()


def _refuse(layer: keras.layers.Layer, why: str, fix: str) -> ConversionError:
    return ConversionError(f"to_nir: layer '{layer.name}' ({type(layer).__name__}) {why}. Fix: {fix}.")


def _export_dense(layer: keras.layers.Dense, ctx: _Export) -> Any:
    nir = _nir()
    if len(ctx.shape) != 1:
        raise _refuse(
            layer,
            f"acts on the last axis of {ctx.shape} features; NIR's Affine takes a vector",
            "flatten the features first",
        )
    weight = np.asarray(layer.kernel.numpy()).T
    if layer.use_bias:
        return nir.Affine(weight=weight, bias=np.asarray(layer.bias.numpy()))
    return nir.Linear(weight=weight)


def _neuron_metadata(layer: keras.layers.Layer, cell: SpikingCell) -> dict[str, Any]:
    if isinstance(cell, LICell):
        return {LAYER_KEY: type(layer).__name__}
    return {LAYER_KEY: type(layer).__name__, SURROGATE_KEY: repr(cell.surrogate)}


def _export_neuron(layer: SpikingRNN, ctx: _Export) -> Any:
    if not layer.return_sequences or layer.go_backwards or layer.return_state:
        raise _refuse(
            layer,
            "does not return its whole spike train forward in time, as a NIR node does",
            "return_sequences=True, go_backwards=False, return_state=False",
        )
    cell = layer.cell
    if type(cell) not in _CELLS:
        raise _refuse(
            layer,
            f"is a neuron ({type(cell).__name__}) NIR has no node for",
            f"use one of {sorted(c.__name__ for c in _CELLS)}",
        )
    shape = _nir_shape(ctx.shape)
    node = _CELLS[type(cell)](layer, cell, ctx.dt, shape)
    neuron = node.nodes["neuron"] if isinstance(node, _nir().NIRGraph) else node
    neuron.metadata = _neuron_metadata(layer, cell)
    if hasattr(neuron, "tau") or hasattr(neuron, "tau_mem"):
        neuron.metadata[BETA_KEY] = _current(cell, "beta")
    if isinstance(cell, SynapticCell):
        neuron.metadata[ALPHA_KEY] = _current(cell, "alpha")
    return node


def _current(cell: SpikingCell, name: str) -> float:
    """A neuron parameter's present value (a learned variable's, else the fixed number)."""
    return float(getattr(cell, name))


def _check_reset(layer: SpikingRNN, cell: SpikingCell) -> None:
    if cell.emit == "membrane":
        if cell.reset != "none":
            raise _refuse(
                layer,
                f"emits its membrane with reset={cell.reset!r}; NIR's only neuron that outputs its "
                f"membrane is LI, which never resets",
                "reset='none' for a leaky-integrator readout",
            )
        return
    if cell.reset == "subtract":
        raise _refuse(
            layer,
            "resets by subtraction (ste's default); NIR's LIF and IF reset to v_reset, which changes "
            "what the model computes (snnTorch exports it that way silently)",
            "train with reset='zero' (the membrane is set to 0 after a spike), which NIR represents exactly",
        )
    if cell.reset == "none":
        raise _refuse(
            layer,
            "never resets; every spiking neuron in NIR resets to v_reset",
            "reset='zero', or emit='membrane' for a leaky-integrator readout (NIR LI)",
        )


def _export_lif(layer: SpikingRNN, cell: LIFCell, dt: float, shape: tuple[int, ...]) -> Any:
    nir = _nir()
    _check_reset(layer, cell)
    beta = _current(cell, "beta")
    if cell.emit == "membrane":  # reset="none" (_check_reset): a leaky integrator
        return _leaky_integrator(beta, dt, shape)
    if beta == 1.0:
        return _export_if(layer, cell, dt, shape)
    tau = _tau_of(beta, dt)
    full = np.full(shape, 1.0)
    return nir.LIF(
        tau=full * tau,
        r=full * _unit_r(dt, tau),
        v_leak=full * 0.0,
        v_threshold=full * _current(cell, "threshold"),
        v_reset=full * 0.0,
    )


def _unit_if_r(dt: float) -> float:
    """R with R·dt = 1 exactly: an integrator (I, IF) that adds its input unscaled."""
    return _solve(lambda x: float(_if_gain(x, dt)), 1.0, 1 / dt)


def _export_if(layer: SpikingRNN, cell: LIFCell, dt: float, shape: tuple[int, ...]) -> Any:
    nir = _nir()
    _check_reset(layer, cell)
    full = np.full(shape, 1.0)
    if cell.emit == "membrane":  # reset="none": U[t] = U[t−1] + X[t], NIR's integrator
        return nir.I(r=full * _unit_if_r(dt))
    return nir.IF(r=full * _unit_if_r(dt), v_threshold=full * _current(cell, "threshold"), v_reset=full * 0.0)


def _leaky_integrator(decay: float, dt: float, shape: tuple[int, ...]) -> Any:
    """U[t] = decay·U[t−1] + X[t]: NIR's LI with τ = dt/(1 − decay), or its I for a decay of 1 (τ = ∞)."""
    nir = _nir()
    full = np.full(shape, 1.0)
    if decay == 1.0:
        return nir.I(r=full * _unit_if_r(dt))
    tau = _tau_of(decay, dt)
    return nir.LI(tau=full * tau, r=full * _unit_r(dt, tau), v_leak=full * 0.0)


def _export_li(layer: SpikingRNN, cell: LICell, dt: float, shape: tuple[int, ...]) -> Any:
    return _leaky_integrator(_current(cell, "beta"), dt, shape)


def _export_synaptic(layer: SpikingRNN, cell: SynapticCell, dt: float, shape: tuple[int, ...]) -> Any:
    nir = _nir()
    _check_reset(layer, cell)
    if cell.emit == "membrane":
        raise _refuse(layer, "emits its membrane; NIR's CubaLI has no ste import", "emit='spikes'")
    alpha, beta = _current(cell, "alpha"), _current(cell, "beta")
    if 1.0 in (alpha, beta):
        return _export_synaptic_stages(layer, cell, dt, shape)
    tau_syn, tau_mem = _tau_of(alpha, dt), _tau_of(beta, dt)
    full = np.full(shape, 1.0)
    return nir.CubaLIF(
        tau_syn=full * tau_syn,
        tau_mem=full * tau_mem,
        r=full * _unit_r(dt, tau_mem),
        v_leak=full * 0.0,
        v_threshold=full * _current(cell, "threshold"),
        v_reset=full * 0.0,
        w_in=full * _unit_r(dt, tau_syn),
    )


def _export_synaptic_stages(layer: SpikingRNN, cell: SynapticCell, dt: float, shape: tuple[int, ...]) -> Any:
    """A synaptic neuron with α = 1 or β = 1 as the subgraph input -> synapse -> neuron -> output: its current
    I_syn[t] = α·I_syn[t−1] + X[t] (NIR's LI, or I for α = 1) feeds its membrane (LIF, or IF for β = 1). CubaLIF
    has no such form: with τ = ∞ it takes no input (its ``dt/τ`` is 0)."""
    nir = _nir()
    if isinstance(cell, RSynapticCell):
        raise _refuse(
            layer,
            f"is a recurrent synaptic neuron with a decay of 1 (alpha={_current(cell, 'alpha')}, "
            f"beta={_current(cell, 'beta')}): NIR's CubaLIF with τ = ∞ takes no input, and the two-node form "
            f"that stands for a synaptic neuron with a decay of 1 has no recurrent variant here",
            "alpha and beta below 1, or ste.spiking.RLIF (beta=1 is NIR's IF)",
        )
    beta = _current(cell, "beta")
    membrane = _export_if(layer, cell, dt, shape) if beta == 1.0 else _export_lif(layer, cell, dt, shape)
    size = np.array(shape)
    nodes = {
        "input": nir.Input(input_type={"input": size}),
        "synapse": _leaky_integrator(_current(cell, "alpha"), dt, shape),
        "neuron": membrane,
        "output": nir.Output(output_type={"output": size}),
    }
    edges = [("input", "synapse"), ("synapse", "neuron"), ("neuron", "output")]
    return nir.NIRGraph(nodes=nodes, edges=edges, type_check=False)


def _export_recurrent(layer: SpikingRNN, cell: Any, dt: float, shape: tuple[int, ...]) -> Any:
    """A recurrent neuron as snnTorch writes RLeaky/RSynaptic: a subgraph input -> neuron -> output, with the
    neuron feeding itself through a Linear/Affine node (NIR's y = W·x, so W = Vᵀ)."""
    nir = _nir()
    base = _export_synaptic if isinstance(cell, SynapticCell) else _export_lif
    neuron = base(layer, cell, dt, shape)
    kernel = np.asarray(cell._learned["recurrent_kernel"].numpy())
    weight = kernel.T if cell.all_to_all else np.diag(kernel)
    if cell.recurrent_bias:
        w_rec = nir.Affine(weight=weight, bias=np.asarray(cell._learned["recurrent_bias"].numpy()))
    else:
        w_rec = nir.Linear(weight=weight)
    size = np.array(shape)
    nodes = {
        "input": nir.Input(input_type={"input": size}),
        "neuron": neuron,
        "w_rec": w_rec,
        "output": nir.Output(output_type={"output": size}),
    }
    edges = [("input", "neuron"), ("neuron", "w_rec"), ("w_rec", "neuron"), ("neuron", "output")]
    return nir.NIRGraph(nodes=nodes, edges=edges, type_check=False)


_CELLS: dict[type[SpikingCell], Callable[..., Any]] = {
    LIFCell: _export_lif,
    IFCell: _export_if,
    LICell: _export_li,
    SynapticCell: _export_synaptic,
    RLIFCell: _export_recurrent,
    RSynapticCell: _export_recurrent,
}


def _export_scale(layer: ElementwiseScale, ctx: _Export) -> Any:
    scale = np.broadcast_to(layer.scale, ctx.shape)
    return _nir().Scale(scale=np.asarray(_nir_array(scale)))


def _nir_array(array: Any) -> np.ndarray:
    a = np.asarray(array)
    return a if a.ndim < 2 else np.moveaxis(a, -1, 0)


def _export_threshold(layer: ThresholdSpike, ctx: _Export) -> Any:
    node = _nir().Threshold(threshold=_nir_array(np.broadcast_to(layer.threshold, ctx.shape)))
    node.metadata = {LAYER_KEY: type(layer).__name__, SURROGATE_KEY: repr(layer.surrogate)}
    return node


def _export_flatten(layer: ChannelsFirstFlatten, ctx: _Export) -> Any:
    return _nir().Flatten(input_type={"input": np.array(_nir_shape(ctx.shape))}, start_dim=0, end_dim=-1)


def _export_sum_pool(layer: SumPooling, ctx: _Export) -> Any:
    return _nir().SumPool2d(
        kernel_size=np.array(layer.pool_size), stride=np.array(layer.strides), padding=np.array((0, 0))
    )


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


def _conv_padding(layer: Any) -> tuple[int, ...]:
    kernel = layer.kernel_size
    if layer.padding == "valid":
        return tuple(0 for _ in kernel)
    same = [d * (k - 1) for k, d in zip(kernel, layer.dilation_rate)]
    if any(s != 1 for s in layer.strides) or any(p % 2 for p in same):
        raise _refuse(
            layer,
            "pads 'same' with a stride or an even kernel; TensorFlow then pads one side more, and "
            "NIR's padding is symmetric",
            "padding='valid', or stride 1 with an odd kernel",
        )
    return tuple(p // 2 for p in same)


def _export_conv(layer: Any, ctx: _Export) -> Any:
    nir = _nir()
    if layer.data_format != "channels_last":
        raise _refuse(layer, "is channels first", "data_format='channels_last' (NIR's layout is converted for you)")
    kernel = np.asarray(layer.kernel.numpy())
    rank = kernel.ndim - 2
    weight = np.transpose(kernel, (rank + 1, rank, *range(rank)))  # (k..., in, out) -> (out, in, k...)
    bias = np.asarray(layer.bias.numpy()) if layer.use_bias else np.zeros(weight.shape[0], weight.dtype)
    padding = _conv_padding(layer)
    spatial = tuple(int(n) for n in ctx.shape[:-1])
    if rank == 1:
        return nir.Conv1d(
            input_shape=spatial[0],
            weight=weight,
            stride=int(layer.strides[0]),
            padding=padding[0],
            dilation=int(layer.dilation_rate[0]),
            groups=int(layer.groups),
            bias=bias,
        )
    return nir.Conv2d(
        input_shape=spatial,
        weight=weight,
        stride=tuple(layer.strides),
        padding=padding,
        dilation=tuple(layer.dilation_rate),
        groups=int(layer.groups),
        bias=bias,
    )


def _export_avg_pool(layer: keras.layers.AveragePooling2D, ctx: _Export) -> Any:
    if layer.padding != "valid" or layer.data_format != "channels_last":
        raise _refuse(
            layer,
            "pads or is channels first; NIR's AvgPool2d here is unpadded",
            "padding='valid', data_format='channels_last'",
        )
    return _nir().AvgPool2d(
        kernel_size=np.array(layer.pool_size), stride=np.array(layer.strides), padding=np.array((0, 0))
    )


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


# -- import ------------------------------------------------------------------------------------------------------


@dataclass
class _Import:
    dt: float
    name: str  # the node's name
    shape: tuple[int, ...]  # per-step input features, NIR layout
    metadata: dict[str, Any] = field(default_factory=dict)

    def refuse(self, node: Any, why: str, fix: str) -> ConversionError:
        return ConversionError(f"from_nir: node '{self.name}' ({type(node).__name__}) {why}. Fix: {fix}.")

    def surrogate(self) -> Any:
        """The surrogate ste wrote into the node's metadata, else the default (never a reason to refuse)."""
        spec = self.metadata.get(SURROGATE_KEY)
        if isinstance(spec, bytes):
            spec = spec.decode()
        if isinstance(spec, str):
            try:
                return get(spec)
            except STEError:
                pass
        return DEFAULT_SURROGATE

    def layer_name(self, suffix: str = "") -> str:
        return (self.name + suffix).replace("/", "_")


def _import_affine(node: Any, ctx: _Import) -> list[keras.layers.Layer]:
    weight = np.asarray(node.weight)
    if weight.ndim != 2:
        raise ctx.refuse(node, f"has a weight of shape {weight.shape}", "a 2-D weight [out, in]")
    if len(ctx.shape) != 1 or ctx.shape[0] != weight.shape[1]:
        raise ctx.refuse(
            node,
            f"takes {weight.shape[1]} inputs and receives features of shape {ctx.shape}",
            "flatten its input (a Flatten node) or fix the weight",
        )
    bias = getattr(node, "bias", None)
    dense = keras.layers.Dense(weight.shape[0], use_bias=bias is not None, name=ctx.layer_name())
    dense.build((None, None, weight.shape[1]))
    dense.set_weights([weight.T] if bias is None else [weight.T, np.asarray(bias)])
    return [dense]


def _resolution(values: Any) -> float:
    """The relative rounding of a parameter as stored: its float type's epsilon (float64's for an integer type,
    whose values are exact and computed with in float64)."""
    dtype = np.asarray(values).dtype
    return float(np.finfo(dtype if np.issubdtype(dtype, np.floating) else np.float64).eps)


def _scale_layers(ctx: _Import, gain: Any, *parameters: Any) -> list[keras.layers.Layer]:
    """An ``ElementwiseScale`` by the input gain, none where it is 1 up to the rounding of the ``parameters`` it is
    computed from (the node's own numbers).

    (An exporter that writes R = τ/dt, as snnTorch's, means a gain of 1; in the node's float32 numbers R·dt/τ comes
    out 1 ± a few ulps, which is the rounding of the file, not a feature of the model.)
    """
    gain = np.broadcast_to(np.asarray(gain, np.float64), ctx.shape)
    precision = min(_resolution(values) for values in parameters) if parameters else 0.0
    if np.all(np.abs(gain - 1.0) <= 4 * precision):
        return []
    return [ElementwiseScale(_channels_last(gain), name=ctx.layer_name("_input_scale"))]


def _neuron(layer: keras.layers.Layer, ctx: _Import) -> list[keras.layers.Layer]:
    return [layer]  # ste's neurons take [batch, time, ...features] as they come (feature maps too)


def _no_leak(node: Any, ctx: _Import) -> None:
    if np.any(np.asarray(node.v_leak) != 0):
        raise ctx.refuse(
            node,
            "has v_leak ≠ 0 (a constant drive ste's neurons have no term for)",
            "v_leak = 0, with the drive as a bias of the Affine node in front",
        )


def _reset_zero(node: Any, ctx: _Import) -> None:
    if np.any(np.asarray(node.v_reset) != 0):
        raise ctx.refuse(node, "resets to v_reset ≠ 0; ste's reset='zero' sets the membrane to 0", "v_reset = 0")


def _checked_decay(node: Any, ctx: _Import, tau: Any, key: str, name: str) -> float:
    """The decay ``1 − dt/τ`` of a node (``name``: "β = 1 − dt/τ", ...), ste's exact value from the metadata under
    ``key`` when the node's τ rounds it; refused outside [0, 1]."""
    decay = _uniform(ctx.name, name, _beta(ctx.dt, tau))
    exact = ctx.metadata.get(key)
    if isinstance(exact, (float, np.floating)) and abs(float(exact) - decay) <= 4 * np.finfo(np.float64).eps:
        decay = float(exact)  # ste's own value, which the τ in the node rounds
    if not 0.0 <= decay <= 1.0:
        raise ctx.refuse(
            node,
            f"has {name} = {decay} at dt = {ctx.dt}, outside [0, 1] (τ < dt)",
            "a smaller dt (snnTorch's graphs use dt=1e-4)",
        )
    return decay


@dataclass(frozen=True)
class _Dynamics:
    """A NIR neuron node as ste's discrete neuron: its decay per step, its input gain, the node's numbers the gain
    is computed from (whose rounding it carries) and its threshold (None: it never spikes)."""

    decay: float
    gain: Any
    parameters: tuple[Any, ...]
    threshold: float | None = None


def _integrator(node: Any, ctx: _Import, key: str = BETA_KEY, name: str = "β") -> _Dynamics:
    """LI, ``v[t] = (1 − dt/τ)·v[t−1] + (R·dt/τ)·x[t]``, or I, ``v[t] = v[t−1] + R·dt·x[t]`` (a decay of 1)."""
    if type(node).__name__ == "I":
        return _Dynamics(1.0, _if_gain(node.r, ctx.dt), (node.r,))
    _no_leak(node, ctx)
    decay = _checked_decay(node, ctx, node.tau, key, f"{name} = 1 − dt/τ")
    return _Dynamics(decay, _lif_gain(node.r, ctx.dt, node.tau), (node.r, node.tau))


def _membrane(node: Any, ctx: _Import) -> _Dynamics:
    """LIF, or IF (a decay of 1), resetting to 0."""
    if type(node).__name__ == "IF":
        _reset_zero(node, ctx)
        dynamics = _Dynamics(1.0, _if_gain(node.r, ctx.dt), (node.r,))
    else:
        _no_leak(node, ctx)
        _reset_zero(node, ctx)
        beta = _checked_decay(node, ctx, node.tau, BETA_KEY, "β = 1 − dt/τ")
        dynamics = _Dynamics(beta, _lif_gain(node.r, ctx.dt, node.tau), (node.r, node.tau))
    threshold = _uniform(ctx.name, "v_threshold", node.v_threshold)
    return _Dynamics(dynamics.decay, dynamics.gain, dynamics.parameters, threshold)


def _import_spiking(node: Any, ctx: _Import) -> list[keras.layers.Layer]:
    """LIF -> ste's LIF, IF -> IF (both with reset="zero")."""
    d = _membrane(node, ctx)
    arguments = dict(threshold=d.threshold, reset="zero", surrogate=ctx.surrogate(), name=ctx.layer_name())
    layer = IF(**arguments) if type(node).__name__ == "IF" else LIF(beta=d.decay, **arguments)
    return _scale_layers(ctx, d.gain, *d.parameters) + _neuron(layer, ctx)


def _import_integrator(node: Any, ctx: _Import) -> list[keras.layers.Layer]:
    """LI -> ste's LI; I -> LI with β = 1."""
    d = _integrator(node, ctx)
    layer = LI(beta=d.decay, name=ctx.layer_name())
    return _scale_layers(ctx, d.gain, *d.parameters) + _neuron(layer, ctx)


def _cuba_parameters(node: Any, ctx: _Import) -> tuple[float, float, float, Any]:
    """α, β, ϑ and the input gain of a CubaLIF: i[t] = α·i[t−1] + (w_in·dt/τ_syn)·x[t], v[t] = β·v[t−1] +
    (R·dt/τ_mem)·i[t]; both gains act on a linear recursion, so they multiply the input once."""
    _no_leak(node, ctx)
    _reset_zero(node, ctx)
    alpha = _checked_decay(node, ctx, node.tau_syn, ALPHA_KEY, "α = 1 − dt/τ_syn")
    beta = _checked_decay(node, ctx, node.tau_mem, BETA_KEY, "β = 1 − dt/τ_mem")
    threshold = _uniform(ctx.name, "v_threshold", node.v_threshold)
    gain = _lif_gain(node.w_in, ctx.dt, node.tau_syn) * _lif_gain(node.r, ctx.dt, node.tau_mem)
    return alpha, beta, threshold, gain


def _import_cuba_lif(node: Any, ctx: _Import) -> list[keras.layers.Layer]:
    alpha, beta, threshold, gain = _cuba_parameters(node, ctx)
    layer = Synaptic(
        alpha=alpha, beta=beta, threshold=threshold, reset="zero", surrogate=ctx.surrogate(), name=ctx.layer_name()
    )
    return _scale_layers(ctx, gain, node.r, node.tau_mem, node.w_in, node.tau_syn) + _neuron(layer, ctx)


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


def _import_scale(node: Any, ctx: _Import) -> list[keras.layers.Layer]:
    return [ElementwiseScale(_channels_last(np.broadcast_to(node.scale, ctx.shape)), name=ctx.layer_name())]


def _import_threshold(node: Any, ctx: _Import) -> list[keras.layers.Layer]:
    threshold = _channels_last(np.broadcast_to(node.threshold, ctx.shape))
    return [ThresholdSpike(threshold, surrogate=ctx.surrogate(), name=ctx.layer_name())]


def _import_flatten(node: Any, ctx: _Import) -> list[keras.layers.Layer]:
    rank = len(ctx.shape)
    if int(node.start_dim) not in (0, -rank) or int(node.end_dim) not in (-1, rank - 1):
        raise ctx.refuse(
            node,
            f"flattens dimensions {node.start_dim}..{node.end_dim} of a step's {ctx.shape} "
            f"features; only flattening all of them has a layer here",
            "start_dim=0, end_dim=-1",
        )
    return [] if rank == 1 else [ChannelsFirstFlatten(name=ctx.layer_name())]


def _pair(value: Any, rank: int) -> tuple[int, ...]:
    array = np.atleast_1d(np.asarray(value)).astype(int)
    return tuple(int(v) for v in np.broadcast_to(array, (rank,)))


def _import_conv(node: Any, ctx: _Import) -> list[keras.layers.Layer]:
    weight = np.asarray(node.weight)
    rank = weight.ndim - 2
    kernel = weight.shape[2:]
    stride, dilation = _pair(node.stride, rank), _pair(node.dilation, rank)
    if any(s > 1 for s in stride) and any(d > 1 for d in dilation):
        raise ctx.refuse(
            node,
            "has a stride and a dilation > 1 together, which TensorFlow's convolution lacks",
            "a stride or a dilation of 1",
        )
    if isinstance(node.padding, str):
        padding = node.padding
        if padding == "same" and any(s > 1 for s in stride):
            raise ctx.refuse(node, "pads 'same' with a stride > 1 (PyTorch has no such padding)", "integer padding")
    else:
        pads = _pair(node.padding, rank)
        same = tuple(d * (k - 1) for k, d in zip(kernel, dilation))
        if all(p == 0 for p in pads):
            padding = "valid"
        elif all(s == 1 for s in stride) and all(2 * p == q for p, q in zip(pads, same)):
            padding = "same"
        else:
            raise ctx.refuse(
                node,
                f"pads by {pads}, which is neither 'valid' nor TensorFlow's 'same'",
                "padding 0 or (kernel − 1)·dilation/2 with stride 1",
            )
    conv_class = keras.layers.Conv1D if rank == 1 else keras.layers.Conv2D
    conv = conv_class(
        weight.shape[0], kernel, strides=stride, padding=padding, dilation_rate=dilation, groups=int(node.groups)
    )
    channels = ctx.shape[0]
    conv.build((None, *_keras_shape(ctx.shape)))
    if conv.kernel.shape[-2] * int(node.groups) != channels:
        raise ctx.refuse(
            node,
            f"takes {weight.shape[1] * int(node.groups)} channels and receives {channels}",
            "fix the weight or the input",
        )
    conv.set_weights([np.transpose(weight, (*range(2, rank + 2), 1, 0)), np.asarray(node.bias)])
    return [TimeDistributed(conv, name=ctx.layer_name())]


def _pool_arguments(node: Any, ctx: _Import) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if np.any(np.asarray(node.padding) != 0):
        raise ctx.refuse(node, f"pads by {node.padding}", "padding 0 (pad with the convolution in front)")
    return _pair(node.kernel_size, 2), _pair(node.stride, 2)


def _import_avg_pool(node: Any, ctx: _Import) -> list[keras.layers.Layer]:
    size, stride = _pool_arguments(node, ctx)
    pool = keras.layers.AveragePooling2D(size, stride, padding="valid")
    return [TimeDistributed(pool, name=ctx.layer_name())]


def _import_sum_pool(node: Any, ctx: _Import) -> list[keras.layers.Layer]:
    size, stride = _pool_arguments(node, ctx)
    return [SumPooling(size, stride, name=ctx.layer_name())]


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


def from_nir(graph_or_path: Any, dt: float = 1.0) -> keras.Model:
    """A Keras model of ste layers from a NIR graph (``nir.NIRGraph``, or the path of a file ``nir.write`` wrote).

    ``dt`` is the time step of the discretization (β = 1 − dt/τ); snnTorch's exporter assumes ``dt=1e-4``. The model
    takes ``[batch, time, *features]`` with the features of a step channels last (``[batch, time, H, W, C]``),
    and returns every output node's values at every step. See docs/spiking.md for the mapping of every node.

    Raises :class:`ste.errors.ConversionError` for a node with no exact ste counterpart, a parameter that is not an
    array of numbers (integers are read as float64) and an edge that names no node, naming it and saying why.
    """
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
