"""larq's function forms (``ste.quantizers.ste_sign(x)`` ...) and ``NoOp``: values and gradients against numpy
transcriptions of larq 0.14's formulas (REFERENCE.md §2; larq/quantizers.py), with larq's keyword names."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
from ste import quantizers as q

from .conftest import FLOATS

GRID = np.array([-4.0, -1.5, -1.0, -0.75, -0.5, -0.25, -0.05, 0.0, 0.05, 0.25, 0.5, 0.75, 1.0, 1.5, 4.0])


def larq_sign(x):
    return np.sign(np.sign(x) + 0.1)


def clipped(x, dy, clip_value):
    return dy if clip_value is None else np.where(np.abs(x) <= clip_value, dy, 0.0)


@pytest.mark.parametrize("clip_value", [1.0, 0.5, None])
def test_ste_sign(run, clip_value):
    y, grad, dy = run(lambda x: q.ste_sign(x, clip_value=clip_value), GRID, tf.float32)
    np.testing.assert_array_equal(y, larq_sign(GRID))
    np.testing.assert_array_equal(grad, clipped(GRID, dy, clip_value))


@pytest.mark.parametrize("dtype", FLOATS)
def test_ste_sign_default_clip_in_every_dtype(run, dtype):
    y, grad, dy = run(q.ste_sign, GRID, dtype)
    np.testing.assert_array_equal(y, larq_sign(GRID))
    np.testing.assert_array_equal(grad, clipped(GRID, dy, 1.0))


@pytest.mark.parametrize("dtype", FLOATS)
def test_approx_sign(run, dtype):
    y, grad, dy = run(q.approx_sign, GRID, dtype)
    np.testing.assert_array_equal(y, larq_sign(GRID))
    np.testing.assert_allclose(grad, np.where(np.abs(GRID) <= 1.0, (1 - np.abs(GRID)) * 2 * dy, 0.0), rtol=1e-2)


@pytest.mark.parametrize("beta", [5.0, 2.0])
def test_swish_sign(run, beta):
    y, grad, dy = run(lambda x: q.swish_sign(x, beta=beta), GRID, tf.float64)
    bx = beta * GRID
    np.testing.assert_array_equal(y, larq_sign(GRID))
    np.testing.assert_allclose(
        grad, dy * beta * (2 - bx * np.tanh(bx * 0.5)) / (1 + np.cosh(bx)), rtol=1e-10, atol=1e-14
    )


@pytest.mark.parametrize("clip_value", [1.0, 0.25])
def test_ste_heaviside(run, clip_value):
    y, grad, dy = run(lambda x: q.ste_heaviside(x, clip_value=clip_value), GRID, tf.float32)
    np.testing.assert_array_equal(y, np.sign(np.maximum(GRID, 0.0)))
    np.testing.assert_array_equal(grad, clipped(GRID, dy, clip_value))


@pytest.mark.parametrize(("threshold_value", "clip_value"), [(0.05, 1.0), (0.25, 0.5)])
def test_ste_tern(run, threshold_value, clip_value):
    fn = lambda x: q.ste_tern(  # noqa: E731
        x, threshold_value=threshold_value, ternary_weight_networks=False, clip_value=clip_value
    )
    y, grad, dy = run(fn, GRID, tf.float32)
    t = threshold_value
    np.testing.assert_array_equal(y, np.sign(np.sign(GRID + t) + np.sign(GRID - t)))
    np.testing.assert_array_equal(grad, clipped(GRID, dy, clip_value))


def test_ste_tern_ternary_weight_networks(run):
    x = np.random.default_rng(3).normal(size=50)
    y, grad, dy = run(lambda v: q.ste_tern(v, ternary_weight_networks=True), x, tf.float64)
    d = 0.7 * np.sum(np.abs(x)) / x.size
    np.testing.assert_array_equal(y, np.sign(np.sign(x + d) + np.sign(x - d)))
    np.testing.assert_array_equal(grad, clipped(x, dy, 1.0))


@pytest.mark.parametrize("clip_value", [1.0, 0.5])
def test_magnitude_aware_sign(run, clip_value):
    x = np.random.default_rng(4).normal(size=(3, 3, 4, 6))
    y, grad, dy = run(lambda v: q.magnitude_aware_sign(v, clip_value=clip_value), x, tf.float64)
    scale = np.mean(np.abs(x), axis=(0, 1, 2))
    np.testing.assert_allclose(y, scale * larq_sign(x), rtol=1e-12)
    np.testing.assert_allclose(grad, scale * clipped(x, dy, clip_value), rtol=1e-12)


@pytest.mark.parametrize("k_bit", [1, 2, 4])
def test_dorefa_quantizer_activations(run, k_bit):
    n = 2**k_bit - 1
    x = np.linspace(-0.5, 1.5, 41)
    y, grad, dy = run(lambda v: q.dorefa_quantizer(v, k_bit=k_bit, mode="activations"), x, tf.float64)
    np.testing.assert_allclose(y, np.round(np.clip(x, 0.0, 1.0) * n) / n, atol=1e-12)
    np.testing.assert_array_equal(grad, np.where((x >= 0) & (x <= 1), dy, 0.0))


def test_dorefa_quantizer_weights(run):
    x = np.random.default_rng(5).normal(size=30)
    y, grad, dy = run(lambda v: q.dorefa_quantizer(v, k_bit=2, mode="weights"), x, tf.float64)
    t = np.tanh(x)
    m = np.max(np.abs(t))
    np.testing.assert_allclose(y, 2 * (np.round((t / (2 * m) + 0.5) * 3) / 3) - 1, atol=1e-12)
    np.testing.assert_allclose(grad, dy * (1 - t**2) / m, rtol=1e-10)


def test_function_forms_reject_bad_arguments_with_ste_errors():
    with pytest.raises(ste.ParameterError, match="clip_value"):
        q.ste_sign(GRID, clip_value=-1.0)
    with pytest.raises(ste.ParameterError, match="mode"):
        q.dorefa_quantizer(GRID, mode="weight")


def test_function_form_inside_a_keras_activation_layer_and_tf_function():
    layer = keras.layers.Activation(q.approx_sign)
    x = tf.constant([[-0.5, 0.0, 2.0]])
    np.testing.assert_array_equal(layer(x).numpy(), [[-1.0, 1.0, 1.0]])
    np.testing.assert_array_equal(tf.function(q.ste_sign)(x).numpy(), [[-1.0, 1.0, 1.0]])


@pytest.mark.parametrize("dtype", FLOATS)
def test_noop_is_the_identity_with_a_declared_precision(run, dtype):
    y, grad, dy = run(q.NoOp(precision=1), GRID, dtype)
    np.testing.assert_array_equal(y, GRID.astype(dtype.as_numpy_dtype).astype(np.float64))
    np.testing.assert_array_equal(grad, dy)
    assert q.NoOp(precision=4).precision == 4
    assert q.get("noop(precision=8)").precision == 8


def test_noop_serializes_and_rejects_a_bad_precision():
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(q.NoOp(precision=2)))
    assert isinstance(restored, q.NoOp) and restored.precision == 2
    for bad in (0, 33, 1.5, True, None):
        with pytest.raises(ste.ParameterError, match="precision"):
            q.NoOp(precision=bad)


def test_noop_kernel_counts_at_its_precision_in_the_layer():
    layer = ste.layers.QuantDense(4, kernel_quantizer=q.NoOp(precision=1), kernel_constraint="weight_clip")
    layer.build((None, 3))
    assert layer.kernel_precisions == {"kernel": 1}
    np.testing.assert_array_equal(layer.quantized_kernel.numpy(), layer.kernel.numpy())


def test_summary_counts_a_noop_kernel_at_its_declared_precision():
    model = keras.Sequential(
        [keras.Input((3,)), ste.layers.QuantDense(4, kernel_quantizer=q.NoOp(precision=1), use_bias=False)]
    )
    (layer,) = ste.summary(model, print_fn=None).layers
    assert layer.kernel_bits == (1,) and layer.params == {1: 12}
