"""``from_nir`` and ``to_nir`` with unusual and malformed input (docs/spiking.md): integer parameters, missing
nodes, bad ``dt``, a decay of one."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import pytest

import ste
from tests.helpers import expect_ste_error

nir = pytest.importorskip("nir")


def _lif_graph(**overrides: Any) -> Any:
    params = {
        "tau": np.array([2e-3, 2e-3]),
        "r": np.array([1.0, 1.0]),
        "v_leak": np.zeros(2),
        "v_threshold": np.ones(2),
        "v_reset": np.zeros(2),
    }
    params.update(overrides)
    nodes = {
        "input": nir.Input(input_type=np.array([3])),
        "affine": nir.Affine(weight=np.ones((2, 3)), bias=np.zeros(2)),
        "lif": nir.LIF(**params),
        "output": nir.Output(output_type=np.array([2])),
    }
    edges = [("input", "affine"), ("affine", "lif"), ("lif", "output")]
    return nir.NIRGraph(nodes=nodes, edges=edges)


def test_from_nir_reads_integer_parameters() -> None:
    graph = _lif_graph(
        tau=np.array([4, 4]),
        v_threshold=np.array([1, 1]),
        r=np.array([1, 1]),
        v_leak=np.array([0, 0]),
        v_reset=np.array([0, 0]),
    )
    model = ste.spiking.from_nir(graph, dt=1)
    lif = next(layer for layer in model.layers if "LIF" in type(layer).__name__)
    np.testing.assert_allclose(float(np.asarray(lif.beta)), 1 - 1 / 4, rtol=1e-6)  # β = 1 − dt/τ


def test_from_nir_refuses_edge_to_missing_node() -> None:
    graph = _lif_graph()
    graph.edges.append(("lif", "nowhere"))
    expect_ste_error(lambda: ste.spiking.from_nir(graph, dt=1e-3), "nowhere")


def test_from_nir_refuses_non_numeric_parameter() -> None:
    graph = _lif_graph(tau=np.array(["a", "b"]))
    expect_ste_error(lambda: ste.spiking.from_nir(graph, dt=1e-3), "tau")


@pytest.mark.parametrize("dt", [0.0, -1e-3, float("nan"), "1e-3"])
def test_from_nir_refuses_bad_dt(dt: Any) -> None:
    expect_ste_error(lambda: ste.spiking.from_nir(_lif_graph(), dt=dt))


def test_to_nir_li_with_decay_one_round_trips() -> None:
    model = keras.Sequential([keras.Input((7, 3)), keras.layers.Dense(2), ste.spiking.LI(beta=1.0)])
    graph = ste.spiking.to_nir(model, dt=1e-3)
    back = ste.spiking.from_nir(graph, dt=1e-3)
    x = np.random.default_rng(0).normal(size=(2, 7, 3)).astype("float32")
    np.testing.assert_array_equal(np.asarray(back(x)), np.asarray(model(x)))
    # a perfect integrator: the output is the running sum of the currents
    currents = x @ np.asarray(model.layers[0].kernel) + np.asarray(model.layers[0].bias)
    np.testing.assert_allclose(np.asarray(model(x)), np.cumsum(currents, axis=1), rtol=1e-5, atol=1e-5)


def test_to_nir_refuses_non_model() -> None:
    expect_ste_error(lambda: ste.spiking.to_nir("model", dt=1e-3))
