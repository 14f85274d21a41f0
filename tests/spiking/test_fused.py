"""``SpikingDense`` and ``Fused`` (the fused dense + neuron loop, ste/spiking/_fused/) against the numpy BPTT models of
reference.py (every neuron case of test_gradients.py and test_neurons.py) and against the unfused network
(``keras.layers.Dense`` then the neuron layer) in a graph, under XLA, in the four float dtypes, in a
MirroredStrategy step and through .keras saving; gradients of gradients are refused."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

from . import reference
from . import test_gradients as lif_table
from . import test_neurons as neuron_table

BATCH, STEPS, FEATURES = 3, 7, 4


def _data(seed: int, units: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.random((BATCH, STEPS, FEATURES))
    kernel = rng.normal(0.3, 0.5, size=(FEATURES, units))
    bias = rng.normal(0.0, 0.1, size=(units,))
    return x, kernel, bias, rng.normal(size=(BATCH, STEPS, units))


def _fused_gradients(layer: ste.spiking.SpikingDense, x: np.ndarray, kernel: np.ndarray, bias: np.ndarray, g: Any):
    """Outputs and the gradients of Σ g·out with respect to the input, kernel, bias and the neuron's parameters."""
    if not layer.built:
        layer.build((BATCH, STEPS, FEATURES))
    layer.kernel.assign(kernel)
    layer.bias.assign(bias)
    xt = tf.constant(x)
    names = list(layer.neuron._learned)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        out = layer(xt)
        loss = tf.reduce_sum(out * g)
    grads = tape.gradient(loss, [xt, layer.kernel, layer.bias, *layer.neuron._learned.values()])
    return (
        out.numpy(),
        grads[0].numpy(),
        grads[1].numpy(),
        grads[2].numpy(),
        dict(zip(names, (v.numpy() for v in grads[3:]))),
    )


def _through_dense(d_current: np.ndarray, x: np.ndarray, kernel: np.ndarray) -> tuple[np.ndarray, ...]:
    """dL/dx, dL/dW, dL/db from dL/dI with I = x·W + b."""
    return d_current @ kernel.T, np.einsum("bti,btu->iu", x, d_current), d_current.sum(axis=(0, 1))


@pytest.mark.parametrize(
    ("kind", "reset", "detach"),
    lif_table.CASES,
    ids=[f"{k}-{r}-{'detach' if d else 'attached'}" for k, r, d in lif_table.CASES],
)
def test_lif_if_alif_match_numpy_bptt(kind: str, reset: str, detach: bool) -> None:
    _, _, _, rnn, neuron = lif_table._case(kind, reset, detach)  # the table's neuron and its numpy model
    units = lif_table.UNITS
    x, kernel, bias, g = _data(lif_table.CASES.index((kind, reset, detach)), units)
    layer = ste.spiking.SpikingDense(units, rnn, dtype="float64", segment=3)
    out, dx, dw, db, params = _fused_gradients(layer, x, kernel, bias, g)
    current = x @ kernel + bias
    expected = reference.forward(neuron, current)
    assert 0 < expected["S"].mean() < 0.9, "the data should make some but not all neurons fire"
    np.testing.assert_array_equal(out, expected["S"].transpose(1, 0, 2))
    want = reference.backward(neuron, current, g, np.zeros((BATCH, units)))
    tol = {"rtol": 1e-10, "atol": 1e-12}
    for got, expected_grad in zip((dx, dw, db), _through_dense(want["current"], x, kernel)):
        np.testing.assert_allclose(got, expected_grad, **tol)
    np.testing.assert_allclose(params["threshold"], want["threshold"], **tol)
    np.testing.assert_allclose(params["surrogate_alpha"], want["alpha"], **tol)
    if kind != "IF":
        np.testing.assert_allclose(params["beta"], want["beta"], **tol)


@pytest.mark.parametrize(
    ("kind", "reset", "detach"),
    neuron_table.CASES,
    ids=[f"{k}-{r}-{'det' if d else 'att'}" for k, r, d in neuron_table.CASES],
)
def test_synaptic_recurrent_li_match_numpy_bptt(kind: str, reset: str, detach: bool) -> None:
    seed = neuron_table.CASES.index((kind, reset, detach))
    rnn, n = neuron_table._neuron(kind, reset, detach)
    units = neuron_table.UNITS
    x, kernel, bias, g = _data(100 + seed, units)
    layer = ste.spiking.SpikingDense(units, rnn, dtype="float64", segment=2)
    layer.build((BATCH, STEPS, FEATURES))
    n.recurrent, n.bias = neuron_table._recurrent_weights(types.SimpleNamespace(cell=layer.neuron), seed)
    out, dx, dw, db, params = _fused_gradients(layer, x, kernel, bias, g)
    current = x @ kernel + bias
    expected = reference.simulate(n, current)
    if n.spiking:
        assert 0.05 < expected["S"].mean() < 0.9, "the data should make some but not all neurons fire"
        np.testing.assert_array_equal(out, expected["S"].transpose(1, 0, 2))
    else:
        np.testing.assert_allclose(out, expected["U"].transpose(1, 0, 2), rtol=1e-12, atol=1e-12)
    want = reference.bptt(n, current, g, np.zeros((BATCH, units)))
    tol = {"rtol": 1e-10, "atol": 1e-12}
    for got, expected_grad in zip((dx, dw, db), _through_dense(want["current"], x, kernel)):
        np.testing.assert_allclose(got, expected_grad, **tol)
    np.testing.assert_allclose(params["beta"], want["beta"], **tol)
    if n.alpha is not None:
        np.testing.assert_allclose(params["alpha"], want["alpha"], **tol)
    if n.spiking:
        np.testing.assert_allclose(params["threshold"], want["threshold"], **tol)
        np.testing.assert_allclose(params["surrogate_alpha"], want["surrogate"], **tol)
    if n.recurrent is not None:
        np.testing.assert_allclose(params["recurrent_kernel"], want["recurrent"], **tol)


# -- against the unfused network, in graphs ------------------------------------------------------------------------

HIDDEN, CLASSES = 8, 3


def _cells(dtype: str) -> list[ste.spiking.SpikingCell]:
    return [
        ste.spiking.LIFCell(beta=1.0, learn_beta=True, learn_threshold=True, dtype=dtype),
        ste.spiking.SynapticCell(alpha=0.5, beta=1.0, reset="zero", detach_reset=False, dtype=dtype),
    ]


def _pair(dtype: str, segment: int | None = None, jit_compile: bool = True) -> tuple[keras.Model, keras.Model]:
    """The fused network and the unfused one (Dense, neuron layer, Dense, neuron layer) with the same weights.

    β = 1, weights and biases multiples of 1/8 and 0/1 inputs: every current and membrane is exact in bfloat16, so
    both networks spike alike in every dtype and only the order of the gradients' sums differs.
    """
    lif, synaptic = _cells(dtype)
    inputs = keras.Input((STEPS, FEATURES), dtype=dtype)
    fused = keras.Model(
        inputs,
        ste.spiking.Fused(
            [
                ste.spiking.SpikingDense(HIDDEN, lif, dtype=dtype),
                ste.spiking.SpikingDense(CLASSES, synaptic, dtype=dtype),
            ],
            segment=segment,
            jit_compile=jit_compile,
            dtype=dtype,
        )(inputs),
    )
    layers = [
        keras.layers.Dense(HIDDEN, dtype=dtype),
        ste.spiking.LIF(beta=1.0, learn_beta=True, learn_threshold=True, dtype=dtype),
        keras.layers.Dense(CLASSES, dtype=dtype),
        ste.spiking.Synaptic(alpha=0.5, beta=1.0, reset="zero", detach_reset=False, dtype=dtype),
    ]
    unfused = keras.Sequential([keras.Input((STEPS, FEATURES), dtype=dtype), *layers])
    rng = np.random.default_rng(5)
    for weight in unfused.weights:
        if weight.shape.rank:
            weight.assign(rng.integers(-4, 7, size=weight.shape) / 8)
    by_role = {}
    for weight in unfused.weights:
        by_role.setdefault(weight.name, []).append(weight)
    for weight in fused.weights:
        weight.assign(by_role[weight.name].pop(0))
    return fused, unfused


def _step(model: keras.Model, x: tf.Tensor, g: tf.Tensor, jit: bool, eager: bool = False) -> Any:
    """The outputs and the gradients of Σ g·out with respect to x and the weights, in a tf.function (or eagerly)."""

    def run() -> Any:
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = model(x, training=True)
            loss = tf.reduce_sum(tf.cast(out, tf.float32) * g)
        return out, tape.gradient(loss, [x, *model.trainable_weights])

    return run() if eager else tf.function(run, jit_compile=jit)()


DTYPES = [("float16", False), ("bfloat16", False), ("float32", False), ("float64", False), ("float16", True)]


@pytest.mark.parametrize(("dtype", "jit"), DTYPES, ids=[f"{d}{'-xla' if j else ''}" for d, j in DTYPES])
def test_fused_network_matches_the_unfused_one(dtype: str, jit: bool) -> None:
    fused, unfused = _pair(dtype, jit_compile=jit)
    x = tf.constant(np.random.default_rng(2).random((BATCH, STEPS, FEATURES)) < 0.5, dtype)
    _assert_like_unfused(fused, unfused, x, dtype)


def _assert_like_unfused(fused: keras.Model, unfused: keras.Model, x: tf.Tensor, dtype: str) -> None:
    """The same spikes, and the same gradients to the dtype's rounding (the order of the sums differs)."""
    g = tf.constant(np.random.default_rng(12).normal(size=(BATCH, STEPS, CLASSES)), tf.float32)
    (out, grads), (want, wanted) = _step(fused, x, g, False), _step(unfused, x, g, False)
    assert 0 < float(tf.reduce_mean(tf.cast(want, tf.float32))) < 1
    np.testing.assert_array_equal(out.numpy(), want.numpy())
    rtol = {"float16": 1e-2, "bfloat16": 4e-2, "float32": 1e-5, "float64": 1e-12}[dtype]
    assert len(grads) == len(wanted) == 1 + len(fused.trainable_weights)
    for a, b in zip(grads, wanted):
        scale = float(tf.reduce_max(tf.abs(tf.cast(b, tf.float64))))
        assert scale > 0
        np.testing.assert_allclose(
            tf.cast(a, tf.float64).numpy(), tf.cast(b, tf.float64).numpy(), rtol=rtol, atol=rtol * scale
        )


@pytest.mark.parametrize("segment", [1], ids=["every-step"])  # the default segments: test_fused_network...[float16-xla]
def test_xla_and_every_segment_length_give_the_unfused_gradients(segment: int) -> None:
    fused, unfused = _pair("float64", segment)
    rng = np.random.default_rng(3)
    x = tf.constant(rng.random((BATCH, STEPS, FEATURES)) < 0.5, tf.float64)
    g = tf.constant(rng.normal(size=(BATCH, STEPS, CLASSES)), tf.float32)
    (out, grads), (want, wanted) = _step(fused, x, g, True), _step(unfused, x, g, False)
    np.testing.assert_array_equal(out.numpy(), want.numpy())
    for a, b in zip(grads, wanted):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-12)


def test_mirrored_strategy_step_matches_one_device() -> None:
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
    if len(devices) < 2:
        pytest.skip("needs the two logical CPU devices set up by tests/conftest.py")
    strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
    rng = np.random.default_rng(4)
    x = (rng.random((16, STEPS, FEATURES)) < 0.5).astype("float32")
    y = rng.integers(0, CLASSES, size=16).astype("int32")

    def run(strategy: Any) -> list[np.ndarray]:
        with strategy.scope():
            fused, _ = _pair("float32", jit_compile=False)  # (XLA: test_xla_and_every_segment_length...)
        loss_fn = ste.spiking.RateCrossEntropy(reduction="sum")

        @tf.function
        def train(x: tf.Tensor, y: tf.Tensor) -> None:
            def step(x: tf.Tensor, y: tf.Tensor) -> None:
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, fused(x, training=True)) / 16
                grads = tape.gradient(loss, fused.trainable_weights)
                grads = tf.distribute.get_replica_context().all_reduce("sum", grads)
                for weight, grad in zip(fused.trainable_weights, grads):
                    weight.assign_sub(0.5 * grad)

            strategy.run(step, (x, y))

        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
        for batch in strategy.experimental_distribute_dataset(data):
            train(*batch)
        return [w.numpy() for w in fused.weights]

    mirrored, single = run(strategy), run(tf.distribute.OneDeviceStrategy(devices[0]))
    assert any(not np.array_equal(a, b) for a, b in zip(mirrored, _pair("float32")[0].get_weights()))
    for a, b in zip(mirrored, single):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_keras_save_and_load(tmp_path) -> None:
    fused, _ = _pair("float32")
    x = (np.random.default_rng(6).random((BATCH, STEPS, FEATURES)) < 0.5).astype("float32")
    path = tmp_path / "fused.keras"
    fused.save(path)
    loaded = keras.saving.load_model(path)  # safe_mode: everything is registered
    np.testing.assert_array_equal(loaded(x).numpy(), fused(x).numpy())
    layer = loaded.layers[-1]
    assert isinstance(layer, ste.spiking.Fused)
    assert [type(d.neuron) for d in layer.fused_layers] == [ste.spiking.LIFCell, ste.spiking.SynapticCell]
    assert layer.fused_layers[1].neuron.get_config() == fused.layers[-1].fused_layers[1].neuron.get_config()
    for a, b in zip(loaded.weights, fused.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_a_gradient_of_the_gradient_is_refused_at_trace_time() -> None:
    layer = ste.spiking.SpikingDense(4, ste.spiking.LIFCell())
    x = tf.random.stateless_uniform((2, STEPS, FEATURES), seed=(1, 2))
    layer(x)

    @tf.function
    def second_order() -> tf.Tensor:
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                loss = tf.reduce_sum(layer(x))
            grad = inner.gradient(loss, layer.kernel)
            penalty = tf.reduce_sum(grad**2)
        return outer.gradient(penalty, layer.kernel)

    with pytest.raises(ste.errors.HigherOrderError, match="SpikingDense.*Fix: use the unfused layers"):
        second_order.get_concrete_function()


@pytest.mark.parametrize("mode", ["eager", "tf.function"])
def test_forward_mode_is_refused(mode: str) -> None:
    layer = ste.spiking.SpikingDense(4, ste.spiking.LIFCell())
    x = tf.random.stateless_uniform((2, STEPS, FEATURES), seed=(5, 6))
    call = layer if mode == "eager" else tf.function(lambda z: layer(z))
    with pytest.raises(ste.errors.HigherOrderError, match="Fix: use the unfused layers"):
        with tf.autodiff.ForwardAccumulator(x, tf.ones_like(x)) as accumulator:
            accumulator.jvp(call(x))


def test_the_input_gradient_is_left_out_when_nothing_watches_the_input() -> None:
    # The network's input data: its gradient is neither asked for nor computed (it would be [batch, time, features]).
    layer = ste.spiking.SpikingDense(4, ste.spiking.LIFCell())
    x = tf.random.stateless_uniform((2, STEPS, FEATURES), seed=(3, 4))
    layer(x)

    @tf.function
    def grads() -> Any:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(x) * tf.range(1.0, 5.0))
        return tape.gradient(loss, layer.trainable_weights)

    graph = grads.get_concrete_function().graph
    backward = [
        f for f in graph.as_graph_def().library.function if f.signature.name.startswith("__inference_backward_")
    ]
    assert backward and all(len(f.signature.output_arg) == 2 for f in backward)  # the kernel's and the bias's only
    assert all(np.any(g.numpy() != 0) for g in grads())


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: ste.spiking.SpikingDense(4, keras.layers.Dense(4)), ste.errors.ParameterError),
        (lambda: ste.spiking.SpikingDense(4, ste.spiking.LIFCell(units=3)), ste.errors.ParameterError),
        (lambda: ste.spiking.SpikingDense(0), ste.errors.ParameterError),
        (lambda: ste.spiking.SpikingDense(4, segment=0), ste.errors.ParameterError),
        (lambda: ste.spiking.Fused([keras.layers.Dense(4)]), ste.errors.ParameterError),
        (lambda: ste.spiking.SpikingDense(4)(tf.zeros((2, 3))), ste.errors.CallError),
        (lambda: ste.spiking.Fused([ste.spiking.SpikingDense(4)])(tf.zeros((2, 3))), ste.errors.CallError),
        (lambda: ste.spiking.SpikingConv2D(2, 3, padding="full"), ste.errors.ParameterError),
        (lambda: ste.spiking.SpikingConv2D(2, (3, 0)), ste.errors.ParameterError),
        (lambda: ste.spiking.SpikingConv2D(2, 5)(tf.zeros((1, 2, 3, 3, 1))), ste.errors.CallError),
        (lambda: ste.spiking.SpikingConv2D(2, 3)(tf.zeros((1, 2, 5))), ste.errors.CallError),
        (
            lambda: ste.spiking.Fused([ste.spiking.SpikingDense(4), ste.spiking.SpikingConv2D(2, 3)])(
                tf.zeros((1, 2, 5))
            ),
            ste.errors.CallError,
        ),
    ],
    ids=[
        "neuron-not-a-cell",
        "units-mismatch",
        "units-0",
        "segment-0",
        "fused-not-spiking-dense",
        "no-time-axis",
        "fused-no-time-axis",
        "conv-padding",
        "conv-kernel-size",
        "conv-window-too-large",
        "conv-no-frames",
        "conv-after-dense",
    ],
)
def test_errors(make: Any, error: type) -> None:
    with pytest.raises(error):
        make()


# -- a Keras mask (keras.layers.Masking in front): a masked step is skipped --------------------------------------

SKIPPED = {0: [2], 1: [4, 5, 6], 2: [0, 3]}  # the masked steps of each sample: in the middle, at the end, first


def _masked_data(dtype: str) -> tuple[tf.Tensor, tf.Tensor]:
    """0/1 inputs whose steps in ``SKIPPED`` are all 0 (what keras.layers.Masking masks) and no other step is, and
    the output gradient g, nonzero at the masked steps too."""
    rng = np.random.default_rng(21)
    x = (rng.random((BATCH, STEPS, FEATURES)) < 0.5).astype(dtype)
    x[..., 0] = np.where(x.sum(axis=-1) == 0, 1, x[..., 0])
    for sample, steps in SKIPPED.items():
        x[sample, steps] = 0
    return tf.constant(x), tf.constant(rng.normal(size=(BATCH, STEPS, CLASSES)), tf.float32)


def _behind_masking(layers: list[keras.layers.Layer], dtype: str) -> keras.Model:
    inputs = keras.Input((STEPS, FEATURES), dtype=dtype)
    x = keras.layers.Masking(0.0, dtype=dtype)(inputs)
    for layer in layers:
        x = layer(x)
    return keras.Model(inputs, x)


def _output_and_gradients(model: keras.Model, x: tf.Tensor, g: tf.Tensor, mode: str) -> tuple[Any, list[Any]]:
    out, grads = _step(model, x, g, False, eager=mode == "eager")
    return out.numpy(), [grad.numpy() for grad in grads]


MASK_CASES = [(dtype, mode) for dtype in ("float32", "float64") for mode in ("eager", "graph", "xla")]


@pytest.mark.parametrize(("dtype", "mode"), MASK_CASES, ids=[f"{d}-{m}" for d, m in MASK_CASES])
def test_a_masked_step_is_skipped_as_by_the_unfused_layers(dtype: str, mode: str) -> None:
    # The unfused layers behind the same Masking (Keras's RNN: a masked step keeps the states and outputs 0): the
    # same outputs bit for bit, the same gradients to the order of the sums.
    fused, unfused = _pair(dtype, jit_compile=mode == "xla")
    x, g = _masked_data(dtype)
    out, grads = _output_and_gradients(_behind_masking([fused.layers[-1]], dtype), x, g, mode)
    want, wanted = _output_and_gradients(
        _behind_masking(unfused.layers, dtype), x, g, "eager" if mode == "eager" else "graph"
    )
    for sample, steps in SKIPPED.items():
        assert not np.any(want[sample, steps]) and np.any(want[sample]), "the unfused layers output 0 when masked"
    np.testing.assert_array_equal(out, want)
    assert not np.array_equal(out, fused(x).numpy()), "without the mask the outputs differ"
    rtol = {"float32": 1e-5, "float64": 1e-12}[dtype]
    for a, b in zip(grads, wanted):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * float(np.max(np.abs(b))))


def test_a_masked_step_is_as_if_the_step_were_not_there() -> None:
    # The reference needs no mask: each sample without its masked steps through the unfused layers (0 out at the
    # masked steps); the weights' gradient is the sum over the samples, the input's is 0 at the masked steps.
    fused, unfused = _pair("float64")
    x, g = _masked_data("float64")
    out, grads = _output_and_gradients(_behind_masking([fused.layers[-1]], "float64"), x, g, "graph")
    want = np.zeros_like(out)
    wanted = [np.zeros_like(grads[0]), *(np.zeros(w.shape) for w in unfused.trainable_weights)]
    for sample in range(BATCH):
        kept = [t for t in range(STEPS) if t not in SKIPPED[sample]]
        xs = tf.constant(x.numpy()[sample : sample + 1, kept])
        with tf.GradientTape() as tape:
            tape.watch(xs)
            ys = unfused(xs)
            loss = tf.reduce_sum(ys * tf.cast(tf.gather(g[sample : sample + 1], kept, axis=1), tf.float64))
        d_x, *d_weights = tape.gradient(loss, [xs, *unfused.trainable_weights])
        want[sample, kept] = ys.numpy()[0]
        wanted[0][sample, kept] = d_x.numpy()[0]
        for total, d in zip(wanted[1:], d_weights):
            total += d.numpy()
    np.testing.assert_array_equal(out, want)
    assert 0 < want.mean() < 1
    for a, b in zip(grads, wanted):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * float(np.max(np.abs(b))))


def test_a_spiking_dense_alone_honours_the_mask() -> None:
    layer = ste.spiking.SpikingDense(CLASSES, ste.spiking.LIFCell(beta=1.0), dtype="float64")
    reference = [keras.layers.Dense(CLASSES, dtype="float64"), ste.spiking.LIF(beta=1.0, dtype="float64")]
    x, g = _masked_data("float64")
    fused, unfused = _behind_masking([layer], "float64"), _behind_masking(reference, "float64")
    rng = np.random.default_rng(22)
    for a, b in zip(fused.weights, unfused.weights):
        b.assign(rng.integers(-4, 7, size=b.shape) / 8)
        a.assign(b)
    (out, grads), (want, wanted) = (_output_and_gradients(m, x, g, "graph") for m in (fused, unfused))
    np.testing.assert_array_equal(out, want)
    assert not np.any(want[1, 4:]) and 0 < want.mean() < 1
    for a, b in zip(grads, wanted):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * float(np.max(np.abs(b))))


def test_a_mask_per_pixel_is_refused_with_the_fix() -> None:
    # keras.layers.Masking in front of feature maps gives a [batch, time, height, width] mask: no step to skip
    conv = ste.spiking.Fused([ste.spiking.SpikingConv2D(2, 3)], name="stack")
    x = np.ones((2, 3, 5, 5, 1), "float32")
    for layer, name in ((conv, "Fused 'stack'"), (ste.spiking.LIF(name="lif"), "LIF 'lif'")):
        with pytest.raises(ste.errors.CallError) as caught:
            layer(x, mask=np.ones((2, 3, 5, 5), bool))
        message = str(caught.value)
        assert all(part in message for part in (name, "[batch, time]", "(2, 3, 5, 5)", "Fix: mask whole time steps"))


def test_a_stack_without_a_time_axis_is_refused_with_the_fix() -> None:
    # [batch, features] would otherwise run as `features` steps of one feature each
    with pytest.raises(ste.errors.CallError) as caught:
        ste.spiking.Fused([ste.spiking.SpikingDense(4)], name="stack")(tf.zeros((2, 3)))
    message = str(caught.value)
    assert all(part in message for part in ("Fused 'stack'", "[batch, time, ...]", "(2, 3)", "Fix: add a time axis"))


FRAME = (6, 6, 2)


def _conv_pair(dtype: str, jit_compile: bool = True) -> tuple[keras.Model, keras.Model]:
    """A fused stack of two convolutions ("same"; stride 2, "valid", 3×2) and a dense readout, and the unfused
    network (TimeDistributed(Conv2D) then the neuron layer, twice, then Flatten, Dense, the neuron layer), with the
    same weights: multiples of 1/8 in [-2/8, 3/8] and β ∈ {1, 1/2}, so that every current and membrane is exact in
    bfloat16 and both networks spike alike in every dtype."""
    lif, synaptic = _cells(dtype)
    inputs = keras.Input((STEPS, *FRAME), dtype=dtype)
    stack = [
        ste.spiking.SpikingConv2D(3, 3, lif, padding="same", dtype=dtype),
        ste.spiking.SpikingConv2D(4, (3, 2), ste.spiking.LIFCell(beta=0.5, dtype=dtype), strides=2, dtype=dtype),
        ste.spiking.SpikingDense(CLASSES, synaptic, dtype=dtype),
    ]
    fused = keras.Model(inputs, ste.spiking.Fused(stack, jit_compile=jit_compile, dtype=dtype)(inputs))
    layers = [
        ste.spiking.TimeDistributed(keras.layers.Conv2D(3, 3, padding="same", dtype=dtype)),
        ste.spiking.LIF(beta=1.0, learn_beta=True, learn_threshold=True, dtype=dtype),
        ste.spiking.TimeDistributed(keras.layers.Conv2D(4, (3, 2), strides=2, dtype=dtype)),
        ste.spiking.LIF(beta=0.5, dtype=dtype),
        ste.spiking.TimeDistributed(keras.layers.Flatten(dtype=dtype)),
        keras.layers.Dense(CLASSES, dtype=dtype),
        ste.spiking.Synaptic(alpha=0.5, beta=1.0, reset="zero", detach_reset=False, dtype=dtype),
    ]
    unfused = keras.Sequential([keras.Input((STEPS, *FRAME), dtype=dtype), *layers])
    rng = np.random.default_rng(7)
    for weight in unfused.weights:
        if weight.shape.rank:
            weight.assign(rng.integers(-2, 4, size=weight.shape) / 8)
    by_role: dict[str, list[Any]] = {}
    for weight in unfused.weights:
        by_role.setdefault(weight.name, []).append(weight)
    for weight in fused.weights:
        source = by_role[weight.name].pop(0)
        assert tuple(source.shape) == tuple(weight.shape)
        weight.assign(source)
    return fused, unfused


CONV_DTYPES = [("float16", False), ("bfloat16", False), ("float32", True), ("float64", False)]


def _convolutions_like_unfused(directory: Path) -> None:
    """The fused conv stack against the unfused network in the four dtypes, float32 under XLA."""
    for dtype, jit in CONV_DTYPES:
        fused, unfused = _conv_pair(dtype, jit_compile=jit)
        x = tf.constant(np.random.default_rng(8).random((BATCH, STEPS, *FRAME)) < 0.5, dtype)
        _assert_like_unfused(fused, unfused, x, dtype)


def test_fused_convolutions_match_the_unfused_network_in_every_dtype(tmp_path: Path) -> None:
    _convolutions_like_unfused(tmp_path)


def test_a_fused_convolution_saves_and_loads(tmp_path) -> None:
    fused, _ = _conv_pair("float32")
    x = (np.random.default_rng(9).random((BATCH, STEPS, *FRAME)) < 0.5).astype("float32")
    path = tmp_path / "conv.keras"
    fused.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(loaded(x).numpy(), fused(x).numpy())
    conv = loaded.layers[-1].fused_layers[1]
    assert (conv.filters, conv.kernel_size, conv.strides, conv.padding) == (4, (3, 2), (2, 2), "valid")


@pytest.mark.parametrize(
    ("frame", "kernel_size", "strides", "padding"),
    [
        ((7, 7, 2), (3, 3), (1, 1), "same"),
        ((6, 5, 1), (3, 3), (1, 2), "same"),
        ((8, 8, 3), (2, 3), (1, 1), "same"),
        ((7, 6, 2), (3, 2), (2, 2), "valid"),
    ],
    ids=["same-odd", "one-channel", "same-even-kernel", "valid-stride-2"],
)
def test_the_convolution_products_under_xla_are_conv2d_and_its_autodiff(frame, kernel_size, strides, padding) -> None:
    # Under XLA the kernel's gradient is a sum of per-position products, the input's a flipped convolution and a
    # single channel's convolution broadcast multiply-adds (XLA:CPU's own lowerings are 5-25x slower): they must be
    # tf.nn.conv2d and its derivatives.
    from ste.spiking._fused._synapses import Conv2DSynapse

    synapse = Conv2DSynapse(frame, 3, kernel_size, strides, padding)
    rng = np.random.default_rng(10)
    h = tf.constant(rng.random((4, synapse.inputs)))
    kernel = tf.constant(rng.normal(size=(*kernel_size, frame[-1], 3)))
    d = tf.constant(rng.normal(size=(4, synapse.units)))
    with tf.GradientTape() as tape:
        tape.watch([h, kernel])
        out = tf.nn.conv2d(tf.reshape(h, [-1, *frame]), kernel, [1, *strides, 1], padding.upper())
        loss = tf.reduce_sum(tf.reshape(out, [4, -1]) * d)
    want_kernel, want_input = tape.gradient(loss, [kernel, h])

    @tf.function(jit_compile=True)
    def products(h: tf.Tensor, d: tf.Tensor, kernel: tf.Tensor) -> Any:
        summed = synapse.gradient_sum(kernel) + synapse.kernel_gradient(h, d)
        return synapse.apply(h, kernel), synapse.kernel_from_sum(summed), synapse.input_gradient(d, kernel)

    got_out, got_kernel, got_input = products(h, d, kernel)
    np.testing.assert_allclose(got_out.numpy(), tf.reshape(out, [4, -1]).numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_kernel.numpy(), want_kernel.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_input.numpy(), want_input.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("inputs", "units"), [(7, 3), (3, 7), (5, 5)], ids=["fewer-units", "more-units", "square"])
def test_the_dense_products_summed_over_steps_are_matmul_and_its_autodiff(inputs, units) -> None:
    # with fewer units than inputs the kernel's gradient is summed transposed (a faster product under XLA:CPU)
    from ste.spiking._fused._synapses import DenseSynapse

    synapse = DenseSynapse(inputs, units)
    rng = np.random.default_rng(12)
    hs = tf.constant(rng.random((3, 4, inputs)))  # 3 steps of 4 rows
    kernel = tf.constant(rng.normal(size=(inputs, units)))
    ds = tf.constant(rng.normal(size=(3, 4, units)))
    with tf.GradientTape() as tape:
        tape.watch([hs, kernel])
        loss = tf.reduce_sum(tf.einsum("tni,iu->tnu", hs, kernel) * ds)
    want_kernel, want_input = tape.gradient(loss, [kernel, hs])

    @tf.function(jit_compile=True)
    def products(hs: tf.Tensor, ds: tf.Tensor, kernel: tf.Tensor) -> Any:
        summed = synapse.gradient_sum(kernel)
        for t in range(3):
            summed = summed + synapse.kernel_gradient(hs[t], ds[t])
        inputs_grad = tf.stack([synapse.input_gradient(ds[t], kernel) for t in range(3)])
        return synapse.kernel_from_sum(summed), inputs_grad

    got_kernel, got_input = products(hs, ds, kernel)
    np.testing.assert_allclose(got_kernel.numpy(), want_kernel.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_input.numpy(), want_input.numpy(), rtol=1e-12, atol=1e-12)


def _exported_stack(directory: Path) -> None:
    """A SavedModel export of a fused conv-conv-dense stack gives the live model's outputs and input gradient."""
    fused, _ = _conv_pair("float32")
    x = tf.constant(np.random.default_rng(11).random((BATCH, STEPS, *FRAME)) < 0.5, tf.float32)
    fused.export(str(directory / "exported"), verbose=False)
    restored = tf.saved_model.load(str(directory / "exported"))

    @tf.function
    def output_and_gradient(call: Any, x: tf.Tensor) -> Any:
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = call(x)
            weighted = tf.reduce_sum(out * tf.range(1.0, CLASSES + 1))
        return out, tape.gradient(weighted, x)

    (out, got), (expected, want) = output_and_gradient(restored.serve, x), output_and_gradient(fused, x)
    np.testing.assert_array_equal(out.numpy(), expected.numpy())
    assert np.any(want.numpy() != 0)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)


def test_savedmodel_export_of_a_fused_stack_keeps_outputs_and_gradient(tmp_path: Path) -> None:
    _exported_stack(tmp_path)
