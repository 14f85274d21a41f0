"""Every built-in (tests/references.py) against its independent numpy formula, in every float dtype, on a grid
with 0, ±clip and large |x|."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import ste
from tests.helpers import FLOAT_DTYPES, TOLERANCE, as_float64
from tests.references import case_id, entry_cases, peak, reference_derivative


def _grid(dtype: tf.DType) -> np.ndarray:
    big = float(dtype.max)
    values = [-big, -1e4, -60.0, -2.0, -1.0, -0.999, -0.5, -1e-30, 0.0, 1e-30, 0.5, 0.999, 1.0, 2.0, 60.0, 1e4, big]
    return as_float64(tf.cast(tf.constant(values, tf.float64), dtype))  # the values as the dtype represents them


# Every built-in entry with every parameter set of the shared table (an entry without a reference fails here).
CASES = entry_cases()
IDS = [case_id(name, params) for name, params in CASES]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize(("name", "params"), CASES, ids=IDS)
def test_derivative_matches_numpy(name: str, params: dict[str, Any], dtype: tf.DType) -> None:
    surrogate = ste.registry.get(name, **params)
    x = _grid(dtype)
    expected = reference_derivative(name, x, params)
    got = surrogate.derivative(tf.cast(tf.constant(x), dtype))
    assert got.dtype == dtype
    got64 = as_float64(got)
    assert np.all(np.isfinite(got64))
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(got64, expected, rtol=tol, atol=tol * peak(name, params))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize(("name", "params"), CASES, ids=IDS)
def test_rule_vjp_is_dy_times_derivative(name: str, params: dict[str, Any], dtype: tf.DType) -> None:
    x = _grid(dtype)
    dy = np.linspace(-3.0, 3.0, x.size)
    op = ste.forward(tf.sign).backward(name, **params)
    xt = tf.cast(tf.constant(x), dtype)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = op(xt)
    grad = tape.gradient(y, xt, output_gradients=tf.cast(dy, dtype))
    assert grad.dtype == dtype
    expected = as_float64(tf.cast(dy, dtype)) * reference_derivative(name, x, params)
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(as_float64(grad), expected, rtol=tol, atol=3 * tol * peak(name, params))


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
