"""ste.spiking.to_nir / from_nir: NIR graphs built with nir's own API against a numpy simulation of NIR's equations
(reference.simulate_nir), to_nir -> from_nir bit for bit, files both ways, and every refusal."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import keras
import numpy as np
import pytest

import ste
from ste.spiking._nir._layers import ChannelsFirstFlatten

from . import reference

nir = pytest.importorskip("nir", reason="the NIR tests need the optional extra: pip install 'ste[nir]'")

RNG = np.random.default_rng(7)


@pytest.fixture
def float64() -> Iterator[None]:
    """Layers built in float64, so that the numpy reference (float64) and ste compare the same membranes."""
    previous = keras.config.floatx(), keras.config.dtype_policy()
    keras.config.set_floatx("float64")
    keras.config.set_dtype_policy("float64")
    try:
        yield
    finally:
        keras.config.set_floatx(previous[0])
        keras.config.set_dtype_policy(previous[1])


def _channels_last(x: np.ndarray) -> np.ndarray:
    return x if x.ndim <= 3 else np.moveaxis(x, 2, -1)


def _dense_graph(dt: float) -> nir.NIRGraph:
    """Affine -> LIF (input gain R·dt/τ ≠ 1) -> Linear -> IF -> Affine -> LI, written in NIR's own terms."""
    n_in, n_hidden, n_out = 6, 8, 4
    tau = np.full(n_hidden, 5 * dt)
    nodes = {
        "input": nir.Input(input_type={"input": np.array([n_in])}),
        "fc1": nir.Affine(weight=RNG.normal(0, 1, (n_hidden, n_in)), bias=RNG.normal(0, 0.1, n_hidden)),
        "lif": nir.LIF(
            tau=tau, r=np.full(n_hidden, 3.0), v_leak=np.zeros(n_hidden), v_threshold=np.full(n_hidden, 0.7)
        ),
        "fc2": nir.Linear(weight=RNG.normal(0, 1, (n_hidden, n_hidden))),
        "if": nir.IF(r=np.full(n_hidden, 0.5 / dt), v_threshold=np.full(n_hidden, 1.2)),
        "fc3": nir.Affine(weight=RNG.normal(0, 1, (n_out, n_hidden)), bias=np.zeros(n_out)),
        "li": nir.LI(tau=np.full(n_out, 4 * dt), r=RNG.uniform(1, 4, n_out), v_leak=np.zeros(n_out)),
        "output": nir.Output(output_type={"output": np.array([n_out])}),
    }
    names = list(nodes)
    return nir.NIRGraph(nodes=nodes, edges=list(itertools.pairwise(names)))


@pytest.mark.parametrize("dt", [1.0, 1e-4])
def test_dense_graph_matches_nir_equations(float64: None, dt: float) -> None:
    graph = _dense_graph(dt)
    x = RNG.normal(0.3, 1.0, (3, 30, 6))
    expected = reference.simulate_nir(graph, x, dt)
    got = ste.spiking.from_nir(graph, dt=dt)(x).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)  # the LI readout: membranes, not spikes
    spikes = ste.spiking.from_nir(_truncated(graph, "if"), dt=dt)(x).numpy()
    np.testing.assert_array_equal(spikes, reference.simulate_nir(_truncated(graph, "if"), x, dt))
    assert 0 < spikes.mean() < 1


def _truncated(graph: nir.NIRGraph, last: str) -> nir.NIRGraph:
    """The graph up to node ``last``, then the output."""
    names = list(graph.nodes)
    kept = names[: names.index(last) + 1]
    nodes = {name: graph.nodes[name] for name in kept}
    shape = np.array(graph.nodes[last].output_type["output"])
    nodes["output"] = nir.Output(output_type={"output": shape})
    kept.append("output")
    return nir.NIRGraph(nodes=nodes, edges=list(itertools.pairwise(kept)))


def _conv2d(c_in: int, c_out: int, size: int, *, scale: float, stride: int, padding: int, bias: bool) -> nir.Conv2d:
    """A 3×3 convolution with random weights (PyTorch's layout [out, in, kh, kw])."""
    return nir.Conv2d(
        input_shape=(size, size),
        weight=RNG.normal(0, scale, (c_out, c_in, 3, 3)),
        stride=stride,
        padding=padding,
        dilation=1,
        groups=1,
        bias=RNG.normal(0, 0.1, c_out) if bias else np.zeros(c_out),
    )


def test_conv_graph_matches_nir_equations(float64: None) -> None:
    nodes = {
        "input": nir.Input(input_type={"input": np.array([2, 9, 9])}),
        "conv": _conv2d(2, 4, 9, scale=0.5, stride=1, padding=1, bias=True),
        "thr": nir.Threshold(threshold=RNG.uniform(0, 0.5, (4, 9, 9))),
        "conv2": _conv2d(4, 4, 9, scale=0.5, stride=2, padding=0, bias=False),
        "sum": nir.SumPool2d(kernel_size=np.array([2, 2]), stride=np.array([2, 2]), padding=np.array([0, 0])),
        "avg": nir.AvgPool2d(kernel_size=np.array([1, 2]), stride=np.array([1, 1]), padding=np.array([0, 0])),
        "flat": nir.Flatten(input_type={"input": np.array([4, 2, 1])}, start_dim=0),
        "fc": nir.Affine(weight=RNG.normal(0, 1, (5, 8)), bias=np.zeros(5)),
        "scale": nir.Scale(scale=RNG.uniform(0.5, 2, 5)),
        "lif": nir.LIF(tau=np.full(5, 2.0), r=np.full(5, 2.0), v_leak=np.zeros(5), v_threshold=np.full(5, 0.5)),
        "output": nir.Output(output_type={"output": np.array([5])}),
    }
    names = list(nodes)
    graph = nir.NIRGraph(nodes=nodes, edges=list(itertools.pairwise(names)), type_check=False)
    x = RNG.normal(0.2, 1.0, (2, 12, 2, 9, 9))
    model = ste.spiking.from_nir(graph)
    got = model(_channels_last(x)).numpy()
    expected = reference.simulate_nir(graph, x, 1.0)
    np.testing.assert_array_equal(got, expected)
    assert 0 < got.mean() < 1


def test_edges_into_a_node_are_summed(float64: None) -> None:
    nodes = {
        "input": nir.Input(input_type={"input": np.array([3])}),
        "a": nir.Linear(weight=RNG.normal(0, 1, (4, 3))),
        "b": nir.Affine(weight=RNG.normal(0, 1, (4, 3)), bias=np.ones(4)),
        "lif": nir.LIF(tau=np.full(4, 3.0), r=np.full(4, 1.5), v_leak=np.zeros(4), v_threshold=np.ones(4)),
        "output": nir.Output(output_type={"output": np.array([4])}),
    }
    edges = [("input", "a"), ("input", "b"), ("a", "lif"), ("b", "lif"), ("lif", "output")]
    graph = nir.NIRGraph(nodes=nodes, edges=edges)
    x = RNG.normal(0, 1, (2, 15, 3))
    got = ste.spiking.from_nir(graph)(x).numpy()
    np.testing.assert_array_equal(got, reference.simulate_nir(graph, x, 1.0))
    again = ste.spiking.from_nir(ste.spiking.to_nir(ste.spiking.from_nir(graph)))
    np.testing.assert_array_equal(again(x).numpy(), got)


BETAS = [0.0, 0.1, 1 / 3, 0.5, 0.8, 0.9, 0.95, 0.99, 0.123456789, 0.999999]


def _ste_model(betas: list[float], seed: int = 0) -> keras.Model:
    rng = np.random.default_rng(seed)
    layers: list[keras.layers.Layer] = [keras.Input((None, 5))]
    for beta in betas:
        layers += [
            keras.layers.Dense(6, kernel_initializer=keras.initializers.RandomNormal(seed=int(rng.integers(1e6)))),
            ste.spiking.LIF(beta=beta, threshold=float(rng.uniform(0.3, 2)), reset="zero", surrogate="fast_sigmoid"),
        ]
    layers += [
        keras.layers.Dense(3),
        ste.spiking.IF(threshold=0.75, reset="zero"),
        keras.layers.Dense(2),
        ste.spiking.LI(beta=0.7),
    ]
    return keras.Sequential(layers)


@pytest.mark.parametrize("dt", [1.0, 1e-4, 0.37])
def test_to_nir_then_from_nir_is_bit_for_bit(dt: float) -> None:
    model = _ste_model(BETAS)
    back = ste.spiking.from_nir(ste.spiking.to_nir(model, dt=dt), dt=dt)
    x = np.random.default_rng(1).normal(0.4, 1.5, (4, 25, 5)).astype("float32")
    np.testing.assert_array_equal(back(x).numpy(), model(x).numpy())
    neurons = [layer for layer in model.layers if isinstance(layer, ste.spiking.SpikingRNN)]
    loaded = [layer for layer in back.layers if isinstance(layer, ste.spiking.SpikingRNN)]
    assert [type(a) for a in neurons] == [type(b) for b in loaded]
    for a, b in zip(neurons, loaded):
        assert (a.cell.beta, a.threshold, a.reset, a.emit) == (b.cell.beta, b.threshold, b.reset, b.emit)
    assert repr(loaded[0].surrogate) == repr(neurons[0].surrogate)  # restored from the node's metadata


def test_files_both_ways(tmp_path: Path) -> None:
    model = _ste_model([0.9, 0.6])
    path = tmp_path / "model.nir"
    nir.write(path, ste.spiking.to_nir(model))
    x = np.random.default_rng(2).normal(0.5, 1, (2, 10, 5)).astype("float32")
    np.testing.assert_array_equal(ste.spiking.from_nir(path)(x).numpy(), model(x).numpy())
    np.testing.assert_array_equal(ste.spiking.from_nir(str(path))(x).numpy(), model(x).numpy())
    written = tmp_path / "nir_api.nir"
    graph = _dense_graph(1.0)
    nir.write(written, graph)
    xs = np.random.default_rng(3).normal(0, 1, (2, 10, 6)).astype("float32")
    np.testing.assert_array_equal(ste.spiking.from_nir(written)(xs).numpy(), ste.spiking.from_nir(graph)(xs).numpy())
    saved = tmp_path / "loaded.keras"
    ste.spiking.from_nir(written).save(saved)
    np.testing.assert_array_equal(keras.models.load_model(saved)(xs).numpy(), ste.spiking.from_nir(graph)(xs).numpy())


def test_conv_model_round_trip() -> None:
    model = keras.Sequential(
        [
            keras.Input((None, 8, 8, 2)),
            keras.layers.TimeDistributed(keras.layers.Conv2D(3, 3, padding="same")),
            keras.layers.TimeDistributed(keras.layers.AveragePooling2D(2)),
            ChannelsFirstFlatten(),
            keras.layers.Dense(4),
            ste.spiking.LIF(beta=0.9, reset="zero"),
        ]
    )
    graph = ste.spiking.to_nir(model)
    assert [type(n).__name__ for n in graph.nodes.values()] == [
        "Input",
        "Conv2d",
        "AvgPool2d",
        "Flatten",
        "Affine",
        "LIF",
        "Output",
    ]
    x = np.random.default_rng(4).normal(0.5, 1, (2, 6, 8, 8, 2)).astype("float32")
    np.testing.assert_array_equal(ste.spiking.from_nir(graph)(x).numpy(), model(x).numpy())


def _flatten_graph() -> nir.NIRGraph:
    nodes = {
        "input": nir.Input(input_type={"input": np.array([3, 4, 4])}),
        "flatten": nir.Flatten(input_type={"input": np.array([3, 4, 4])}, start_dim=0),
        "output": nir.Output(output_type={"output": np.array([48])}),
    }
    return nir.NIRGraph(nodes=nodes, edges=[("input", "flatten"), ("flatten", "output")])


def test_flatten_orders_channels_first() -> None:
    x = np.arange(2 * 3 * 3 * 4 * 4, dtype="float32").reshape(2, 3, 3, 4, 4)  # [batch, time, C, H, W]
    got = ste.spiking.from_nir(_flatten_graph())(_channels_last(x)).numpy()
    np.testing.assert_array_equal(got, x.reshape(2, 3, 48))


def _one_neuron(node: nir.NIRNode, size: int = 4) -> nir.NIRGraph:
    nodes = {
        "input": nir.Input(input_type={"input": np.array([size])}),
        "neuron": node,
        "output": nir.Output(output_type={"output": np.array([size])}),
    }
    return nir.NIRGraph(nodes=nodes, edges=[("input", "neuron"), ("neuron", "output")], type_check=False)


def _lif(**overrides: np.ndarray) -> nir.LIF:
    fields = {"tau": np.full(4, 10.0), "r": np.full(4, 10.0), "v_leak": np.zeros(4), "v_threshold": np.ones(4)}
    return nir.LIF(**{**fields, **overrides})


def test_surrogate_from_metadata_else_default() -> None:
    node = _lif()
    node.metadata = {"ste_surrogate": "fast_sigmoid(slope=10.0)"}
    assert repr(ste.spiking.from_nir(_one_neuron(node)).layers[1].surrogate) == "fast_sigmoid(slope=10.0)"
    for metadata in ({}, {"ste_surrogate": "no_such_surrogate(k=1)"}, {"other_tool": "x"}):
        node = _lif()
        node.metadata = metadata
        assert repr(ste.spiking.from_nir(_one_neuron(node)).layers[1].surrogate) == "atan(alpha=2.0)"


@pytest.mark.parametrize(
    ("layer", "words"),
    [
        (ste.spiking.LIF(beta=0.9, name="hidden"), ["'hidden'", "subtraction", "reset='zero'"]),
        (ste.spiking.LIF(beta=0.9, reset="none", name="quiet"), ["'quiet'", "never resets", "emit='membrane'"]),
        (ste.spiking.LIF(beta=0.9, reset="zero", emit="membrane", name="u"), ["'u'", "LI", "reset='none'"]),
        (ste.spiking.ALIF(beta=0.9, name="adaptive"), ["'adaptive'", "ALIFCell", "NIR has no node"]),
        (keras.layers.LSTM(4, return_sequences=True, name="lstm"), ["'lstm'", "has no NIR node"]),
    ],
)
def test_export_refuses_what_nir_cannot_hold(layer: keras.layers.Layer, words: list[str]) -> None:
    model = keras.Sequential([keras.Input((None, 4)), layer])
    with pytest.raises(ste.errors.ConversionError) as caught:
        ste.spiking.to_nir(model)
    for word in words:
        assert word in str(caught.value)


@pytest.mark.parametrize(
    ("node", "words"),
    [
        (_lif(v_leak=np.full(4, 0.1)), ["'neuron'", "v_leak"]),
        (_lif(v_reset=np.full(4, -0.5)), ["'neuron'", "v_reset"]),
        (_lif(tau=np.array([10.0, 10.0, 5.0, 10.0])), ["'neuron'", "different values", "β"]),
        (_lif(tau=np.full(4, 0.5)), ["'neuron'", "outside [0, 1]", "smaller dt"]),
        (
            nir.CubaLI(tau_syn=np.ones(4) * 5, tau_mem=np.ones(4) * 5, r=np.ones(4), v_leak=np.zeros(4)),
            ["'neuron'", "CubaLI", "current-based leaky integrator"],
        ),
        (nir.Delay(delay=np.ones(4)), ["'neuron'", "delay"]),
    ],
)
def test_import_refuses_what_ste_cannot_hold(node: nir.NIRNode, words: list[str]) -> None:
    with pytest.raises(ste.errors.ConversionError) as caught:
        ste.spiking.from_nir(_one_neuron(node))
    for word in words:
        assert word in str(caught.value)


def test_bad_dt_and_cycles() -> None:
    with pytest.raises(ste.errors.ConversionError, match="dt must be a positive number"):
        ste.spiking.from_nir(_one_neuron(_lif()), dt=0)
    nodes = {
        "input": nir.Input(input_type={"input": np.array([4])}),
        "a": nir.Linear(weight=np.eye(4)),
        "b": nir.Linear(weight=np.eye(4)),
        "output": nir.Output(output_type={"output": np.array([4])}),
    }
    edges = [("input", "a"), ("a", "b"), ("b", "a"), ("b", "output")]
    with pytest.raises(ste.errors.ConversionError, match=r"\['a', 'b', 'output'\] feed each other"):
        ste.spiking.from_nir(nir.NIRGraph(nodes=nodes, edges=edges, type_check=False))


def _cuba(size: int, dt: float) -> nir.CubaLIF:
    return nir.CubaLIF(
        tau_syn=np.full(size, 4 * dt),
        tau_mem=np.full(size, 6 * dt),
        r=np.full(size, 2.0),
        v_leak=np.zeros(size),
        v_threshold=np.full(size, 0.4),
        w_in=np.full(size, 1.5),
    )


def _recurrent_graph(neuron: nir.NIRNode, weight: nir.NIRNode) -> nir.NIRGraph:
    """input -> fc -> neuron -> output, with neuron -> w_rec -> neuron (the neuron listed before its weight)."""
    nodes = {
        "input": nir.Input(input_type={"input": np.array([5])}),
        "fc": nir.Affine(weight=RNG.normal(0, 1, (6, 5)), bias=RNG.normal(0, 0.1, 6)),
        "neuron": neuron,
        "w_rec": weight,
        "output": nir.Output(output_type={"output": np.array([6])}),
    }
    edges = [("input", "fc"), ("fc", "neuron"), ("neuron", "w_rec"), ("w_rec", "neuron"), ("neuron", "output")]
    return nir.NIRGraph(nodes=nodes, edges=edges, type_check=False)


@pytest.mark.parametrize("dt", [1.0, 1e-4])
def test_cuba_lif_matches_nir_equations(float64: None, dt: float) -> None:
    graph = _recurrent_graph(_cuba(6, dt), nir.Linear(weight=np.zeros((6, 6))))
    nodes = {k: v for k, v in graph.nodes.items() if k != "w_rec"}
    edges = [e for e in graph.edges if "w_rec" not in e]
    graph = nir.NIRGraph(nodes=nodes, edges=edges, type_check=False)
    x = RNG.normal(0.3, 1.0, (3, 30, 5))
    got = ste.spiking.from_nir(graph, dt=dt)(x).numpy()
    np.testing.assert_array_equal(got, reference.simulate_nir(graph, x, dt))
    assert 0 < got.mean() < 1
    assert isinstance(ste.spiking.from_nir(graph, dt=dt).layers[-1], ste.spiking.Synaptic)


@pytest.mark.parametrize("kind", ["LIF", "CubaLIF"])
@pytest.mark.parametrize("weight", ["all_to_all", "diagonal", "affine"])
def test_recurrent_edges_become_recurrent_neurons(float64: None, kind: str, weight: str) -> None:
    matrix = RNG.normal(0, 0.6, (6, 6))
    w_rec = {
        "all_to_all": nir.Linear(weight=matrix),
        "diagonal": nir.Linear(weight=np.diag(np.diag(matrix))),
        "affine": nir.Affine(weight=matrix, bias=RNG.normal(0, 0.1, 6)),
    }[weight]
    neuron = (
        _cuba(6, 1.0)
        if kind == "CubaLIF"
        else _lif(tau=np.full(6, 5.0), r=np.full(6, 3.0), v_leak=np.zeros(6), v_threshold=np.full(6, 0.6))
    )
    graph = _recurrent_graph(neuron, w_rec)
    x = RNG.normal(0.2, 1.0, (3, 30, 5))
    expected = reference.simulate_nir(graph, x, 1.0)
    model = ste.spiking.from_nir(graph)
    expected_class = ste.spiking.RSynaptic if kind == "CubaLIF" else ste.spiking.RLIF
    assert isinstance(model.layers[-1], expected_class)
    assert model.layers[-1].cell.all_to_all == (weight != "diagonal")
    np.testing.assert_array_equal(model(x).numpy(), expected)
    assert 0 < expected.mean() < 1
    # the same neuron as snnTorch nests it: a subgraph input -> neuron -> output with neuron <-> w_rec
    sub = nir.NIRGraph(
        nodes={
            "input": nir.Input(input_type={"input": np.array([6])}),
            "lif": neuron,
            "w_rec": w_rec,
            "output": nir.Output(output_type={"output": np.array([6])}),
        },
        edges=[("input", "lif"), ("lif", "w_rec"), ("w_rec", "lif"), ("lif", "output")],
        type_check=False,
    )
    outer = {**{k: v for k, v in graph.nodes.items() if k not in ("neuron", "w_rec")}, "rnn": sub}
    nested = nir.NIRGraph(nodes=outer, edges=[("input", "fc"), ("fc", "rnn"), ("rnn", "output")], type_check=False)
    np.testing.assert_array_equal(ste.spiking.from_nir(nested)(x).numpy(), expected)
    again = ste.spiking.from_nir(ste.spiking.to_nir(model))
    np.testing.assert_array_equal(again(x).numpy(), model(x).numpy())


def test_spiking_feature_maps_match_nir_equations(float64: None) -> None:
    nodes = {
        "input": nir.Input(input_type={"input": np.array([2, 6, 6])}),
        "conv": _conv2d(2, 3, 6, scale=0.6, stride=1, padding=1, bias=True),
        "lif": _lif(
            tau=np.full((3, 6, 6), 4.0),
            r=np.full((3, 6, 6), 4.0),
            v_leak=np.zeros((3, 6, 6)),
            v_threshold=np.full((3, 6, 6), 0.5),
        ),
        "pool": nir.SumPool2d(kernel_size=np.array([2, 2]), stride=np.array([2, 2]), padding=np.array([0, 0])),
        "flat": nir.Flatten(input_type={"input": np.array([3, 3, 3])}, start_dim=0),
        "li": nir.LI(tau=np.full(27, 3.0), r=np.full(27, 3.0), v_leak=np.zeros(27)),
        "output": nir.Output(output_type={"output": np.array([27])}),
    }
    names = list(nodes)
    graph = nir.NIRGraph(nodes=nodes, edges=list(itertools.pairwise(names)), type_check=False)
    x = RNG.normal(0.3, 1.0, (2, 10, 2, 6, 6))
    model = ste.spiking.from_nir(graph)
    np.testing.assert_allclose(model(_channels_last(x)).numpy(), reference.simulate_nir(graph, x, 1.0), atol=1e-12)
    again = ste.spiking.from_nir(ste.spiking.to_nir(model))
    np.testing.assert_array_equal(again(_channels_last(x)).numpy(), model(_channels_last(x)).numpy())


def test_new_neurons_round_trip_bit_for_bit() -> None:
    model = keras.Sequential(
        [
            keras.Input((None, 5)),
            keras.layers.Dense(6),
            ste.spiking.Synaptic(alpha=0.3, beta=0.85, threshold=0.5, reset="zero", surrogate="fast_sigmoid"),
            keras.layers.Dense(6),
            ste.spiking.RLIF(beta=0.7, reset="zero"),
            keras.layers.Dense(6),
            ste.spiking.RSynaptic(alpha=0.6, beta=0.9, reset="zero", all_to_all=False),
            keras.layers.Dense(3),
            ste.spiking.LI(beta=0.2),
            ste.spiking.LIF(beta=0.5, reset="none", emit="membrane"),  # a leaky integrator too: NIR LI, back as LI
        ]
    )
    x = np.random.default_rng(9).normal(0.5, 1.5, (3, 20, 5)).astype("float32")
    for dt in (1.0, 1e-4):
        back = ste.spiking.from_nir(ste.spiking.to_nir(model, dt=dt), dt=dt)
        np.testing.assert_array_equal(back(x).numpy(), model(x).numpy())
        kinds = [type(layer) for layer in model.layers]
        assert [type(layer) for layer in back.layers[1:]] == [*kinds[:-1], ste.spiking.LI]


# -- a decay of exactly 1 (τ = ∞): NIR's integrators I and IF --------------------------------------------------------


def _decay_one_model() -> keras.Model:
    """Every neuron with a decay of 1 that NIR can hold, in float64 (the numpy reference's precision)."""
    return keras.Sequential(
        [
            keras.Input((None, 5)),
            keras.layers.Dense(6),
            ste.spiking.Synaptic(alpha=1.0, beta=0.8, threshold=1.5, reset="zero", surrogate="fast_sigmoid"),
            keras.layers.Dense(6),
            ste.spiking.Synaptic(alpha=0.6, beta=1.0, threshold=1.2, reset="zero"),
            keras.layers.Dense(6),
            ste.spiking.Synaptic(alpha=1.0, beta=1.0, threshold=2.0, reset="zero"),
            keras.layers.Dense(6),
            ste.spiking.RLIF(beta=1.0, threshold=0.8, reset="zero"),
            keras.layers.Dense(4),
            ste.spiking.LI(beta=1.0),
        ]
    )


@pytest.mark.parametrize("dt", [1.0, 1e-4])
def test_a_decay_of_one_is_nir_integrator_and_comes_back(float64: None, dt: float, tmp_path: Path) -> None:
    # NIR's LI, LIF and CubaLIF with τ = ∞ take no input (dt/τ = 0): β = 1 is NIR's I (dv/dt = R·I) and IF, and a
    # synaptic neuron with α or β = 1 its two stages, the current (LI or I) feeding the membrane (LIF or IF).
    model = _decay_one_model()
    rng = np.random.default_rng(31)
    for weight in model.weights:
        weight.assign(rng.normal(0.2, 0.6, size=weight.shape))
    x = rng.normal(0.3, 1.0, (3, 20, 5))
    graph = ste.spiking.to_nir(model, dt=dt)
    kinds = {name: type(node).__name__ for name, node in graph.nodes.items()}
    stages = [{k: type(v).__name__ for k, v in graph.nodes[layer.name].nodes.items()} for layer in model.layers[1:6:2]]
    assert [(s["synapse"], s["neuron"]) for s in stages] == [("I", "LIF"), ("LI", "IF"), ("I", "IF")]
    assert kinds[model.layers[-1].name] == "I"
    assert type(graph.nodes[model.layers[7].name].nodes["neuron"]).__name__ == "IF"
    want = model(x).numpy()
    np.testing.assert_allclose(reference.simulate_nir(graph, x, dt), want, rtol=1e-9, atol=1e-9)
    truncated = keras.Model(model.inputs[0], model.layers[7].output)  # up to the RLIF: spikes, which agree exactly
    spikes = truncated(x).numpy()
    assert 0 < spikes.mean() < 1
    np.testing.assert_array_equal(reference.simulate_nir(ste.spiking.to_nir(truncated, dt=dt), x, dt), spikes)
    back = ste.spiking.from_nir(graph, dt=dt)
    assert [type(layer) for layer in back.layers[1:]] == [type(layer) for layer in model.layers]
    for got, layer in zip(back.layers[1:], model.layers):
        for name in ("alpha", "beta", "threshold"):
            if hasattr(getattr(layer, "cell", None), name):
                assert getattr(got.cell, name) == getattr(layer.cell, name)
    assert repr(back.layers[2].surrogate) == repr(model.layers[1].surrogate)
    np.testing.assert_array_equal(back(x).numpy(), want)
    nir.write(tmp_path / "integrators.nir", graph)  # the subgraphs and their metadata through a file
    np.testing.assert_array_equal(ste.spiking.from_nir(tmp_path / "integrators.nir", dt=dt)(x).numpy(), want)


@pytest.mark.parametrize(
    "layer",
    [ste.spiking.LIF(beta=1.0, reset="none", emit="membrane"), ste.spiking.IF(reset="none", emit="membrane")],
    ids=["LIF", "IF"],
)
def test_a_membrane_readout_without_leak_is_nir_integrator(layer: keras.layers.Layer) -> None:
    model = keras.Sequential([keras.Input((None, 4)), keras.layers.Dense(3), layer])
    x = RNG.normal(0.3, 1.0, (2, 12, 4)).astype("float32")
    graph = ste.spiking.to_nir(model)
    assert type(graph.nodes[layer.name]).__name__ == "I"
    back = ste.spiking.from_nir(graph)
    assert isinstance(back.layers[-1], ste.spiking.LI) and back.layers[-1].cell.beta == 1.0
    np.testing.assert_array_equal(back(x).numpy(), model(x).numpy())


def test_nir_integrators_from_other_tools(float64: None) -> None:
    # I with a gain R·dt ≠ 1; the two stages of a synaptic neuron as written by hand, with gains ≠ 1
    integrator = nir.I(r=np.full(4, 0.7))
    x = RNG.normal(0.2, 1.0, (2, 15, 4))
    model = ste.spiking.from_nir(_one_neuron(integrator))
    assert isinstance(model.layers[-1], ste.spiking.LI) and model.layers[-1].cell.beta == 1.0
    np.testing.assert_allclose(model(x).numpy(), reference.simulate_nir(_one_neuron(integrator), x, 1.0), rtol=1e-12)
    stages = nir.NIRGraph(
        nodes={
            "input": nir.Input(input_type={"input": np.array([4])}),
            "current": nir.LI(tau=np.full(4, 4.0), r=np.full(4, 2.0), v_leak=np.zeros(4)),
            "membrane": nir.IF(r=np.full(4, 1.5), v_threshold=np.full(4, 0.9)),
            "output": nir.Output(output_type={"output": np.array([4])}),
        },
        edges=[("input", "current"), ("current", "membrane"), ("membrane", "output")],
        type_check=False,
    )
    graph = _one_neuron(stages)
    model = ste.spiking.from_nir(graph)
    assert isinstance(model.layers[-1], ste.spiking.Synaptic)
    assert (model.layers[-1].cell.alpha, model.layers[-1].cell.beta) == (0.75, 1.0)
    expected = reference.simulate_nir(graph, x, 1.0)
    assert 0 < expected.mean() < 1
    np.testing.assert_array_equal(model(x).numpy(), expected)


def test_a_recurrent_synaptic_neuron_with_a_decay_of_one_is_refused() -> None:
    model = keras.Sequential(
        [keras.Input((None, 4)), ste.spiking.RSynaptic(alpha=1.0, beta=0.9, reset="zero", name="rec")]
    )
    with pytest.raises(ste.errors.ConversionError) as caught:
        ste.spiking.to_nir(model)
    message = str(caught.value)
    for word in ("'rec'", "alpha=1.0", "τ = ∞", "Fix: alpha and beta below 1"):
        assert word in message


# -- what from_nir reads: integer parameters, edges -------------------------------------------------------------------


def test_integer_parameters_are_numbers(float64: None) -> None:
    # ints as a file written by hand (or by a tool that keeps integral values as integers) holds them
    graph = _dense_graph(1.0)
    graph.nodes["lif"] = nir.LIF(
        tau=np.full(8, 5), r=np.full(8, 3), v_leak=np.zeros(8, int), v_threshold=np.ones(8, np.int32)
    )
    graph.nodes["if"] = nir.IF(r=np.full(8, 2, np.int64), v_threshold=np.full(8, 3))
    graph.nodes["li"] = nir.LI(tau=np.full(4, 4, np.int16), r=np.arange(1, 5), v_leak=np.zeros(4, int))
    x = RNG.normal(0.3, 1.0, (3, 30, 6))
    got = ste.spiking.from_nir(graph)(x).numpy()
    np.testing.assert_allclose(got, reference.simulate_nir(graph, x, 1.0), rtol=1e-9, atol=1e-9)
    spikes = ste.spiking.from_nir(_truncated(graph, "if"))(x).numpy()
    assert 0 < spikes.mean() < 1
    np.testing.assert_array_equal(spikes, reference.simulate_nir(_truncated(graph, "if"), x, 1.0))


def test_a_parameter_that_is_not_a_number_is_refused() -> None:
    node = _lif(tau=np.array(["10", "10", "10", "10"]))
    with pytest.raises(ste.errors.ConversionError) as caught:
        ste.spiking.from_nir(_one_neuron(node))
    for word in ("'neuron'", "(LIF)", "tau", "<U2", "Fix: write tau as an array of numbers"):
        assert word in str(caught.value)


@pytest.mark.parametrize(
    ("edges", "words"),
    [
        ([("input", "neuron"), ("neuron", "outptu")], ["('neuron', 'outptu')", "no node 'outptu'"]),
        ([("inptu", "neuron"), ("neuron", "output")], ["('inptu', 'neuron')", "no node 'inptu'"]),
        ([("input", "neuron", "output")], ["('input', 'neuron', 'output')", "not a pair"]),
    ],
    ids=["target", "source", "three-ends"],
)
def test_an_edge_that_names_no_node_is_refused(edges: list[tuple[str, ...]], words: list[str]) -> None:
    graph = _one_neuron(_lif())
    graph.edges = edges
    with pytest.raises(ste.errors.ConversionError) as caught:
        ste.spiking.from_nir(graph)
    for word in [*words, "['input', 'neuron', 'output']", "Fix: make every edge a pair of node names"]:
        assert word in str(caught.value)
