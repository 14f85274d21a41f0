"""Synaptic, RLIF, RSynaptic and LI: forward values and BPTT gradients against the hand-written numpy model
(reference.simulate / reference.bptt), cells in keras.layers.RNN, learned values, feature maps and errors."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

from . import reference
from .test_everywhere import _data as _sequences
from .test_everywhere import _neurons_model
from .test_gradients import _layer_gradients

STEPS, BATCH, UNITS = 7, 3, 5


def _data(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    current = rng.normal(0.35, 0.7, size=(BATCH, STEPS, UNITS))
    return current, rng.normal(size=(BATCH, STEPS, UNITS)), rng.normal(size=(BATCH, UNITS))


def _recurrent_weights(layer: keras.layers.Layer, seed: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Random recurrent weights set into the (built) layer; (None, None) for a layer without them."""
    cell = layer.cell
    if "recurrent_kernel" not in cell._learned:
        return None, None
    rng = np.random.default_rng(100 + seed)
    kernel = rng.normal(0, 0.5, size=cell._learned["recurrent_kernel"].shape)
    cell._learned["recurrent_kernel"].assign(kernel)
    bias = None
    if "recurrent_bias" in cell._learned:
        bias = rng.normal(0, 0.2, size=(UNITS,))
        cell._learned["recurrent_bias"].assign(bias)
    return kernel, bias


KINDS = ["Synaptic", "RLIF-all", "RLIF-one-bias", "RSynaptic-all-bias", "RSynaptic-one", "LI"]
CASES = [(k, r, d) for k in KINDS[:-1] for r in ("subtract", "zero") for d in (True, False)]
CASES += [("Synaptic", "none", True), ("RLIF-all", "none", False), ("LI", "none", True)]


def _neuron(kind: str, reset: str, detach: bool) -> tuple[keras.layers.Layer, reference.Synapse]:
    spiking = {"reset": reset, "detach_reset": detach, "learn_threshold": True, "learn_surrogate": True}
    spiking.update(threshold=0.8, surrogate="atan(alpha=1.5)")
    common = {"return_state": True, "dtype": "float64", "learn_beta": True}
    recurrent = {"all_to_all": "-all" in kind, "recurrent_bias": "bias" in kind}
    n = reference.Synapse(beta=0.85, theta=0.8, reset=reset, detach=detach, surrogate=reference.Surrogate("atan", 1.5))
    if kind == "Synaptic":
        layer = ste.spiking.Synaptic(alpha=0.6, beta=0.85, learn_alpha=True, **spiking, **common)
        n.alpha = 0.6
    elif kind.startswith("RLIF"):
        layer = ste.spiking.RLIF(beta=0.85, **recurrent, **spiking, **common)
    elif kind.startswith("RSynaptic"):
        layer = ste.spiking.RSynaptic(alpha=0.6, beta=0.85, learn_alpha=True, **recurrent, **spiking, **common)
        n.alpha = 0.6
    else:
        layer = ste.spiking.LI(beta=0.85, **common)
        n.spiking, n.reset = False, "none"
    return layer, n


@pytest.mark.parametrize(
    ("kind", "reset", "detach"), CASES, ids=[f"{k}-{r}-{'det' if d else 'att'}" for k, r, d in CASES]
)
def test_bptt_matches_numpy(kind: str, reset: str, detach: bool) -> None:
    seed = CASES.index((kind, reset, detach))
    current, g, h = _data(seed)
    layer, n = _neuron(kind, reset, detach)
    layer.build((BATCH, STEPS, UNITS))
    n.recurrent, n.bias = _recurrent_weights(layer, seed)
    spikes, membrane, g_current, g_params = _layer_gradients(layer, current, g, h)
    got = {"out": spikes, "membrane": membrane, "current": g_current, **g_params}
    expected = reference.simulate(n, current)
    if n.spiking:
        assert 0.05 < expected["S"].mean() < 0.9, "the data should make some but not all neurons fire"
        np.testing.assert_array_equal(got["out"], expected["S"].transpose(1, 0, 2))
    else:
        np.testing.assert_allclose(got["out"], expected["U"].transpose(1, 0, 2), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["membrane"], expected["U"][-1], rtol=1e-12, atol=1e-12)
    want = reference.bptt(n, current, g, h)
    tol = {"rtol": 1e-10, "atol": 1e-12}
    np.testing.assert_allclose(got["current"], want["current"], **tol)
    np.testing.assert_allclose(got["beta"], want["beta"], **tol)
    if n.alpha is not None:
        np.testing.assert_allclose(got["alpha"], want["alpha"], **tol)
    if n.spiking:
        np.testing.assert_allclose(got["threshold"], want["threshold"], **tol)
        np.testing.assert_allclose(got["surrogate_alpha"], want["surrogate"], **tol)
    if n.recurrent is not None:
        assert np.any(want["recurrent"] != 0)
        np.testing.assert_allclose(got["recurrent_kernel"], want["recurrent"], **tol)
    if n.bias is not None:
        np.testing.assert_allclose(got["recurrent_bias"], want["bias"], **tol)


# -- higher-order gradients: reference = autodiff of the smooth primitive behind the surrogate ----------------------
#
# With spike(x) = P(x) + stop_gradient(Θ(x) − P(x)) the value is Θ(x) and every derivative (of any order) is that of
# P, the primitive of the surrogate (atan: P = arctan(π·a·x/2)/π + 1/2). A plain Python loop of TensorFlow ops with
# that spike is the reference for ste's custom-gradient spike inside the Keras time loop.


def _smooth_spike(x: tf.Tensor, a: float) -> tf.Tensor:
    primitive = tf.atan(np.pi * a * x / 2) / np.pi + 0.5
    return primitive + tf.stop_gradient(tf.cast(x > 0, x.dtype) - primitive)


def _loop_reference(n: reference.Synapse, x: tf.Tensor, kernel: tf.Tensor | None) -> tf.Tensor:
    shape = (x.shape[0], x.shape[2])
    u = s = c = tf.zeros(shape, x.dtype)
    outputs = []
    for t in range(x.shape[1]):
        drive = x[:, t]
        if kernel is not None:
            drive = drive + (s @ kernel if len(kernel.shape) == 2 else s * kernel)
        if n.alpha is not None:
            c = n.alpha * c + drive
            drive = c
        reset_s = tf.stop_gradient(s) if n.detach else s
        if not n.spiking or n.reset == "none":
            u = n.beta * u + drive
        elif n.reset == "subtract":
            u = n.beta * u + drive - n.theta * reset_s
        else:
            u = n.beta * (1 - reset_s) * u + drive
        s = _smooth_spike(u - n.theta, n.surrogate.a) if n.spiking else u
        outputs.append(s)
    return tf.stack(outputs, axis=1)


SECOND = [("RSynaptic-all-bias", "subtract", False), ("RLIF-one-bias", "zero", True), ("Synaptic", "zero", False)]
SECOND += [("LI", "none", True)]


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "tf.function"])  # Keras's time loop, then ste's
@pytest.mark.parametrize(("kind", "reset", "detach"), SECOND, ids=[f"{k}-{r}" for k, r, _ in SECOND])
def test_second_order_gradients_match_the_smooth_primitive(kind: str, reset: str, detach: bool, graph: bool) -> None:
    current, g, _ = _data(11)
    layer, n = _neuron(kind, reset, detach)
    layer.return_state = False
    layer.build((BATCH, STEPS, UNITS))
    kernel, bias = _recurrent_weights(layer, 11)
    if bias is not None:  # a constant input current: fold it into the reference's input
        current = current + bias
        layer.cell._learned["recurrent_bias"].assign(np.zeros(UNITS))
    w = tf.constant(np.random.default_rng(12).normal(size=current.shape))

    def hessian_vector(model: Any) -> tuple[tf.Tensor, tf.Tensor]:
        x = tf.constant(current)
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                loss = tf.reduce_sum(model(x) * g) + 0.1 * tf.reduce_sum(model(x) ** 2)
            first = inner.gradient(loss, x)
            dot = tf.reduce_sum(first * w)
        return first, outer.gradient(dot, x)

    kernel_t = None if kernel is None else tf.constant(kernel)
    first, second = (tf.function(hessian_vector) if graph else hessian_vector)(layer)
    want_first, want_second = hessian_vector(lambda x: _loop_reference(n, x, kernel_t))
    np.testing.assert_allclose(first.numpy(), want_first.numpy(), rtol=1e-10, atol=1e-12)
    assert np.any(second.numpy() != 0)
    np.testing.assert_allclose(second.numpy(), want_second.numpy(), rtol=1e-9, atol=1e-12)


# -- cells, dtypes, learned values, signatures ---------------------------------------------------------------------

NEW_LAYERS = {
    "Synaptic": (ste.spiking.Synaptic, ste.spiking.SynapticCell),
    "RLIF": (ste.spiking.RLIF, ste.spiking.RLIFCell),
    "RSynaptic": (ste.spiking.RSynaptic, ste.spiking.RSynapticCell),
    "LI": (ste.spiking.LI, ste.spiking.LICell),
}


@pytest.mark.parametrize("name", list(NEW_LAYERS))
def test_cell_in_keras_rnn_equals_the_layer(name: str) -> None:
    layer_class, cell_class = NEW_LAYERS[name]
    x = tf.constant(_data(3)[0])
    layer = layer_class(beta=0.7, dtype="float64", return_state=True)
    rnn = keras.layers.RNN(
        cell_class(beta=0.7, units=UNITS, dtype="float64"), return_sequences=True, return_state=True, dtype="float64"
    )
    layer.build(x.shape)
    rnn.build(x.shape)
    rnn.set_weights(layer.get_weights())
    for a, b in zip(layer(x), rnn(x)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert len(layer(x)) == 1 + len(cell_class.state_names)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("name", list(NEW_LAYERS))
def test_every_float_dtype(name: str, dtype: str) -> None:
    x = tf.cast(_data(5)[0] * 2, dtype)
    layer = NEW_LAYERS[name][0](beta=0.9, dtype=dtype, learn_beta=True)
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = layer(x)
        loss = tf.reduce_sum(out * tf.cast(tf.range(1, UNITS + 1), dtype))
    grads = tape.gradient(loss, [x, *layer.trainable_weights])
    assert out.dtype == dtype
    values = out.numpy().astype("float32")
    if name != "LI":
        assert set(np.unique(values)) == {0.0, 1.0}
    assert np.all(np.isfinite(values))
    for grad in grads:
        array = tf.cast(grad, "float32").numpy()
        assert np.all(np.isfinite(array)) and np.any(array != 0)


LEARNED = [
    (ste.spiking.LIF, {"learn_beta": True, "learn_threshold": True}),
    (ste.spiking.IF, {"learn_threshold": True}),
    (ste.spiking.ALIF, {"learn_beta": True, "learn_threshold": True}),
    (ste.spiking.Synaptic, {"learn_alpha": True, "learn_beta": True, "learn_threshold": True}),
    (ste.spiking.RLIF, {"learn_beta": True, "learn_threshold": True}),
    (ste.spiking.RSynaptic, {"learn_alpha": True, "learn_beta": True, "learn_threshold": True}),
    (ste.spiking.LI, {"learn_beta": True}),
]


@pytest.mark.parametrize(("layer_class", "learn"), LEARNED, ids=[c.__name__ for c, _ in LEARNED])
def test_parameters_read_the_learned_values_after_training(layer_class: type, learn: dict[str, bool]) -> None:
    layer = layer_class(**learn)
    model = keras.Sequential([keras.Input((STEPS, UNITS)), keras.layers.Dense(UNITS), layer])
    model.compile(keras.optimizers.SGD(0.5), loss=lambda y, p: -tf.reduce_mean(p))
    before = {name: layer.get_config()[name] for name in ("alpha", "beta", "threshold") if f"learn_{name}" in learn}
    model.fit(_data(6)[0].astype("float32"), np.zeros((BATCH,)), epochs=2, verbose=0)
    variables = {v.name: float(v.numpy()) for v in layer.weights if len(v.shape) == 0}
    for name, initial in before.items():
        assert abs(variables[name] - initial) > 1e-4, f"{name} did not train"
        assert getattr(layer, name) == variables[name] == getattr(layer.cell, name)
        assert layer.get_config()[name] == initial  # the config keeps the initial value; the weights the trained one


@pytest.mark.parametrize("name", list(NEW_LAYERS))
def test_every_explicit_argument_is_in_the_config(name: str) -> None:
    layer_class, cell_class = NEW_LAYERS[name]
    rnn_args = set(inspect.signature(keras.layers.RNN).parameters) - {"cell", "kwargs"}
    for klass in (layer_class, cell_class):
        parameters = inspect.signature(klass).parameters
        assert not any(p.kind is p.VAR_POSITIONAL for p in parameters.values())
        config = klass(units=UNITS).get_config()
        for argument in set(parameters) - {"kwargs"}:
            assert argument in config or argument in rnn_args, f"{klass.__name__}({argument}=...) is not saved"


# -- .keras round trip (the other execution modes: test_everywhere.py, over a model of every new neuron) -----------


def test_keras_save_and_load_after_fit(tmp_path) -> None:
    model = keras.Sequential([_neurons_model(), ste.spiking.Readout("last")])
    x, y = _sequences(16)
    model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, epochs=2, verbose=0)
    path = tmp_path / "neurons.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(loaded(x).numpy(), model(x).numpy())
    for name in ("syn", "rlif", "rsyn", "li"):
        a, b = model.layers[0].get_layer(name), loaded.layers[0].get_layer(name)
        assert type(a) is type(b) and a.get_config() == b.get_config()
        assert a.beta == b.beta and a.cell.state_names == b.cell.state_names
    assert loaded.layers[0].get_layer("syn").alpha == model.layers[0].get_layer("syn").alpha != 0.7


# -- convolutional spiking layers: time folded into the batch ------------------------------------------------------


def _frames(seed: int = 0, steps: int = 4) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.3, 1.0, size=(2, steps, 6, 6, 2))


def test_time_distributed_equals_keras_per_step_loop_in_one_conv_call() -> None:
    conv = keras.layers.Conv2D(3, 3, padding="same", dtype="float64")
    ours, theirs = (
        ste.spiking.TimeDistributed(conv),
        keras.layers.TimeDistributed(conv, dtype="float64"),
    )  # the same kernel
    x = tf.constant(_frames())
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        a, b = ours(x), theirs(x)
        la, lb = (tf.reduce_sum(o * tf.range(1.0, 4.0, dtype="float64")) for o in (a, b))
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tape.gradient(la, x).numpy(), tape.gradient(lb, x).numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        tape.gradient(la, conv.kernel).numpy(), tape.gradient(lb, conv.kernel).numpy(), rtol=1e-12, atol=1e-12
    )
    graph = tf.function(lambda z: ours(z)).get_concrete_function(tf.TensorSpec([None, None, 6, 6, 2], "float64")).graph
    ops = [op.type for op in graph.get_operations()]
    assert ops.count("Conv2D") == 1 and "While" not in ops and "StatelessWhile" not in ops


@pytest.mark.parametrize("name", ["LIF", "Synaptic", "RLIF", "LI"])
def test_neurons_on_feature_maps_equal_the_flattened_neurons(name: str) -> None:
    layer_class = getattr(ste.spiking, name)
    x = _frames(1)
    maps = layer_class(return_state=True, dtype="float64")
    flat = layer_class(return_state=True, dtype="float64")
    out = maps(x)
    flat.build((2, 4, 72))
    flat.set_weights(maps.get_weights())
    expected = flat(x.reshape(2, 4, 72))
    assert tuple(out[0].shape) == (2, 4, 6, 6, 2) and all(tuple(s.shape) == (2, 6, 6, 2) for s in out[1:])
    np.testing.assert_array_equal(out[0].numpy().reshape(2, 4, 72), expected[0].numpy())
    for state, want in zip(out[1:], expected[1:]):
        np.testing.assert_array_equal(state.numpy().reshape(2, 72), want.numpy())
    if name == "LIF":  # and the independent numpy model
        spikes = reference.forward(reference.Neuron(beta=0.9), x.reshape(2, 4, 72))["S"].transpose(1, 0, 2)
        np.testing.assert_array_equal(out[0].numpy().reshape(2, 4, 72), spikes)
    again = layer_class(dtype="float64", return_state=True)
    again.build((2, 4, 6, 6, 2))
    again.set_weights(maps.get_weights())
    resumed = again(x[:, 2:], initial_state=[maps(x[:, :2])[i] for i in range(1, len(out))])[0]
    np.testing.assert_array_equal(resumed.numpy(), out[0].numpy()[:, 2:])


def test_convolutional_snn_fits_saves_and_loads(tmp_path) -> None:
    model = keras.Sequential(
        [
            keras.Input((5, 8, 8, 2)),
            ste.spiking.TimeDistributed(keras.layers.Conv2D(4, 3, padding="same")),
            ste.spiking.LIF(learn_beta=True),
            ste.spiking.TimeDistributed(keras.layers.AveragePooling2D(2)),
            ste.spiking.TimeDistributed(
                ste.layers.QuantConv2D(4, 3, kernel_quantizer="ste_sign", kernel_constraint="weight_clip")
            ),
            ste.spiking.Synaptic(),
            ste.spiking.TimeDistributed(keras.layers.Flatten()),
            keras.layers.Dense(3),
            ste.spiking.LI(),
            ste.spiking.Readout("max"),
        ]
    )
    assert model.output_shape == (None, 3)
    x = (np.random.default_rng(2).random((8, 5, 8, 8, 2)) < 0.3).astype("float32")
    y = np.arange(8) % 3
    model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = [w.numpy().copy() for w in model.trainable_weights]
    model.fit(x, y, epochs=2, verbose=0, batch_size=4)
    assert all(not np.array_equal(w.numpy(), b) for w, b in zip(model.trainable_weights, before))
    model.save(tmp_path / "conv.keras")
    loaded = keras.saving.load_model(tmp_path / "conv.keras")
    np.testing.assert_array_equal(loaded(x).numpy(), model(x).numpy())
    assert isinstance(loaded.layers[0], ste.spiking.TimeDistributed)


# -- bad input: typed errors -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["LIF", "IF", "ALIF", "Synaptic", "RLIF", "RSynaptic", "LI"])
def test_integer_and_boolean_spike_trains_are_currents(name: str) -> None:
    layer = getattr(ste.spiking, name)()
    spikes = np.random.default_rng(3).random((2, STEPS, UNITS)) < 0.5
    expected = layer(spikes.astype("float32")).numpy()
    for dtype in ("bool", "int32", "uint8", "int64"):
        np.testing.assert_array_equal(layer(tf.constant(spikes.astype(dtype))).numpy(), expected)
    with pytest.raises(ste.errors.InputError, match="string"):
        layer(tf.fill((2, STEPS, UNITS), "a"))
    with pytest.raises(ste.errors.CallError, match="0 time steps"):
        getattr(ste.spiking, name)()(tf.zeros((2, 0, UNITS)))
    with pytest.raises(ste.errors.CallError, match="feature axes"):
        keras.Sequential([keras.Input((STEPS, None, 2)), getattr(ste.spiking, name)()])


def test_neuron_argument_errors() -> None:
    for bad in ({"alpha": 1.5}, {"alpha": float("nan")}, {"beta": -0.1}, {"threshold": 0.0}):
        with pytest.raises(ste.errors.ParameterError):
            ste.spiking.Synaptic(**bad)
    with pytest.raises(ste.errors.ParameterError, match="never spikes"):
        ste.spiking.LI(threshold=1.0)
    with pytest.raises(ste.errors.ParameterError, match="never spikes"):
        ste.spiking.LICell(surrogate="atan")
    with pytest.raises(ste.errors.ParameterError, match="units=4"):
        ste.spiking.RLIF(units=4)(tf.zeros((2, 3, 5)))
    with pytest.raises(ste.errors.CallError, match=r"\[batch, time, \.\.\.\]"):
        ste.spiking.TimeDistributed(keras.layers.Flatten())(tf.zeros((2, 3)))


def test_readout_refuses_a_reduced_input() -> None:
    with pytest.raises(ste.errors.CallError, match=r"\[batch, units\]"):
        ste.spiking.Readout("count")(tf.zeros((2, 3)))
    with pytest.raises(ste.errors.CallError):
        keras.Sequential([keras.Input((3,)), ste.spiking.Readout("max")])
    for fn in (ste.spiking.spike_count, ste.spiking.spike_rate, ste.spiking.last_membrane, ste.spiking.max_membrane):
        with pytest.raises(ste.errors.CallError):
            fn(np.zeros((2, 3)))
    maps = np.random.default_rng(4).random((2, 3, 4, 5))
    np.testing.assert_allclose(ste.spiking.Readout("rate")(maps).numpy(), maps.mean(1), rtol=1e-6)


def test_encoders_refuse_what_would_be_silently_wrong_or_a_raw_error() -> None:
    x = np.full((2, 3), 0.5)
    for kwargs in ({"gain": float("nan")}, {"gain": float("inf")}, {"gain": -1.0}, {"seed": 2**70}, {"seed": 1.5}):
        with pytest.raises(ste.errors.ParameterError):
            ste.spiking.rate_encode(x, 3, **kwargs)
    with pytest.raises(ste.errors.ParameterError, match="2\\*\\*31"):
        ste.spiking.rate_encode(x, 10**12)
    with pytest.raises(ste.errors.ParameterError, match="GiB"):
        ste.spiking.rate_encode(np.zeros((1000, 1000)), 2**31 - 1)
    for threshold in (float("nan"), 0.0, -0.1):
        with pytest.raises(ste.errors.ParameterError):
            ste.spiking.delta_encode(x[:, :, None], threshold=threshold)
    with pytest.raises(ste.errors.ParameterError):
        ste.spiking.latency_encode(x, 3, tau=float("nan"))
    seeded = ste.spiking.rate_encode(x, 4, seed=2**63 - 1, gain=np.float32(1.0)).numpy()
    assert seeded.shape == (2, 4, 3) and set(np.unique(seeded)) <= {0.0, 1.0}


def _exported_gradient(directory: Path, kind: str) -> None:
    """The export's gradient is the live model's."""
    layer = ste.spiking.RSynaptic(learn_alpha=True, recurrent_bias=True) if kind == "RSynaptic" else ste.spiking.LI()
    x = tf.constant(_sequences(4)[0])
    model = keras.Sequential([keras.Input(x.shape[1:]), keras.layers.Dense(UNITS), layer])
    model.export(str(directory / "exported"), verbose=False)
    restored = tf.saved_model.load(str(directory / "exported"))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        out, expected = restored.serve(x), model(x)
        weighted = [tf.reduce_sum(o * tf.range(1.0, UNITS + 1)) for o in (out, expected)]
    np.testing.assert_array_equal(out.numpy(), expected.numpy())
    got, want = (tape.gradient(w, x) for w in weighted)
    assert np.any(want.numpy() != 0)
    # float32: an element that is a difference of large terms carries their rounding (the Dense's random init made
    # 3 in 12 seeds miss atol=1e-7 by 1-2 ulp of the largest gradient, on main too), so atol scales with it
    scale = float(np.abs(want.numpy()).max())
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6 * scale)


@pytest.mark.parametrize("kind", ["RSynaptic", "LI"])
def test_savedmodel_export_keeps_the_gradient(kind: str, tmp_path: Path) -> None:
    _exported_gradient(tmp_path, kind)
