"""Export of ste's neurons by the NIR form each cell class declares (``SpikingCell.nir_form``): ``"lif"``, ``"if"``,
``"li"``, ``"cuba_lif"`` (``CubaLIF``, or its two stages for α = 1 or β = 1) and ``"recurrent_lif"`` /
``"recurrent_cuba_lif"`` (a subgraph of the neuron and its weight), each reset checked."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np

from .._cell import SpikingCell
from .._layer import SpikingRNN
from .._leaky import LeakyCell
from .._names import NEURONS
from ._discretization import _tau_of, _unit_if_r, _unit_r
from ._export_context import _Export, _refuse
from ._graph import ALPHA_KEY, BETA_KEY, LAYER_KEY, SURROGATE_KEY, _nir
from ._layout import _nir_shape


def _neuron_metadata(layer: keras.layers.Layer, cell: SpikingCell) -> dict[str, Any]:
    if type(cell).nir_form == "li":
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
    form = type(cell).nir_form
    if form not in _FORMS:
        raise _refuse(
            layer,
            f"is a neuron ({type(cell).__name__}, nir_form={form!r}) NIR has no node for",
            f"use a neuron with a NIR form ({', '.join(_with_forms())}), or declare nir_form = one of "
            f"{sorted(_FORMS)} in {type(cell).__name__} if its step computes that node",
        )
    shape = _nir_shape(ctx.shape)
    node = _FORMS[form](layer, cell, ctx.dt, shape)
    neuron = node.nodes["neuron"] if isinstance(node, _nir().NIRGraph) else node
    neuron.metadata = _neuron_metadata(layer, cell)
    if hasattr(neuron, "tau") or hasattr(neuron, "tau_mem"):
        neuron.metadata[BETA_KEY] = _current(cell, "beta")
    if form in ("cuba_lif", "recurrent_cuba_lif"):
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


def _export_lif(layer: SpikingRNN, cell: LeakyCell, dt: float, shape: tuple[int, ...]) -> Any:
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


def _export_if(layer: SpikingRNN, cell: LeakyCell, dt: float, shape: tuple[int, ...]) -> Any:
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


def _export_li(layer: SpikingRNN, cell: SpikingCell, dt: float, shape: tuple[int, ...]) -> Any:
    return _leaky_integrator(_current(cell, "beta"), dt, shape)


def _export_synaptic(layer: SpikingRNN, cell: LeakyCell, dt: float, shape: tuple[int, ...]) -> Any:
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


def _export_synaptic_stages(layer: SpikingRNN, cell: LeakyCell, dt: float, shape: tuple[int, ...]) -> Any:
    """A synaptic neuron with α = 1 or β = 1 as the subgraph input -> synapse -> neuron -> output: its current
    I_syn[t] = α·I_syn[t−1] + X[t] (NIR's LI, or I for α = 1) feeds its membrane (LIF, or IF for β = 1). CubaLIF
    has no such form: with τ = ∞ it takes no input (its ``dt/τ`` is 0)."""
    nir = _nir()
    if type(cell).nir_form == "recurrent_cuba_lif":
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
    base = _export_synaptic if type(cell).nir_form == "recurrent_cuba_lif" else _export_lif
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


#: NIR form (``SpikingCell.nir_form``) -> exporter(layer, cell, dt, shape).
_FORMS: dict[str, Callable[..., Any]] = {
    "lif": _export_lif,
    "if": _export_if,
    "li": _export_li,
    "cuba_lif": _export_synaptic,
    "recurrent_lif": _export_recurrent,
    "recurrent_cuba_lif": _export_recurrent,
}


def _with_forms() -> list[str]:
    """The registered neurons (``ste.spiking.neurons()``) whose cell declares a NIR form."""
    return [name for name, cls in NEURONS.items() if cls.nir_form in _FORMS]
