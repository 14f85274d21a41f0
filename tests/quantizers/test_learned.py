"""LSQ and PACT: forward values and the gradients of both inputs (x and the learned variable) against numpy."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
from ste.quantizers import LSQ, PACT


def with_grads(quantizer, x: np.ndarray, variable, dtype: tf.DType):
    xt = tf.constant(x, dtype=dtype)
    dy = (0.5 + 0.25 * (np.arange(x.size) % 7)).reshape(x.shape)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = quantizer(xt)
    dx, dv = tape.gradient(y, [xt, variable], output_gradients=tf.constant(dy, dtype))
    assert y.dtype == dtype and dx.dtype == dtype
    return y.numpy().astype(np.float64), dx.numpy().astype(np.float64), float(dv), dy


def np_lsq(x, s, q_n, q_p, dy):
    v = x / s
    y = np.round(np.clip(v, -q_n, q_p)) * s
    inside = (v > -q_n) & (v < q_p)
    ds_each = np.where(inside, np.round(v) - v, np.where(v <= -q_n, -q_n, q_p))
    return y, dy * inside, np.sum(dy * ds_each) / np.sqrt(x.size * q_p)


def make_lsq(bits: int, signed: bool, step: float) -> LSQ:
    q = LSQ(bits=bits, signed=signed)
    q.build(())
    q.step.assign(step)
    q.initialized.assign(1.0)
    return q


# x/s hits both range ends (−Q_N = −4, Q_P = 3 for signed 3 bits), the exact ties ±0.5, 1.5, 2.5, −3.5 and beyond
LSQ_GRID = np.array([-3.0, -2.0, -1.75, -1.25, -0.25, 0.0, 0.125, 0.25, 0.75, 1.0, 1.25, 1.5, 1.625, 4.0])


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32, tf.float64])
def test_lsq_signed_forward_and_both_gradients(dtype):
    q = make_lsq(bits=3, signed=True, step=0.5)
    y, dx, ds, dy = with_grads(q, LSQ_GRID, q.step, dtype)
    ey, edx, eds = np_lsq(LSQ_GRID, 0.5, 4, 3, dy)
    np.testing.assert_array_equal(y, ey)
    np.testing.assert_array_equal(dx, edx)
    np.testing.assert_allclose(ds, eds, rtol={tf.float16: 2e-3, tf.bfloat16: 1e-2}.get(dtype, 1e-6))
    # ties round half to even: x/s = 0.5 -> 0, 2.5 -> 2, -3.5 -> -4, 1.5 -> 2
    assert y[LSQ_GRID == 0.25][0] == 0.0 and y[LSQ_GRID == 1.25][0] == 1.0
    assert y[LSQ_GRID == -1.75][0] == -2.0 and y[LSQ_GRID == 0.75][0] == 1.0


def test_lsq_unsigned_forward_and_both_gradients():
    q = make_lsq(bits=2, signed=False, step=0.25)  # Q_N = 0, Q_P = 3
    x = np.array([-1.0, -0.25, 0.0, 0.1, 0.3, 0.5, 0.75, 0.8, 2.0])
    y, dx, ds, dy = with_grads(q, x, q.step, tf.float64)
    ey, edx, eds = np_lsq(x, 0.25, 0, 3, dy)
    np.testing.assert_allclose(y, ey, rtol=1e-12)
    np.testing.assert_array_equal(dx, edx)
    np.testing.assert_allclose(ds, eds, rtol=1e-6)  # the step variable is float32


def test_lsq_step_gradient_of_one_element_inside_the_range():
    # LSQ's d/ds is round(x/s) - x/s (not round(x/s), the derivative with round held fixed), scaled by 1/sqrt(N·Q_P)
    q = make_lsq(bits=4, signed=True, step=0.3)
    x = np.array([0.4])
    _, _, ds, dy = with_grads(q, x, q.step, tf.float64)
    v = 0.4 / 0.3
    np.testing.assert_allclose(ds, dy[0] * (round(v) - v) / np.sqrt(1 * 7), rtol=1e-6)


def test_lsq_initialises_the_step_on_the_first_call_only():
    x1 = np.array([[-1.0, 2.0], [0.5, -0.5]], np.float32)
    q = LSQ(bits=4)
    q(x1)
    np.testing.assert_allclose(float(q.step), 2 * np.mean(np.abs(x1)) / np.sqrt(7), rtol=1e-6)
    q(10 * x1)
    np.testing.assert_allclose(float(q.step), 2 * np.mean(np.abs(x1)) / np.sqrt(7), rtol=1e-6)


def test_lsq_initialises_in_a_training_graph_only():
    x = tf.constant([0.5, 1.5, 3.0])
    expected = 2 * np.mean([0.5, 1.5, 3.0]) / np.sqrt(7)
    q = LSQ(bits=3, signed=False)
    q.build(())
    tf.function(lambda x: q(x))(x)  # an inference graph only reads the step
    assert float(q.step) == 1.0 and float(q.initialized) == 0.0
    train = tf.function(lambda x: q(x, training=True))
    train(x)
    np.testing.assert_allclose(float(q.step), expected, rtol=1e-6)
    assert float(q.initialized) == 1.0
    train(x * 5)
    np.testing.assert_allclose(float(q.step), expected, rtol=1e-6)


def np_pact(x, alpha, n, dy):
    y = np.round(np.clip(x, 0, alpha) * n / alpha) * alpha / n
    return y, dy * ((x >= 0) & (x <= alpha)), np.sum(dy * (x >= alpha))


def make_pact(bits: int, alpha: float) -> PACT:
    q = PACT(bits=bits, alpha=alpha)
    q.build(())
    return q


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32, tf.float64])
def test_pact_forward_and_both_gradients(dtype):
    # alpha = n = 3 (2 bits): the levels are 0, 1, 2, 3 and x = 0.5, 1.5, 2.5 are exact ties (half to even)
    q = make_pact(bits=2, alpha=3.0)
    x = np.array([-2.0, -0.5, 0.0, 0.25, 0.5, 1.0, 1.5, 2.5, 2.75, 3.0, 3.5, 100.0])
    y, dx, dalpha, dy = with_grads(q, x, q.alpha, dtype)
    ey, edx, edalpha = np_pact(x, 3.0, 3, dy)
    np.testing.assert_array_equal(y, ey)
    np.testing.assert_array_equal(dx, edx)
    np.testing.assert_allclose(dalpha, edalpha, rtol=1e-6)
    assert y[x == 0.5][0] == 0.0 and y[x == 1.5][0] == 2.0 and y[x == 2.5][0] == 2.0


def test_pact_default_levels_on_random_inputs():
    q = make_pact(bits=4, alpha=6.0)
    x = np.random.default_rng(0).normal(2.0, 3.0, size=200)
    y, dx, dalpha, dy = with_grads(q, x, q.alpha, tf.float64)
    ey, edx, edalpha = np_pact(x, 6.0, 15, dy)
    np.testing.assert_allclose(y, ey, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(dx, edx)
    np.testing.assert_allclose(dalpha, edalpha, rtol=1e-12)


def test_pact_alpha_gradient_is_the_explicit_rule_not_autodiff_through_round():
    # autodiff with an STE only on round gives d/dalpha = round(x·n/α)/n - x/α inside (0, α); PACT's rule gives 0
    q = make_pact(bits=2, alpha=3.0)
    _, _, dalpha, _ = with_grads(q, np.array([0.7, 1.2, 2.2]), q.alpha, tf.float64)
    assert dalpha == 0.0


@pytest.mark.parametrize("run_eagerly", [True, False])
def test_learned_quantizers_train_with_fit(run_eagerly):
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).normal(size=(64, 8)).astype("float32")
    y = (x[:, :2] * 3.0).astype("float32")
    inputs = keras.Input((8,))
    h = ste.layers.QuantDense(16, kernel_quantizer="lsq(bits=4)")(inputs)
    h = PACT(bits=4, alpha=1.0, name="pact")(h)
    outputs = ste.layers.QuantDense(2, kernel_quantizer=LSQ(bits=3, name="lsq_out"))(h)
    model = keras.Model(inputs, outputs)
    model.compile(keras.optimizers.SGD(0.05), "mse", run_eagerly=run_eagerly, jit_compile=False)
    step = model.layers[1].kernel_quantizer.step
    model(x[:4])  # initialises both step sizes
    step_before, alpha_before = float(step), float(model.get_layer("pact").alpha)
    assert step_before == pytest.approx(2 * np.mean(np.abs(model.layers[1].kernel.numpy())) / np.sqrt(7), rel=1e-5)
    history = model.fit(x, y, epochs=3, batch_size=16, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert float(step) != step_before and float(model.get_layer("pact").alpha) != alpha_before


def test_invalid_parameters():
    with pytest.raises(ste.errors.ParameterError, match="bits"):
        LSQ(bits=1, signed=True)
    with pytest.raises(ste.errors.ParameterError, match="signed"):
        LSQ(signed=1)
    with pytest.raises(ste.errors.ParameterError, match="alpha"):
        PACT(alpha=0.0)


def test_learned_quantizers_train_under_mirrored_strategy():
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
    if len(devices) < 2:
        pytest.skip("needs the two logical CPU devices set up by conftest.py")
    strategy = tf.distribute.MirroredStrategy(devices)
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((8,)),
                ste.layers.QuantDense(4, input_quantizer="pact(bits=3, alpha=1.0)", kernel_quantizer="lsq(bits=3)"),
                ste.layers.QuantDense(2, kernel_quantizer="ste_sign", kernel_constraint="weight_clip"),
            ]
        )
        model.compile(keras.optimizers.Adam(0.01), "mse")
    rng = np.random.default_rng(0)
    history = model.fit(rng.normal(size=(32, 8)), rng.normal(size=(32, 2)), epochs=2, batch_size=16, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    first = model.layers[0]
    assert first.kernel_quantizer.initialized.numpy() == 1.0 and first.kernel_quantizer.step.numpy() != 1.0
    assert first.input_quantizer.alpha.numpy() != 1.0


def _two_replicas() -> tf.distribute.Strategy:
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
    if len(devices) < 2:
        pytest.skip("needs the two logical CPU devices set up by conftest.py")
    # ReductionToOneDevice: no collective ops (their keys could clash with another strategy in this process)
    return tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())


def _replica_step_and_gradient(quantizer: LSQ, strategy: tf.distribute.Strategy, shards, dys) -> tuple[float, float]:
    """Initialise in one training step, then the step gradient summed over replicas (as the optimizers do)."""
    x = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(shards[ctx.replica_id_in_sync_group])
    )
    dy = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(dys[ctx.replica_id_in_sync_group])
    )

    def gradient(xr: tf.Tensor, dyr: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            y = quantizer(xr, training=True)
        return tape.gradient(y, quantizer.step, output_gradients=dyr)

    @tf.function
    def run() -> tf.Tensor:
        return strategy.reduce("SUM", strategy.run(gradient, args=(x, dy)), axis=None)

    run()  # the first training step initialises the step (from the global batch)
    step = float(quantizer.step.numpy())
    return step, float(run())


def test_lsq_under_two_replicas_uses_the_global_batch():
    # each replica gets its half of a global batch: the initial step and the summed step gradient are those of
    # the whole batch on one device (numpy, N = global size); with the per-replica N the gradient is sqrt(2) larger
    strategy = _two_replicas()
    rng = np.random.default_rng(3)
    x = rng.normal(size=(8, 3)).astype(np.float32) * np.array([[1.0], [3.0]] * 4, np.float32)
    dy = rng.normal(size=x.shape).astype(np.float32)
    with strategy.scope():
        q = LSQ(bits=3)
        q.build(())
    step, ds = _replica_step_and_gradient(q, strategy, [x[:4], x[4:]], [dy[:4], dy[4:]])
    s = np.float32(2 * np.mean(np.abs(x.astype(np.float64))) / np.sqrt(3))
    assert step == s  # the same float32 as one device: summed in float64, whatever the split
    _, _, eds = np_lsq(x.astype(np.float64), float(s), 4, 3, dy.astype(np.float64))
    np.testing.assert_allclose(ds, eds, rtol=1e-5)
    local = 2 * np.mean(np.abs(x[:4])) / np.sqrt(3)
    assert abs(step - local) > 1e-3 * step  # the halves differ: the check above can tell a per-replica step


def test_lsq_of_a_replicated_weight_is_not_rescaled():
    # sharded=False (set by ste.layers for kernel quantizers): every replica quantizes the same tensor and the
    # strategy sums the replicas' partial gradients, so N is the tensor's own size and nothing is exchanged
    strategy = _two_replicas()
    rng = np.random.default_rng(4)
    w = rng.normal(size=(5, 2)).astype(np.float32)
    dy = rng.normal(size=w.shape).astype(np.float32)
    with strategy.scope():
        q = LSQ(bits=4, sharded=False)
        q.build(())
    step, ds = _replica_step_and_gradient(q, strategy, [w, w], [0.25 * dy, 0.75 * dy])
    s = np.float32(2 * np.mean(np.abs(w.astype(np.float64))) / np.sqrt(7))
    assert step == s
    _, _, eds = np_lsq(w.astype(np.float64), float(s), 8, 7, dy.astype(np.float64))
    np.testing.assert_allclose(ds, eds, rtol=1e-5)


def test_quantized_layers_mark_their_lsq_kernel_quantizers_as_replicated():
    layer = ste.layers.QuantDense(3, input_quantizer="lsq(bits=4)", kernel_quantizer="lsq(bits=4)")
    assert layer.input_quantizer.sharded and not layer.kernel_quantizer.sharded
    restored = LSQ.from_config(layer.kernel_quantizer.get_config())
    assert restored.sharded is False
    with pytest.raises(ste.errors.ParameterError, match="sharded"):
        LSQ(sharded="no")
