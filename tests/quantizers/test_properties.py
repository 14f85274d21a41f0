"""Property tests: quantizer forwards and gradients on random float32 arrays against numpy formulas."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ste.quantizers import DoReFa, Sign, Ternary

# TensorFlow's CPU kernels treat subnormal numbers as zero (x = -1e-45 gives x >= 0), so they are left out here;
# the quantizers' docstrings say so.
values = arrays(np.float32, st.integers(1, 20), elements=st.floats(-1e4, 1e4, width=32, allow_subnormal=False))


def forward_and_grad(quantizer, x):
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = quantizer(xt)
    return y.numpy(), tape.gradient(y, xt).numpy()


@given(values, st.floats(0.125, 4.0))
def test_sign(x, clip):
    y, grad = forward_and_grad(Sign(surrogate=f"straight_through(clip={clip})"), x)
    np.testing.assert_array_equal(y, np.where(x >= 0, 1.0, -1.0))
    np.testing.assert_array_equal(grad, (np.abs(x) <= np.float32(clip)).astype(np.float32))


@given(values, st.floats(0.0, 2.0, width=32))
def test_ternary(x, threshold):
    y, grad = forward_and_grad(Ternary(threshold=threshold), x)
    if threshold > 0:
        expected = np.where(x >= threshold, 1.0, np.where(x <= -threshold, -1.0, 0.0))
    else:  # larq's formula with a zero threshold is sign(x), 0 at x = 0
        expected = np.sign(x)
    np.testing.assert_array_equal(y, expected)
    np.testing.assert_array_equal(grad, (np.abs(x) <= 1.0).astype(np.float32))


@given(values, st.integers(1, 8))
def test_dorefa_activations_lands_on_levels(x, bits):
    n = 2**bits - 1
    y, grad = forward_and_grad(DoReFa(bits=bits), x)
    np.testing.assert_allclose(y * n, np.round(y * n), atol=1e-4)  # every output is a level i/n
    assert np.all(np.abs(y - np.clip(x, 0, 1)) <= 0.5 / n + 1e-6)  # the nearest level
    np.testing.assert_array_equal(grad, ((x >= 0) & (x <= 1)).astype(np.float32))
