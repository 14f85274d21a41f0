"""``ste.sparsity`` against independent references: TFMOT 0.8.1's formulas (its
``pruning_schedule``, ``pruning_impl`` and ``pruning_wrapper`` code), numpy written here, finite differences, and,
where a TFMOT virtual environment is named by ``STE_TFMOT_VENV``, the same scenario run in TFMOT itself."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

S = ste.sparsity
L = keras.layers


# -- references written from TFMOT's code -------------------------------------------------------------------------


def tfmot_should_prune(step: int, begin: int, end: int, frequency: int) -> bool:
    in_range = step >= begin and (end == -1 or step <= end)
    return in_range and (step - begin) % frequency == 0


def tfmot_poly(step: int, s0: float, s1: float, begin: int, end: int, power: float) -> float:
    p = min(1.0, max(0.0, (step - begin) / (end - begin)))
    return s1 + (s0 - s1) * (1.0 - p) ** power


def tfmot_poly32(step: int, s0: float, s1: float, begin: int, end: int, power: float) -> np.float32:
    """TFMOT's PolynomialDecay in float32, op by op (its ``__call__``): the count of kept weights depends on it."""
    f = np.float32
    p = np.minimum(f(1), np.maximum(f(0), f(step - begin) / f(end - begin)))
    return f(f(s0 - s1) * np.power(f(1) - p, f(power))) + f(s1)


def kept(n: int, sparsity: float) -> int:
    return max(int(np.round(np.float32(n) * (np.float32(1.0) - np.float32(sparsity)))), 1)


def np_magnitude_mask(w: np.ndarray, sparsity: float) -> np.ndarray:
    """Keep the k largest |w| (distinct magnitudes assumed, so ties do not matter)."""
    flat = np.abs(w.astype(np.float64)).ravel()
    k = kept(flat.size, sparsity)
    threshold = np.sort(flat)[::-1][k - 1]
    return (np.abs(w.astype(np.float64)) >= threshold).astype(np.float64)


def np_block_scores(w: np.ndarray, block: tuple[int, int], pooling: str) -> np.ndarray:
    """TFMOT pools with tf.nn.pool(padding='SAME'): total padding p = out·b − n, p // 2 of it before the first row
    (column), so window i covers rows i·b − p // 2 ... (i + 1)·b − p // 2 − 1, clipped to the weight."""
    rows, cols = w.shape
    bh, bw = block
    out = np.zeros((-(-rows // bh), -(-cols // bw)))
    top, left = (out.shape[0] * bh - rows) // 2, (out.shape[1] * bw - cols) // 2
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            r, c = i * bh - top, j * bw - left
            part = np.abs(w[max(r, 0) : r + bh, max(c, 0) : c + bw])
            out[i, j] = part.mean() if pooling == "AVG" else part.max()
    return out


def np_block_mask(w: np.ndarray, sparsity: float, block: tuple[int, int], pooling: str) -> np.ndarray:
    scores = np_block_scores(w, block, pooling)
    keep = np_magnitude_mask(scores, sparsity)
    return np.kron(keep, np.ones(block))[: w.shape[0], : w.shape[1]]  # laid out from row 0, column 0, as TFMOT does


def np_n_by_m(w: np.ndarray, zeros: int, group: int, axis: int) -> np.ndarray:
    moved = np.moveaxis(np.abs(w), axis, -1)
    groups = moved.reshape(-1, group)
    mask = np.ones_like(groups)
    for row, g in zip(mask, groups):
        row[np.argsort(g, kind="stable")[:zeros]] = 0.0  # distinct magnitudes: the zeros smallest
    return np.moveaxis(mask.reshape(moved.shape), -1, axis)


def dense(units: int = 6, inputs: int = 8, seed: int = 0, dtype: str | None = None, bias: bool = False) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((inputs,)), L.Dense(units, use_bias=bias, dtype=dtype)])


def fit_steps(
    model: keras.Model,
    batches: int,
    inputs: int = 8,
    units: int = 6,
    lr: float = 0.0,
    recompile: bool = True,
    **compile_kw,
):
    """Train ``batches`` batches of one example with SGD(lr) and record the pruned kernel's zeros after each."""
    zeros: list[int] = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            zeros.append(int((kernel(model) == 0).sum()))

    if recompile:
        model.compile(keras.optimizers.SGD(lr), "mse", **compile_kw)
    x = np.random.default_rng(1).normal(size=(batches, inputs)).astype("float32")
    model.fit(
        x, np.zeros((batches, units), "float32"), batch_size=1, verbose=0, callbacks=[S.UpdatePruningStep(), Record()]
    )
    return zeros


def wrapper(model: keras.Model) -> S.PruneLowMagnitude:
    return next(layer for layer in model._flatten_layers(include_self=False) if isinstance(layer, S.PruneLowMagnitude))


def kernel(model: keras.Model) -> np.ndarray:
    return keras.ops.convert_to_numpy(wrapper(model).pruning_vars[0][0].value).astype(np.float64)


def mask_of(model: keras.Model) -> np.ndarray:
    return keras.ops.convert_to_numpy(wrapper(model).pruning_vars[0][1].value).astype(np.float64)


def assert_good_error(info: pytest.ExceptionInfo, *fragments: str) -> None:
    """An ste error naming the op, what was received, and a fix."""
    assert isinstance(info.value, ste.STEError), type(info.value)
    message = str(info.value)
    assert "ste.sparsity" in message, message
    assert "Fix" in message, message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


# -- schedules ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("begin,end,frequency", [(0, -1, 100), (3, 9, 3), (5, 5, 1), (0, 20, 7)])
def test_constant_should_prune_every_step(begin, end, frequency):
    schedule = S.ConstantSparsity(0.3, begin, end_step=end, frequency=frequency)
    for step in range(0, 40):
        should, sparsity = schedule(tf.constant(step, tf.int64))
        assert bool(should) == tfmot_should_prune(step, begin, end, frequency), step
        assert float(sparsity) == pytest.approx(0.3)


def test_constant_forever_with_end_minus_one():
    should, _ = S.ConstantSparsity(0.5, 0, end_step=-1, frequency=100)(tf.constant(10**9, tf.int64))
    assert bool(should)


@pytest.mark.parametrize(
    "s0,s1,begin,end,power,frequency",
    [(0.2, 0.8, 100, 110, 3, 2), (0.0, 0.9, 0, 4, 1, 1), (0.1, 0.5, 3, 30, 2.5, 4), (0.5, 0.5, 0, 10, 3, 1)],
)
def test_polynomial_every_step(s0, s1, begin, end, power, frequency):
    schedule = S.PolynomialDecay(s0, s1, begin, end, power=power, frequency=frequency)
    for step in range(max(0, begin - 3), end + 5):
        should, sparsity = schedule(tf.constant(step, tf.int64))
        assert bool(should) == tfmot_should_prune(step, begin, end, frequency), step
        assert float(sparsity) == pytest.approx(tfmot_poly(step, s0, s1, begin, end, power), abs=1e-6), step


def test_polynomial_tfmot_published_values():
    # TFMOT's pruning_schedule_test: PolynomialDecay(0.2, 0.8, 100, 110, 3, 2) at steps 100, 102, 105, 110.
    schedule = S.PolynomialDecay(0.2, 0.8, 100, 110, power=3, frequency=2)
    got = [float(schedule(tf.constant(step))[1]) for step in (100, 102, 105, 110)]
    np.testing.assert_allclose(got, [0.2, 0.4928, 0.725, 0.8], atol=1e-6)


def test_polynomial_int32_step_and_python_step():
    schedule = S.PolynomialDecay(0.0, 0.8, 0, 8, power=1, frequency=1)
    for step in (tf.constant(4, tf.int32), 4, np.int64(4)):
        assert float(schedule(step)[1]) == pytest.approx(0.4)


def test_schedule_config_round_trip_and_tfmot_format():
    """get_config is TFMOT's {"class_name", "config"} (pruning_schedule.py); from_config reads it and the bare
    arguments."""
    schedule = S.PolynomialDecay(0.1, 0.7, 2, 40, power=2, frequency=3)
    config = schedule.get_config()
    assert config == {
        "class_name": "PolynomialDecay",
        "config": {"initial_sparsity": 0.1, "final_sparsity": 0.7, "power": 2, "begin_step": 2, "end_step": 40,
                   "frequency": 3},
    }  # fmt: skip
    assert S.PolynomialDecay.from_config(config) == schedule
    assert S.PolynomialDecay.from_config(config["config"]) == schedule


# -- masks --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sparsity", [0.0, 0.1, 0.25, 0.5, 0.73, 0.9, 0.99])
@pytest.mark.parametrize("shape", [(7,), (5, 9), (3, 3, 4, 5)])
def test_magnitude_mask_exact_count_and_largest_kept(sparsity, shape):
    w = np.random.default_rng(3).normal(size=shape).astype("float32")
    mask, threshold = S.magnitude_mask(tf.constant(w), sparsity)
    mask = mask.numpy()
    np.testing.assert_array_equal(mask, np_magnitude_mask(w, sparsity))
    assert float(threshold) == pytest.approx(np.abs(w)[mask == 1].min())


def test_magnitude_mask_ties_broken_by_position():
    w = np.array([1.0, -1.0, 1.0, 1.0, 0.5, 2.0], "float32")
    mask, _ = S.magnitude_mask(tf.constant(w), 0.5)  # keep 3: 2.0 and the first two tied 1.0s
    np.testing.assert_array_equal(mask.numpy(), [1, 1, 0, 0, 0, 1])


@pytest.mark.parametrize("pooling", ["AVG", "MAX"])
@pytest.mark.parametrize("shape,block", [((6, 6), (2, 3)), ((5, 7), (2, 3)), ((9, 4), (4, 4)), ((3, 5), (1, 2))])
def test_block_mask_against_numpy(pooling, shape, block):
    w = np.random.default_rng(4).normal(size=shape).astype("float32")
    mask, _ = S.magnitude_mask(tf.constant(w), 0.5, block, pooling)
    np.testing.assert_array_equal(mask.numpy(), np_block_mask(w, 0.5, block, pooling))


@pytest.mark.parametrize("zeros,group", [(2, 4), (1, 4), (3, 4), (1, 2), (4, 8), (5, 16)])
def test_n_by_m_mask_group_by_group(zeros, group):
    w = np.random.default_rng(5).normal(size=(2 * group, 5)).astype("float32")
    mask = S.n_by_m_mask(tf.constant(w), zeros, group, -2).numpy()
    np.testing.assert_array_equal(mask, np_n_by_m(w, zeros, group, -2))
    assert ((mask.T.reshape(5, 2, group) == 0).sum(-1) == zeros).all()


# -- training: step counting and exact fractions -------------------------------------------------------------------


def test_first_batch_is_step_one_as_tfmot():
    # TFMOT 0.8.1 (run side by side, SGD(0), batch 1): PolynomialDecay(0, 0.9, 0, 4, power=1, frequency=1) on an
    # 8x6 kernel leaves 11, 22, 32, 43, 43, 43 zeros after the six batches: steps 1..6.
    model = S.prune_low_magnitude(dense(), S.PolynomialDecay(0.0, 0.9, 0, 4, power=1, frequency=1))
    zeros = fit_steps(model, 6)
    expected = [48 - kept(48, tfmot_poly(min(step, 4), 0.0, 0.9, 0, 4, 1)) for step in range(1, 7)]
    assert expected == [11, 22, 32, 43, 43, 43]
    assert zeros == expected
    assert int(wrapper(model).pruning_step.numpy()) == 6


def test_end_step_zero_never_prunes_as_tfmot():
    model = S.prune_low_magnitude(dense(), S.ConstantSparsity(0.5, 0, end_step=0, frequency=1))
    assert fit_steps(model, 4) == [0, 0, 0, 0]


@pytest.mark.parametrize("frequency", [1, 2, 3])
def test_exact_fraction_at_update_steps(frequency):
    schedule = S.PolynomialDecay(0.1, 0.8, 1, 9, power=3, frequency=frequency)
    model = S.prune_low_magnitude(dense(units=10, inputs=12), schedule)
    zeros = fit_steps(model, 11, inputs=12, units=10, lr=0.05)
    n, last = 120, 0
    for step, count in zip(range(1, 12), zeros):
        if tfmot_should_prune(step, 1, 9, frequency):
            last = n - kept(n, tfmot_poly32(step, 0.1, 0.8, 1, 9, 3))
            assert count == last, step
        else:
            assert count >= last, step  # masked gradient: pruned weights stay zero


def test_fit_without_callback_names_it_and_changes_nothing():
    model = S.prune_low_magnitude(dense(bias=True), S.ConstantSparsity(0.5, 0, frequency=1))
    model.compile(keras.optimizers.SGD(0.1), "mse")
    before = [w.numpy().copy() for w in model.weights]
    with pytest.raises(S.MissingCallbackError) as info:
        model.fit(np.ones((2, 8), "float32"), np.zeros((2, 6), "float32"), verbose=0)
    assert isinstance(info.value, ste.STEError)
    assert "UpdatePruningStep" in str(info.value) and "Fix" in str(info.value)
    for old, new in zip(before, model.weights):
        np.testing.assert_array_equal(old, new.numpy())
    assert int(model.optimizer.iterations.numpy()) == 0


# -- gradients ----------------------------------------------------------------------------------------------------


def one_sgd_step(gradient: str, decay: float | None, lr: float = 0.1):
    model = S.prune_low_magnitude(
        dense(units=5, inputs=8, seed=7), S.ConstantSparsity(0.5, 0, frequency=1), gradient=gradient, decay=decay
    )
    w0 = kernel(model)
    x = np.random.default_rng(8).normal(size=(3, 8)).astype("float32")
    c = np.random.default_rng(9).normal(size=(3, 5)).astype("float32")
    callback = S.UpdatePruningStep()
    callback.set_model(model)
    callback.on_train_begin()
    callback.on_train_batch_begin(0)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x, training=True) * c)
    grads = tape.gradient(loss, model.trainable_variables)
    keras.optimizers.SGD(lr).apply(grads, model.trainable_variables)
    m = np_magnitude_mask(w0, 0.5)
    dy = x.T.astype(np.float64) @ c.astype(np.float64)  # d loss / d (w·m)
    return kernel(model), w0, m, dy, lr


def test_masked_gradient_one_sgd_step_against_numpy():
    w1, w0, m, dy, lr = one_sgd_step("masked", None)
    np.testing.assert_allclose(w1, w0 * m - lr * dy * m, rtol=1e-5, atol=1e-6)
    assert (w1[m == 0] == 0).all()


@pytest.mark.parametrize("decay", [None, 0.3])
def test_sr_ste_gradient_one_sgd_step_against_numpy(decay):
    w1, w0, m, dy, lr = one_sgd_step("sr_ste", decay)
    rate = 2e-4 if decay is None else decay
    np.testing.assert_allclose(w1, w0 - lr * (dy + rate * (1 - m) * w0), rtol=1e-5, atol=1e-6)


def test_masked_op_second_order_against_finite_differences():
    w = tf.constant(np.random.default_rng(10).normal(size=(6,)), tf.float64)
    m = tf.constant([1, 0, 1, 1, 0, 1], tf.float64)

    def grad(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            y = tf.reduce_sum(S.apply_mask(v, m) ** 3)
        return tape.gradient(y, v)

    with tf.GradientTape() as outer:
        outer.watch(w)
        g = tf.reduce_sum(grad(w))
    hessian_sum = outer.gradient(g, w).numpy()
    eps = 1e-6
    fd = np.array([(np.sum(grad(w + eps * e)) - np.sum(grad(w - eps * e))) / (2 * eps) for e in np.eye(6)])
    np.testing.assert_allclose(hessian_sum, fd, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(hessian_sum, 6 * w.numpy() * m.numpy(), rtol=1e-10)


def test_sr_ste_second_order_against_finite_differences():
    w = tf.constant(np.random.default_rng(11).normal(size=(6,)), tf.float64)
    m = tf.constant([1, 0, 1, 1, 0, 1], tf.float64)

    def grad(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            y = tf.reduce_sum(S.sr_ste(v, m, decay=0.5) ** 3)
        return tape.gradient(y, v)

    np.testing.assert_allclose(  # the first derivative is the documented rule
        grad(w).numpy(), 3 * (w.numpy() * m.numpy()) ** 2 + 0.5 * (1 - m.numpy()) * w.numpy(), rtol=1e-12
    )
    with tf.GradientTape() as outer:
        outer.watch(w)
        g = tf.reduce_sum(grad(w))
    got = outer.gradient(g, w).numpy()
    eps = 1e-6
    fd = np.array([(np.sum(grad(w + eps * e)) - np.sum(grad(w - eps * e))) / (2 * eps) for e in np.eye(6)])
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-8)


# -- dtypes, policies, tf.function, XLA, strategies ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_every_float_dtype_prunes_exactly(dtype):
    model = S.prune_low_magnitude(dense(units=10, inputs=12, dtype=dtype), S.ConstantSparsity(0.75, 0, frequency=1))
    zeros = fit_steps(model, 2, inputs=12, units=10, lr=0.01)
    assert zeros == [90, 90]
    w = wrapper(model)
    assert w.pruning_vars[0][1].dtype == "bool" and w.pruning_vars[0][2].dtype == dtype  # the mask: one byte a weight
    assert model(np.ones((1, 12), "float32")).dtype == dtype


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_policy(policy):
    model = S.prune_low_magnitude(dense(units=10, inputs=12, dtype=policy), S.ConstantSparsity(0.75, 0, frequency=1))
    zeros = fit_steps(model, 2, inputs=12, units=10, lr=0.01)
    assert zeros == [90, 90]
    assert wrapper(model).pruning_vars[0][0].dtype == "float32"
    assert model(np.ones((1, 12), "float32")).dtype == policy.split("_")[1]


def test_custom_loop_in_tf_function():
    model = S.prune_low_magnitude(dense(units=10, inputs=12), S.PolynomialDecay(0.0, 0.6, 0, 3, power=1, frequency=1))
    callback = S.UpdatePruningStep()
    callback.set_model(model)
    callback.on_train_begin()
    optimizer = keras.optimizers.SGD(0.01)
    x = tf.constant(np.random.default_rng(2).normal(size=(4, 12)), tf.float32)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x, training=True) ** 2)
        optimizer.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)

    zeros = []
    for i in range(4):
        callback.on_train_batch_begin(i)
        step()
        zeros.append(int((kernel(model) == 0).sum()))
    assert zeros == [120 - kept(120, tfmot_poly(min(s, 3), 0.0, 0.6, 0, 3, 1)) for s in range(1, 5)]


def test_fit_with_jit_compile():
    model = S.prune_low_magnitude(dense(units=10, inputs=12), S.PolynomialDecay(0.0, 0.6, 0, 3, power=1, frequency=1))
    zeros = fit_steps(model, 4, inputs=12, units=10, lr=0.01, jit_compile=True)
    assert zeros == [120 - kept(120, tfmot_poly(min(s, 3), 0.0, 0.6, 0, 3, 1)) for s in range(1, 5)]


def test_mirrored_strategy_one_device_prunes_or_refuses_clearly():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        model = S.prune_low_magnitude(dense(units=10, inputs=12), S.ConstantSparsity(0.5, 0, frequency=1))
        try:
            zeros = fit_steps(model, 2, inputs=12, units=10, lr=0.01)
        except ste.STEError:
            return  # a clear refusal is allowed
    assert zeros == [60, 60]


# -- save, load, strip, TFLite --------------------------------------------------------------------------------------


def test_save_load_then_continue_training(tmp_path):
    schedule = S.PolynomialDecay(0.0, 0.8, 0, 6, power=1, frequency=1)
    model = S.prune_low_magnitude(dense(units=10, inputs=12), schedule)
    fit_steps(model, 3, inputs=12, units=10, lr=0.01)
    path = tmp_path / "pruned.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_array_equal(mask_of(loaded), mask_of(model))
    assert int(wrapper(loaded).pruning_step.numpy()) == 3
    assert wrapper(loaded).pruning_schedule == schedule
    zeros = fit_steps(loaded, 3, inputs=12, units=10, recompile=False)  # steps 4, 5, 6 (optimizer iterations restored)
    assert int(loaded.optimizer.iterations.numpy()) == 6
    assert zeros == [120 - kept(120, tfmot_poly(s, 0.0, 0.8, 0, 6, 1)) for s in (4, 5, 6)]


def test_strip_gives_plain_layers_with_zeros():
    model = S.prune_low_magnitude(dense(units=10, inputs=12, bias=True), S.ConstantSparsity(0.7, 0, frequency=1))
    fit_steps(model, 2, inputs=12, units=10, lr=0.05)
    expected = kernel(model) * mask_of(model)
    plain = S.strip_pruning(model)
    assert not any(isinstance(layer, S.PruneLowMagnitude) for layer in plain._flatten_layers())
    assert type(plain.layers[0]) is L.Dense
    np.testing.assert_array_equal(plain.layers[0].kernel.numpy(), expected)
    assert (expected == 0).sum() == 120 - kept(120, 0.7)
    x = np.random.default_rng(3).normal(size=(4, 12)).astype("float32")
    np.testing.assert_allclose(plain(x).numpy(), model(x).numpy(), rtol=1e-6)


def test_to_tflite_of_stripped_model_keeps_zeros():
    model = S.prune_low_magnitude(
        dense(units=8, inputs=16, bias=True), S.ConstantSparsity(0.5, 0, frequency=1), sparsity_m_by_n=(2, 4)
    )
    fit_steps(model, 1, inputs=16, units=8, lr=0.0)
    plain = S.strip_pruning(model)
    interpreter = tf.lite.Interpreter(model_content=ste.to_tflite(plain))
    interpreter.allocate_tensors()
    kernels = []
    for detail in interpreter.get_tensor_details():
        try:
            value = interpreter.get_tensor(detail["index"])
        except ValueError:
            continue
        if value.shape == (8, 16):
            kernels.append(value)
    assert kernels
    assert any(((k.reshape(8, 4, 4) == 0).sum(-1) >= 2).all() for k in kernels)


# -- layers and axes ------------------------------------------------------------------------------------------------


def train_layer(layer: keras.layers.Layer, input_shape: tuple[int, ...], **kwargs) -> S.PruneLowMagnitude:
    keras.utils.set_random_seed(0)
    inputs = keras.Input(input_shape)
    model = keras.Model(inputs, S.prune_low_magnitude(layer, S.ConstantSparsity(0.5, 0, frequency=1), **kwargs)(inputs))
    out_shape = model.output.shape[1:]
    pruned = wrapper(model)
    pruned._initial_for_test = pruned.pruning_vars[0][0].numpy().copy()  # SGD(0): the weight the mask is made of
    model.compile(keras.optimizers.SGD(0.0), "mse")
    model.fit(
        np.ones((1, *input_shape), "float32"),
        np.zeros((1, *out_shape), "float32"),
        verbose=0,
        callbacks=[S.UpdatePruningStep()],
    )
    return wrapper(model)


def test_conv2d_n_by_m_along_input_channels_as_tfmot():
    w = train_layer(L.Conv2D(4, 3), (6, 6, 8), sparsity_m_by_n=(2, 4))
    mask = w.pruning_vars[0][1].numpy()
    np.testing.assert_array_equal(mask, np_n_by_m(w._initial_for_test, 2, 4, -2))
    groups = np.moveaxis(mask, 2, -1).reshape(-1, 4)
    assert ((groups == 0).sum(-1) == 2).all()


@pytest.mark.parametrize(
    "layer,shape,axis",
    [
        (lambda: L.Dense(3), (8,), -2),
        (lambda: L.Conv1D(3, 2), (5, 8), -2),
        (lambda: L.Conv2DTranspose(8, 2), (3, 3, 4), -1),
        (lambda: L.SeparableConv2D(4, 3), (5, 5, 8), -2),
    ],
)
def test_n_by_m_axes(layer, shape, axis):
    w = train_layer(layer(), shape, sparsity_m_by_n=(2, 4))
    np.testing.assert_array_equal(w.pruning_vars[0][1].numpy(), np_n_by_m(w._initial_for_test, 2, 4, axis))


@pytest.mark.parametrize("layer,shape", [(lambda: L.DepthwiseConv2D(3), (5, 5, 8)), (lambda: L.Embedding(8, 4), (3,))])
def test_n_by_m_refused_where_no_input_channel_axis(layer, shape):
    with pytest.raises(ste.STEError) as info:
        S.prune_low_magnitude(layer(), sparsity_m_by_n=(2, 4))
        train_layer(layer(), shape, sparsity_m_by_n=(2, 4))
    assert_good_error(info, "sparsity_m_by_n")


@pytest.mark.parametrize(
    "layer,shape",
    [
        (lambda: L.DepthwiseConv2D(3), (5, 5, 4)),
        (lambda: L.Embedding(10, 6), (3,)),
        (lambda: L.Conv3D(2, 2), (3, 3, 3, 2)),
    ],
)
def test_other_layers_prune_half_by_magnitude(layer, shape):
    w = train_layer(layer(), shape)
    np.testing.assert_array_equal(w.pruning_vars[0][1].numpy(), np_magnitude_mask(w._initial_for_test, 0.5))


def test_shared_layer_stays_one_wrapper():
    shared = L.Dense(8)
    inputs = keras.Input((8,))
    model = keras.Model(inputs, shared(shared(inputs)))
    pruned = S.prune_low_magnitude(model)
    wrappers = [layer for layer in pruned._flatten_layers() if isinstance(layer, S.PruneLowMagnitude)]
    assert len(wrappers) == 1


def test_uncovered_layer_warns_once_and_strict_refuses():
    model = keras.Sequential([keras.Input((4, 3)), L.Bidirectional(L.SimpleRNN(5), name="both_ways"), L.Dense(2)])
    with pytest.warns(UserWarning, match="both_ways"):
        S.prune_low_magnitude(model)
    with pytest.raises(ste.errors.UnsupportedLayerError):
        S.prune_low_magnitude(model, strict=True)


# -- bad input ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [1.0, -0.1, 1.5, float("nan"), "0.5", True, None])
def test_constant_sparsity_outside_range(value):
    with pytest.raises(ste.STEError) as info:
        S.ConstantSparsity(value, 0)
    assert_good_error(info, "target_sparsity", repr(value))


@pytest.mark.parametrize("value", [1.0, -0.5])
def test_polynomial_sparsity_outside_range(value):
    with pytest.raises(ste.STEError) as info:
        S.PolynomialDecay(0.1, value, 0, 10)
    assert_good_error(info, "final_sparsity", repr(value))


@pytest.mark.parametrize("cls", ["constant", "polynomial"])
def test_end_step_before_begin_step(cls):
    with pytest.raises(ste.STEError) as info:
        if cls == "constant":
            S.ConstantSparsity(0.5, 10, end_step=5)
        else:
            S.PolynomialDecay(0.1, 0.5, 10, 5)
    assert_good_error(info, "end_step", "10")


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"begin_step": -1}, "begin_step"),
        ({"frequency": 0}, "frequency"),
        ({"frequency": 1.5}, "frequency"),
        ({"end_step": -7}, "end_step"),
        ({"begin_step": "0"}, "begin_step"),
    ],
)
def test_bad_steps_name_the_fix(kwargs, name):
    arguments = {"target_sparsity": 0.5, "begin_step": 0, **kwargs}
    with pytest.raises(ste.STEError) as info:
        S.ConstantSparsity(**arguments)
    assert_good_error(info, name)


def test_bad_power():
    with pytest.raises(ste.STEError) as info:
        S.PolynomialDecay(0.1, 0.5, 0, 10, power=0)
    assert_good_error(info, "power")


@pytest.mark.parametrize(
    "pattern",
    [
        (4, 2),
        (2, 2),
        (0, 4),
        (2, 4.0),
        "2:4",
        (2,),
    ],
)
def test_bad_n_by_m(pattern):
    model = dense()
    before = model.layers[0].kernel.numpy().copy()
    with pytest.raises(ste.STEError) as info:
        S.prune_low_magnitude(model, sparsity_m_by_n=pattern)
    assert_good_error(info, "sparsity_m_by_n")
    np.testing.assert_array_equal(model.layers[0].kernel.numpy(), before)


def test_channels_not_multiple_of_group():
    model = dense(inputs=6)
    with pytest.raises(ste.STEError) as info:
        S.prune_low_magnitude(model, sparsity_m_by_n=(2, 4))
    assert_good_error(info, "6", "multiple of 4")


def test_channels_not_multiple_of_group_unbuilt_layer_refused_before_training():
    layer = S.prune_low_magnitude(L.Dense(3), sparsity_m_by_n=(2, 4))
    with pytest.raises(ste.STEError) as info:
        layer(np.ones((1, 6), "float32"))
    assert_good_error(info, "multiple of 4")


def test_pruning_twice():
    pruned = S.prune_low_magnitude(dense())
    with pytest.raises(ste.STEError) as info:
        S.prune_low_magnitude(pruned)
    assert_good_error(info, "already pruned")
    with pytest.raises(ste.STEError) as info:
        S.prune_low_magnitude(wrapper(pruned))
    assert_good_error(info, "already pruned")


@pytest.mark.parametrize("layer", [lambda: L.Dropout(0.1), lambda: L.BatchNormalization(), lambda: L.ReLU()])
def test_layer_without_kernel(layer):
    with pytest.raises(ste.STEError) as info:
        S.prune_low_magnitude(layer())
    assert_good_error(info, "no kernel")


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"strict": "no"}, "strict"),
        ({"strict": 1}, "strict"),
        ({"pruning_schedule": "constant"}, "pruning_schedule"),
        ({"pruning_schedule": 0.5}, "pruning_schedule"),
        ({"block_size": (1,)}, "block_size"),
        ({"block_size": (0, 2)}, "block_size"),
        ({"block_pooling_type": "avg"}, "block_pooling_type"),
        ({"gradient": "sr-ste"}, "gradient"),
        ({"gradient": "sr_ste", "decay": -1.0}, "decay"),
        ({"decay": 0.1}, "decay"),
        ({"block_size": (2, 2), "sparsity_m_by_n": (2, 4)}, "block_size"),
    ],
)
def test_bad_arguments_name_the_fix(kwargs, name):
    model = dense()
    with pytest.raises(ste.STEError) as info:
        S.prune_low_magnitude(model, **kwargs)
    assert_good_error(info, name)


@pytest.mark.parametrize("value", [42, "dense", np.ones(3)])
def test_wrong_type_to_prune(value):
    with pytest.raises(ste.STEError) as info:
        S.prune_low_magnitude(value)
    assert_good_error(info, type(value).__name__)


def test_block_size_on_conv_kernel_refused():
    with pytest.raises(ste.STEError) as info:
        train_layer(L.Conv2D(4, 3), (5, 5, 4), block_size=(2, 2))
    assert_good_error(info, "block_size")


# -- TFMOT itself, side by side -------------------------------------------------------------------------------------

TFMOT_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import numpy as np, tf_keras as K, tensorflow_model_optimization as tfmot
    S = tfmot.sparsity.keras
    out = {}
    def run(key, w, input_shape, make, **kw):
        m = K.Sequential([K.layers.InputLayer(input_shape), make()])
        m.layers[0].set_weights([w])
        p = S.prune_low_magnitude(m, pruning_schedule=S.ConstantSparsity(0.5, 0, frequency=1), **kw)
        p.compile(K.optimizers.SGD(0.0), "mse")
        p.fit(np.ones((1,) + input_shape, "float32"), np.zeros((1,) + tuple(p.output_shape[1:]), "float32"),
              verbose=0, callbacks=[S.UpdatePruningStep()])
        out[key] = [v for v in p.layers[0].weights if "mask" in v.name][0].numpy().tolist()
    data = json.load(open(sys.argv[1]))
    w2 = np.array(data["w2"], "float32")
    for pool in ("AVG", "MAX"):
        run("block_" + pool, w2, (6,), lambda: K.layers.Dense(7, use_bias=False), block_size=(2, 3),
            block_pooling_type=pool)
    w6 = np.array(data["w6"], "float32")
    for pool in ("AVG", "MAX"):
        run("div_block_" + pool, w6, (6,), lambda: K.layers.Dense(6, use_bias=False), block_size=(2, 3),
            block_pooling_type=pool)
    w5 = np.array(data["w5"], "float32")
    for pool in ("AVG", "MAX"):
        run("odd_block_" + pool, w5, (5,), lambda: K.layers.Dense(7, use_bias=False), block_size=(2, 3),
            block_pooling_type=pool)
    run("conv_nm", np.array(data["w3"], "float32"), (6, 6, 8), lambda: K.layers.Conv2D(4, 3, use_bias=False),
        sparsity_m_by_n=(2, 4))
    run("dense", np.array(data["w4"], "float32"), (9,), lambda: K.layers.Dense(5, use_bias=False))
    json.dump(out, open(sys.argv[2], "w"))
    """
)


@pytest.fixture(scope="module")
def tfmot_masks(tmp_path_factory):
    venv = os.environ.get("STE_TFMOT_VENV")
    if not venv:
        pytest.skip("set STE_TFMOT_VENV to a virtual environment with TFMOT 0.8.1 and tf-keras")
    rng = np.random.default_rng(12)
    data = {
        "w2": rng.normal(size=(6, 7)).tolist(),
        "w5": rng.normal(size=(5, 7)).tolist(),
        "w3": rng.normal(size=(3, 3, 8, 4)).tolist(),
        "w4": rng.normal(size=(9, 5)).tolist(),
        "w6": rng.normal(size=(6, 6)).tolist(),
    }
    folder = tmp_path_factory.mktemp("tfmot")
    (folder / "in.json").write_text(json.dumps(data))
    (folder / "run.py").write_text(TFMOT_SCRIPT)
    python = Path(venv) / "bin" / "python"
    subprocess.run(
        [str(python), str(folder / "run.py"), str(folder / "in.json"), str(folder / "out.json")],
        check=True,
        capture_output=True,
        timeout=300,
    )
    out = json.loads((folder / "out.json").read_text())
    return {key: np.array(value) for key, value in data.items()}, {k: np.array(v) for k, v in out.items()}


def ste_mask(weight: np.ndarray, input_shape, make, **kwargs) -> np.ndarray:
    inputs = keras.Input(input_shape)
    layer = make()
    outputs = S.prune_low_magnitude(layer, S.ConstantSparsity(0.5, 0, frequency=1), **kwargs)(inputs)
    model = keras.Model(inputs, outputs)
    layer.kernel.assign(weight.astype("float32"))
    model.compile(keras.optimizers.SGD(0.0), "mse")
    model.fit(
        np.ones((1, *input_shape), "float32"),
        np.zeros((1, *outputs.shape[1:]), "float32"),
        verbose=0,
        callbacks=[S.UpdatePruningStep()],
    )
    return mask_of(model)


@pytest.mark.parametrize("pool", ["AVG", "MAX"])
def test_block_masks_match_tfmot_divisible(tfmot_masks, pool):
    data, out = tfmot_masks
    got = ste_mask(data["w6"], (6,), lambda: L.Dense(6, use_bias=False), block_size=(2, 3), block_pooling_type=pool)
    np.testing.assert_array_equal(got, out["div_block_" + pool])


@pytest.mark.parametrize("pool", ["AVG", "MAX"])
def test_block_masks_match_tfmot_divisible_rows(tfmot_masks, pool):
    data, out = tfmot_masks
    got = ste_mask(data["w2"], (6,), lambda: L.Dense(7, use_bias=False), block_size=(2, 3), block_pooling_type=pool)
    np.testing.assert_array_equal(got, out["block_" + pool])


@pytest.mark.parametrize("pool", ["AVG", "MAX"])
def test_block_masks_match_tfmot_odd_shape(tfmot_masks, pool):
    data, out = tfmot_masks
    got = ste_mask(data["w5"], (5,), lambda: L.Dense(7, use_bias=False), block_size=(2, 3), block_pooling_type=pool)
    np.testing.assert_array_equal(got, out["odd_block_" + pool])


def test_conv_n_by_m_matches_tfmot(tfmot_masks):
    data, out = tfmot_masks
    got = ste_mask(data["w3"], (6, 6, 8), lambda: L.Conv2D(4, 3, use_bias=False), sparsity_m_by_n=(2, 4))
    np.testing.assert_array_equal(got, out["conv_nm"])


def test_dense_mask_matches_tfmot(tfmot_masks):
    data, out = tfmot_masks
    got = ste_mask(data["w4"], (9,), lambda: L.Dense(5, use_bias=False))
    np.testing.assert_array_equal(got, out["dense"])


def test_multi_head_attention_projections_each_pruned_exactly():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((3, 8))
    outputs = L.MultiHeadAttention(2, 4)(inputs, inputs)
    model = S.prune_low_magnitude(keras.Model(inputs, outputs), S.ConstantSparsity(0.5, 0, frequency=1))
    model.compile(keras.optimizers.SGD(0.0), "mse")
    model.fit(
        np.ones((1, 3, 8), "float32"), np.zeros((1, 3, 8), "float32"), verbose=0, callbacks=[S.UpdatePruningStep()]
    )
    triples = wrapper(model).pruning_vars
    assert len(triples) == 4
    for weight, mask, _ in triples:
        n = int(np.prod(weight.shape))
        assert int((mask.numpy() == 0).sum()) == n - kept(n, 0.5)


def test_pruning_summaries_logs_each_mask_sparsity(tmp_path):
    from tensorflow.core.util import event_pb2

    model = S.prune_low_magnitude(dense(units=10, inputs=12), S.ConstantSparsity(0.7, 0, frequency=1))
    model.compile(keras.optimizers.SGD(0.0), "mse")
    model.fit(
        np.ones((2, 12), "float32"),
        np.zeros((2, 10), "float32"),
        batch_size=1,
        verbose=0,
        callbacks=[S.UpdatePruningStep(), S.PruningSummaries(str(tmp_path))],
    )
    values = {}
    for path in (tmp_path / "train").glob("events.out.tfevents.*"):
        for record in tf.data.TFRecordDataset(str(path)):
            event = event_pb2.Event.FromString(record.numpy())
            for value in event.summary.value:
                if value.tag.endswith("/sparsity"):
                    values[value.tag] = float(tf.make_ndarray(value.tensor))
    assert list(values.values()) == [pytest.approx((120 - kept(120, 0.7)) / 120)]


def test_nested_model_inner_layers_pruned_and_original_untouched():
    keras.utils.set_random_seed(0)
    inner = keras.Sequential([keras.Input((8,)), L.Dense(8)])
    inputs = keras.Input((8,))
    model = keras.Model(inputs, L.Dense(4)(inner(inputs)))
    before = [w.numpy().copy() for w in model.weights]
    pruned = S.prune_low_magnitude(model, S.ConstantSparsity(0.5, 0, frequency=1))
    wrappers = [layer for layer in pruned._flatten_layers() if isinstance(layer, S.PruneLowMagnitude)]
    assert len(wrappers) == 2
    pruned.compile(keras.optimizers.SGD(0.0), "mse")
    pruned.fit(np.ones((1, 8), "float32"), np.zeros((1, 4), "float32"), verbose=0, callbacks=[S.UpdatePruningStep()])
    for layer in wrappers:
        n = int(np.prod(layer.pruning_vars[0][0].shape))
        assert int((layer.pruning_vars[0][1].numpy() == 0).sum()) == n - kept(n, 0.5)
    for old, new in zip(before, model.weights):
        np.testing.assert_array_equal(old, new.numpy())


def test_to_tflite_of_an_unpruned_wrapper_names_strip_pruning():
    """Converting before ``strip_pruning`` would ship the float latent kernel beside its mask: refused, with the fix,
    as the unstripped clustered model is (tests/clustering/test_tfmot_parity.py)."""
    model = keras.Sequential([keras.Input((8,)), L.Dense(4)])
    pruned = S.prune_low_magnitude(model)
    with pytest.raises(ste.errors.ConversionError, match=r"strip_pruning\(model\)"):
        ste.to_tflite(pruned)
    ste.to_tflite(S.strip_pruning(pruned))  # the stripped model converts
