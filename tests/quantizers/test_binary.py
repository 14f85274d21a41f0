"""Sign, Heaviside, Ternary and MagnitudeAwareSign against numpy formulas, in every float dtype."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import ste
from ste.quantizers import Heaviside, MagnitudeAwareSign, Sign, Ternary

FLOATS = [tf.float16, tf.bfloat16, tf.float32, tf.float64]
# 0, ±clip (1), just inside/outside the clip, large magnitudes (exact in every dtype)
GRID = np.array([-300.0, -2.0, -1.0078125, -1.0, -0.5, -0.0078125, 0.0, 0.0078125, 0.5, 1.0, 1.0078125, 2.0, 300.0])


def np_sign(x: np.ndarray) -> np.ndarray:
    return np.where(x >= 0, 1.0, -1.0)


@pytest.mark.parametrize("dtype", FLOATS)
def test_sign_forward_and_clipped_gradient(run, dtype):
    y, grad, dy = run(Sign(), GRID, dtype)
    np.testing.assert_array_equal(y, np_sign(GRID))
    np.testing.assert_array_equal(grad, dy * (np.abs(GRID) <= 1.0))
    assert y[GRID == 0.0][0] == 1.0  # sign(0) = +1


@pytest.mark.parametrize("dtype", [tf.float16, tf.float32])
def test_sign_with_a_smooth_surrogate(run, dtype):
    beta = 4.0
    y, grad, dy = run(Sign(surrogate=f"sigmoid_surrogate(beta={beta})"), GRID, dtype)
    s = 1.0 / (1.0 + np.exp(-np.clip(beta * GRID, -50, 50)))
    np.testing.assert_array_equal(y, np_sign(GRID))
    tol = 2e-3 if dtype == tf.float16 else 1e-6
    np.testing.assert_allclose(grad, dy * beta * s * (1 - s), rtol=tol, atol=tol)


def test_sign_surrogate_forms_are_equivalent():
    x = tf.constant(GRID, tf.float32)
    expected = None
    for surrogate in [
        "straight_through(clip=0.5)",
        {"name": "straight_through", "params": {"clip": 0.5}},
        ste.registry.get("straight_through", clip=0.5),
    ]:
        q = Sign(surrogate=surrogate)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = q(x)
        grad = tape.gradient(y, x).numpy()
        np.testing.assert_array_equal(grad, np.abs(GRID) <= 0.5)
        expected = grad if expected is None else expected
        np.testing.assert_array_equal(grad, expected)


@pytest.mark.parametrize("dtype", FLOATS)
def test_heaviside_forward_and_gradient(run, dtype):
    y, grad, dy = run(Heaviside(), GRID, dtype)
    np.testing.assert_array_equal(y, (GRID > 0).astype(float))
    assert y[GRID == 0.0][0] == 0.0  # Heaviside(0) = 0
    np.testing.assert_array_equal(grad, dy * (np.abs(GRID) <= 1.0))


@pytest.mark.parametrize("dtype", FLOATS)
def test_ternary_fixed_threshold(run, dtype):
    delta = 0.25
    grid = np.array([-2.0, -1.0, -0.5, -0.25, -0.2421875, -0.125, 0.0, 0.125, 0.2421875, 0.25, 0.5, 1.0, 2.0])
    y, grad, dy = run(Ternary(threshold=delta), grid, dtype)
    expected = np.where(grid >= delta, 1.0, np.where(grid <= -delta, -1.0, 0.0))
    np.testing.assert_array_equal(y, expected)
    assert y[grid == delta][0] == 1.0 and y[grid == -delta][0] == -1.0 and y[grid == 0][0] == 0.0
    np.testing.assert_array_equal(grad, dy * (np.abs(grid) <= 1.0))


@pytest.mark.parametrize("dtype", [tf.float16, tf.float32, tf.float64])
def test_ternary_weight_networks_threshold(run, dtype):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 8)).astype(dtype.as_numpy_dtype).astype(np.float64)
    delta = 0.7 * np.mean(np.abs(x))
    keep = np.abs(np.abs(x) - delta) > 1e-2  # stay clear of the threshold (it is rounded to the dtype)
    y, grad, dy = run(Ternary(ternary_weight_networks=True), x, dtype)
    expected = np.sign(np.sign(x + delta) + np.sign(x - delta))
    np.testing.assert_array_equal(y[keep], expected[keep])
    assert set(np.unique(y)) <= {-1.0, 0.0, 1.0}
    np.testing.assert_array_equal(grad, dy * (np.abs(x) <= 1.0))


@pytest.mark.parametrize("dtype", FLOATS)
def test_magnitude_aware_sign(run, dtype):
    # a (3, 4) kernel: one scale per output column, mean of abs over the rows
    x = np.array([[-2.0, 0.0, 0.5, -0.25], [1.0, -0.5, 0.75, 3.0], [0.25, 0.5, -1.5, 0.0]])
    scale = np.mean(np.abs(x), axis=0)
    y, grad, dy = run(MagnitudeAwareSign(), x, dtype)
    rtol = {tf.float16: 1e-3, tf.bfloat16: 8e-3}.get(dtype, 1e-7)
    np.testing.assert_allclose(y, scale * np_sign(x), rtol=rtol)
    np.testing.assert_allclose(grad, dy * scale * (np.abs(x) <= 1.0), rtol=rtol)


def test_magnitude_aware_sign_of_a_conv_kernel_scales_per_output_channel(run):
    x = np.random.default_rng(1).normal(size=(3, 3, 2, 5))
    y, grad, dy = run(MagnitudeAwareSign(surrogate="straight_through(clip=2.0)"), x, tf.float64)
    scale = np.mean(np.abs(x), axis=(0, 1, 2))
    np.testing.assert_allclose(y, scale * np_sign(x), rtol=1e-12)
    np.testing.assert_allclose(grad, dy * scale * (np.abs(x) <= 2.0), rtol=1e-12)


def test_quantizers_are_ste_ops_with_readable_reprs():
    q = Sign(surrogate="sigmoid_surrogate(beta=2.0)")
    assert isinstance(q.op, ste.STEFunction)
    assert repr(q.op) == "ste.forward(binary_sign).backward(sigmoid_surrogate(beta=2.0))"
    assert repr(q) == "Sign(surrogate='sigmoid_surrogate(beta=2.0)')"
    assert q.precision == 1 and Ternary().precision == 2


def test_quantizers_work_in_tf_function_and_under_xla():
    q = Ternary(threshold=0.5)
    x = tf.constant([-1.0, -0.5, 0.0, 0.4, 0.5, 2.0])

    @tf.function(jit_compile=True)
    def f(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = q(x)
        return y, tape.gradient(y, x)

    y, grad = f(x)
    np.testing.assert_array_equal(y.numpy(), [-1, -1, 0, 0, 1, 1])
    np.testing.assert_array_equal(grad.numpy(), [1, 1, 1, 1, 1, 0])


def test_invalid_parameters_raise_ste_errors():
    with pytest.raises(ste.errors.ParameterError, match="threshold"):
        Ternary(threshold=-0.1)
    with pytest.raises(ste.errors.ParameterError, match="ternary_weight_networks"):
        Ternary(ternary_weight_networks="yes")
    with pytest.raises(ste.errors.UnknownSurrogateError, match="straight_throug"):
        Sign(surrogate="straight_throug")


@pytest.mark.parametrize("jit", [False, True])
def test_magnitude_aware_sign_with_unknown_rank_is_per_channel(jit: bool) -> None:
    """tf.function(input_signature=[TensorSpec(None)]): the same per-channel scale as eager mode (issue 11.4)."""
    q = MagnitudeAwareSign()
    traced = tf.function(q, input_signature=[tf.TensorSpec(None, tf.float32)], jit_compile=jit)
    x = np.array([[1.0, -4.0], [3.0, 2.0]], np.float32)
    scale = np.mean(np.abs(x), axis=0)  # [2, 3]
    np.testing.assert_array_equal(traced(tf.constant(x)).numpy(), scale * np.where(x >= 0, 1.0, -1.0))
    np.testing.assert_array_equal(traced(tf.constant(x)).numpy(), q(tf.constant(x)).numpy())
    for other in (np.float32(-3.0), np.array([1.0, -2.0], np.float32), np.arange(-12.0, 12.0, 1.0).reshape(2, 3, 4)):
        np.testing.assert_array_equal(traced(tf.constant(other, tf.float32)).numpy(), q(tf.constant(other)).numpy())
