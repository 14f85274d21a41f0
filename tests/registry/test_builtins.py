"""The core built-ins against independent numpy formulas, in every float dtype, on a grid with 0, ±clip, large |x|."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import ste
from tests.helpers import FLOAT_DTYPES, TOLERANCE, as_float64


def _grid(dtype: tf.DType) -> np.ndarray:
    big = float(dtype.max)
    values = [-big, -1e4, -60.0, -2.0, -1.0, -0.999, -0.5, -1e-30, 0.0, 1e-30, 0.5, 0.999, 1.0, 2.0, 60.0, 1e4, big]
    return as_float64(tf.cast(tf.constant(values, tf.float64), dtype))  # the values as the dtype represents them


def _sigmoid(z: np.ndarray) -> np.ndarray:
    # numpy reference, written independently of ste: split by sign so exp never sees a large positive number
    out = np.empty_like(z)
    pos = z >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-z[pos]))
    ez = np.exp(z[~pos])
    out[~pos] = ez / (1.0 + ez)
    return out


REFERENCES = {
    "identity": lambda x: np.ones_like(x),
    "straight_through(clip=1.0)": lambda x: (np.abs(x) <= 1.0).astype(np.float64),
    "straight_through(clip=0.5)": lambda x: (np.abs(x) <= 0.5).astype(np.float64),
    "straight_through(clip=None)": lambda x: np.ones_like(x),
    "zero": lambda x: np.zeros_like(x),
    "sigmoid_surrogate": lambda x: _sigmoid(x) * _sigmoid(-x),
    "sigmoid_surrogate(beta=4.0)": lambda x: 4.0 * _sigmoid(4.0 * x) * _sigmoid(-4.0 * x),
}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("spec", sorted(REFERENCES))
def test_derivative_matches_numpy(spec: str, dtype: tf.DType) -> None:
    surrogate = ste.registry.get(spec)
    x = _grid(dtype)
    with np.errstate(over="ignore"):
        expected = REFERENCES[spec](x)
    got = surrogate.derivative(tf.cast(tf.constant(x), dtype))
    assert got.dtype == dtype
    got64 = as_float64(got)
    assert np.all(np.isfinite(got64))
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(got64, expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("spec", sorted(REFERENCES))
def test_rule_vjp_is_dy_times_derivative(spec: str, dtype: tf.DType) -> None:
    x = _grid(dtype)
    dy = np.linspace(-3.0, 3.0, x.size)
    op = ste.forward(tf.sign).backward(spec)
    xt = tf.cast(tf.constant(x), dtype)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = op(xt)
    grad = tape.gradient(y, xt, output_gradients=tf.cast(dy, dtype))
    assert grad.dtype == dtype
    with np.errstate(over="ignore"):
        expected = as_float64(tf.cast(dy, dtype)) * REFERENCES[spec](x)
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(as_float64(grad), expected, rtol=tol, atol=tol)


def test_zero_gives_a_zero_tensor_not_none() -> None:
    op = ste.forward(tf.sign).backward("zero")
    x = tf.constant([[1.0, -2.0]])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = op(x)
    grad = tape.gradient(y, x, output_gradients=tf.constant([[np.inf, np.nan]], tf.float32))
    assert grad is not None
    np.testing.assert_array_equal(grad.numpy(), [[0.0, 0.0]])


@pytest.mark.parametrize("name", ["identity", "straight_through", "zero", "sigmoid_surrogate"])
def test_derivative_equals_autodiff_of_primitive(name: str) -> None:
    surrogate = ste.registry.get(name)
    x = tf.constant(np.linspace(-3.0, 3.0, 61)[np.abs(np.abs(np.linspace(-3.0, 3.0, 61)) - 1.0) > 1e-9])
    with tf.GradientTape() as tape:
        tape.watch(x)
        p = surrogate.primitive(x)
    autodiff = tape.gradient(p, x, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    np.testing.assert_allclose(surrogate.derivative(x).numpy(), autodiff.numpy(), rtol=1e-12, atol=1e-15)


def test_identity_and_zero_keep_no_input_alive() -> None:
    # a constant derivative lets the op drop its input (benchmarks measure the memory effect)
    assert ste.registry.get("identity").constant_derivative == 1.0
    assert ste.registry.get("zero").constant_derivative == 0.0
    assert ste.registry.get("straight_through", clip=None).constant_derivative == 1.0
    assert ste.registry.get("straight_through").constant_derivative is None
