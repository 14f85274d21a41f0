"""ste's fake-quantization op against an independent numpy formula and against TensorFlow's own op and gradient."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import ste
from ste.qat import fake_quant_op

from .helpers import numpy_fake_quant

FLOATS = [tf.float16, tf.bfloat16, tf.float32, tf.float64]


@pytest.mark.parametrize("narrow_range", [False, True])
@pytest.mark.parametrize("dtype", FLOATS)
def test_values_match_the_numpy_formula(dtype, narrow_range):
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 5, size=(64, 5))
    xt = tf.constant(x, dtype)
    expected, _, scale = numpy_fake_quant(np.asarray(tf.cast(xt, tf.float64)), -2.3, 3.7, narrow_range=narrow_range)
    got = fake_quant_op(xt, tf.constant(-2.3), tf.constant(3.7), narrow_range=narrow_range)
    assert got.dtype == dtype
    diff = np.abs(np.asarray(tf.cast(got, tf.float64)) - expected)
    if dtype in (tf.float32, tf.float64):
        assert diff.max() < 1e-5
    else:  # computed in the low-precision dtype: an input near a rounding tie may land on the next level
        level = 0.01 * np.abs(expected).max()  # the dtype's own rounding of a level
        assert diff.max() <= 1.01 * scale + level and np.mean(diff <= level) >= 0.9


def test_float32_is_tensorflows_op_exactly():
    x = tf.random.stateless_uniform([1000], seed=[1, 2], minval=-8, maxval=8)
    ours = fake_quant_op(x, tf.constant(-6.0), tf.constant(6.0))
    theirs = tf.quantization.fake_quant_with_min_max_vars(x, -6.0, 6.0)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("dtype", FLOATS)
def test_gradient_is_the_clipped_straight_through_estimator(dtype):
    rng = np.random.default_rng(1)
    x = rng.uniform(-4, 4, size=(200,))
    dy = rng.normal(size=(200,))
    _, inside, _ = numpy_fake_quant(x, -1.5, 2.5)
    xt, low, high = tf.constant(x, dtype), tf.constant(-1.5), tf.constant(2.5)
    with tf.GradientTape() as tape:
        tape.watch([xt, low, high])
        y = fake_quant_op(xt, low, high)
    dx, dlow, dhigh = tape.gradient(y, [xt, low, high], output_gradients=tf.constant(dy, dtype))
    atol = 2e-2 if dtype in (tf.float16, tf.bfloat16) else 1e-6
    dy_cast = np.asarray(tf.cast(tf.constant(dy, dtype), tf.float64))
    np.testing.assert_allclose(np.asarray(tf.cast(dx, tf.float64)), dy_cast * inside, atol=atol)
    below = x < -1.5
    np.testing.assert_allclose(float(dlow), dy_cast[below & ~inside].sum(), rtol=1e-2, atol=atol)
    np.testing.assert_allclose(float(dhigh), dy_cast[(x > 2.5) & ~inside].sum(), rtol=1e-2, atol=atol)


def test_float32_gradient_is_tensorflows_registered_gradient():
    x = tf.random.stateless_uniform([500], seed=[3, 4], minval=-8, maxval=8)
    low, high = tf.constant(-3.0), tf.constant(5.0)
    weights = tf.random.stateless_normal([500], seed=[5, 6])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([x, low, high])
        ours = fake_quant_op(x, low, high) * weights
        theirs = tf.quantization.fake_quant_with_min_max_vars(x, low, high) * weights
    for a, b in zip(tape.gradient(ours, [x, low, high]), tape.gradient(theirs, [x, low, high])):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)


@pytest.mark.parametrize("jit", [False, True])
def test_per_channel_under_tf_function_and_xla(jit):
    rng = np.random.default_rng(2)
    w = rng.normal(size=(3, 3, 4, 6)).astype(np.float32)
    m = np.abs(w).max(axis=(0, 1, 2))
    expected, inside, _ = numpy_fake_quant(w, -m, m, narrow_range=True)

    @tf.function(jit_compile=jit)
    def run(w):
        with tf.GradientTape() as tape:
            tape.watch(w)
            y = fake_quant_op(w, tf.constant(-m), tf.constant(m), narrow_range=True)
        return y, tape.gradient(y, w)

    y, g = run(tf.constant(w))
    np.testing.assert_allclose(y.numpy(), expected, atol=1e-6)
    np.testing.assert_array_equal(g.numpy(), inside.astype(np.float32))


def test_weight_quantizer_is_symmetric_narrow_range_per_channel():
    rng = np.random.default_rng(3)
    w = rng.normal(size=(3, 3, 5, 2)).astype(np.float32)  # a depthwise kernel: channel = in·multiplier
    got = ste.qat.WeightFakeQuant(channel_axes=2)(w).numpy().reshape(3, 3, 10)
    m = np.abs(w.reshape(3, 3, 10)).max(axis=(0, 1))
    levels = got / (m / 127)
    np.testing.assert_allclose(levels, np.round(levels), atol=1e-3)  # integers in [−127, 127] times m/127
    assert np.abs(np.round(levels)).max() == 127


def test_activation_quantizer_follows_tfmots_moving_average():
    q = ste.qat.ActivationFakeQuant()
    x = np.array([[-1.0, 0.5, 3.0]], np.float32)
    q(x, training=True)
    # TFMOT: min ← 0.999·(−6) + 0.001·min(−1, 0); max ← 0.999·6 + 0.001·max(3, 0)
    np.testing.assert_allclose([float(q.min.numpy()), float(q.max.numpy())], [-6 * 0.999 - 0.001, 6 * 0.999 + 0.003])
    q(x, training=False)
    assert float(q.max.numpy()) == pytest.approx(6 * 0.999 + 0.003)


def test_activation_quantizer_gradient_is_tfmots_straight_through_on_the_moved_range():
    """TFMOT assigns the moving average to its variables and fake-quantizes with them, so x's gradient is
    dy·1[min' <= x <= max'] on the nudged new range: the batch's min and max pass no gradient (they once did,
    (1 − decay)·Σ dy outside the range, to the extreme elements)."""
    q = ste.qat.ActivationFakeQuant(initial_min=-1.0, initial_max=1.0)
    x = tf.constant(np.random.default_rng(4).normal(scale=3.0, size=(4, 64)).astype(np.float32))
    dy = tf.constant(np.random.default_rng(5).uniform(0.5, 1.5, size=(4, 64)).astype(np.float32))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = q(x, training=True)
    got = tape.gradient(y, x, output_gradients=dy).numpy()
    lo, hi = float(q.min.numpy()), float(q.max.numpy())
    scale = (hi - lo) / 255.0
    zero = np.clip(np.round(-lo / scale), 0, 255)  # TensorFlow's nudge (-lo/scale > 0: half away from zero)
    n_min, n_max = -zero * scale, (255 - zero) * scale
    inside = (x.numpy() >= n_min) & (x.numpy() <= n_max)
    assert 0 < inside.sum() < inside.size  # some elements outside the range: the case that differed
    np.testing.assert_allclose(got, np.where(inside, dy.numpy(), 0.0), rtol=1e-6, atol=0)


@pytest.mark.parametrize(
    "kwargs",
    [{"bits": 1}, {"ema_decay": 1.5}, {"initial_min": 1.0}, {"narrow_range": "yes"}],
)
def test_invalid_parameters_raise_ste_errors(kwargs):
    with pytest.raises(ste.ParameterError):
        ste.qat.ActivationFakeQuant(**kwargs)
