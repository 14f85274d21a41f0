"""Numerical extremes for every registry entry and float dtype.

* Gradients at 0, ±tiny (smallest normal and smallest subnormal), ±1e4 and ±the dtype's largest finite value are
  finite and equal dy·d(x) from the overflow-free numpy reference.
* ±inf and NaN inputs give the forward function's own values, and never turn a finite upstream gradient elsewhere in
  the tensor into NaN (or anything but dy·d(x) there).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import ste
from tests.references import DTYPES, FORWARDS, as_f64, entry_cases, eps, peak, reference_derivative

CASES = entry_cases()


# (smallest normal, smallest subnormal, largest finite) per dtype, from the IEEE / bfloat16 formats.
LIMITS = {
    tf.float16: (2.0**-14, 2.0**-24, 65504.0),
    tf.bfloat16: (2.0**-126, 2.0**-133, (2.0 - 2.0**-7) * 2.0**127),
    tf.float32: (2.0**-126, 2.0**-149, (2.0 - 2.0**-23) * 2.0**127),
    tf.float64: (2.0**-1022, 2.0**-1074, sys.float_info.max),
}


def _extreme_points(dtype: tf.DType) -> np.ndarray:
    tiny, subnormal, largest = LIMITS[dtype]
    points = [0.0, -0.0, tiny, -tiny, subnormal, -subnormal, 1e4, -1e4, largest, -largest, 1.0, -1.0]
    return np.array(points, np.float64)


def _gradient(op: Any, x: tf.Tensor, dy: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = op(x)
    return y, tape.gradient(y, x, output_gradients=dy)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_gradients_at_the_extremes_are_finite_and_exact(dtype: tf.DType) -> None:
    x = tf.cast(tf.constant(_extreme_points(dtype)), dtype)
    xv = as_f64(x)
    assert np.all(np.isfinite(xv))
    dy = tf.ones_like(x)
    tol = 8 * eps(dtype)
    for name, params in CASES:
        op = ste.forward(FORWARDS["sign"][0]).backward(name, **params)
        _, grad = _gradient(op, x, dy)
        g = as_f64(grad)
        assert np.all(np.isfinite(g)), f"{op!r} {dtype.name}: non-finite gradient {g} at {xv}"
        expected = reference_derivative(name, xv, params)
        np.testing.assert_allclose(g, expected, rtol=tol, atol=tol * peak(name, params), err_msg=f"{op!r} {dtype.name}")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_large_upstream_gradients_stay_finite_where_d_is_bounded(dtype: tf.DType) -> None:
    """dy near the dtype's max times d(x) <= peak: finite wherever |dy·d| fits (the rule is one multiplication)."""
    largest = LIMITS[dtype][2]
    x = tf.cast(tf.constant([0.0, 0.75, -3.0, 1e4]), dtype)
    for name, params in CASES:
        scale = largest / 2.0 / max(1.0, peak(name, params))
        dy = tf.cast(tf.constant([scale] * 4, tf.float64), dtype)
        _, grad = _gradient(ste.forward(tf.identity).backward(name, **params), x, dy)
        assert np.all(np.isfinite(as_f64(grad))), f"{name}{params} {dtype.name}: {as_f64(grad)}"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_inf_and_nan_inputs_do_not_spread(dtype: tf.DType) -> None:
    x64 = np.array([np.inf, 0.5, -np.inf, -2.0, np.nan, 0.0, 3.0])
    finite = np.isfinite(x64)
    x = tf.cast(tf.constant(x64), dtype)
    dy = tf.cast(tf.constant([1.0, -1.5, 2.0, 0.5, 1.0, 1.0, -0.25]), dtype)
    xv, dyv = as_f64(x), as_f64(dy)
    tol = 8 * eps(dtype)
    for forward, (fn, _) in FORWARDS.items():
        for name, params in CASES:
            op = ste.forward(fn).backward(name, **params)
            y, grad = _gradient(op, x, dy)
            # the forward is exactly the forward function's, non-finite values included
            np.testing.assert_array_equal(as_f64(y), as_f64(fn(x)), err_msg=f"{op!r} {dtype.name}")
            g = as_f64(grad)
            assert np.all(np.isfinite(g[finite])), f"{op!r} {dtype.name}: {g}"
            expected = dyv[finite] * reference_derivative(name, xv[finite], params)
            atol = tol * peak(name, params) * 2.0
            np.testing.assert_allclose(g[finite], expected, rtol=tol, atol=atol, err_msg=f"{op!r} {dtype.name}")
            if forward != "sign":
                break  # the gradient does not depend on the forward: every entry with sign, every forward once


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_non_finite_upstream_gradients_stay_where_they_are(dtype: tf.DType) -> None:
    x = tf.cast(tf.constant([0.1, 0.2, -0.3, 0.4]), dtype)
    dy = tf.cast(tf.constant([np.inf, 1.0, np.nan, -1.0]), dtype)
    for name, params in CASES:
        _, grad = _gradient(ste.forward(FORWARDS["heaviside"][0]).backward(name, **params), x, dy)
        g = as_f64(grad)
        expected = np.array([1.0, -1.0]) * reference_derivative(name, as_f64(x)[[1, 3]], params)
        np.testing.assert_allclose(g[[1, 3]], expected, rtol=8 * eps(dtype), atol=8 * eps(dtype), err_msg=name)
