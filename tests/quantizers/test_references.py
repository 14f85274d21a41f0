"""Every quantizer name against the shared numpy reference table (tests/references.py), forward and gradient.

Parametrized over ``ste.quantizers.names()``: a new quantizer without a reference fails here instead of being skipped.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import ste
from tests.references import quantizer_reference

# Rows x channels, seeded normal draws: none lies on a kink or a rounding tie of the default arguments.
_RNG = np.random.default_rng(11)
X = (_RNG.normal(0.0, 1.5, size=(8, 4))).astype(np.float32)
DY = _RNG.uniform(0.5, 1.5, size=X.shape).astype(np.float32)


@pytest.mark.parametrize("name", ste.quantizers.names())
def test_quantizer_matches_its_reference(name: str) -> None:
    reference = quantizer_reference(name)
    quantizer = ste.quantizers.get(name)
    x = tf.constant(X)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = quantizer(x)
    grad = tape.gradient(y, x, output_gradients=tf.constant(DY))
    want_y, want_dx = reference(X.astype(np.float64))
    np.testing.assert_allclose(y.numpy(), want_y, rtol=1e-6, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(grad.numpy(), DY * want_dx, rtol=1e-5, atol=1e-6, err_msg=name)
