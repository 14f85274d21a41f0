"""The benchmark compares like with like: every variant computes the same forward and gradient (numpy reference)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._variants import BETA, RULES, VARIANTS, make_op  # noqa: E402

GRID = np.array([-3.0, -1.5, -1.0, -0.75, -0.25, 0.0, 0.25, 0.5, 1.0, 1.25, 4.0], dtype=np.float64)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # no exp of a large positive number


REFERENCE: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "straight_through": lambda x: (np.abs(x) <= 1.0).astype(np.float64),
    "sigmoid_surrogate": lambda x: BETA * _sigmoid(BETA * x) * _sigmoid(-BETA * x),
    "approx_sign": lambda x: np.where(np.abs(x) <= 1.0, 2.0 - 2.0 * np.abs(x), 0.0),
}


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_variant_matches_numpy(variant: str, rule: str) -> None:
    op = make_op(variant, rule)
    x = tf.constant(GRID, tf.float32)
    dy = tf.constant(np.linspace(-2.0, 2.0, GRID.size), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = op(x)
    grad = tape.gradient(y, x, output_gradients=dy)
    expected_y = np.where(GRID >= 0, 1.0, -1.0)
    if variant != "stop_gradient_naive" or rule == "straight_through":  # the naive form rounds P(x) + (f - P)
        np.testing.assert_array_equal(y.numpy(), expected_y)
    else:
        np.testing.assert_allclose(y.numpy(), expected_y, atol=1e-6)
    np.testing.assert_allclose(grad.numpy(), dy.numpy() * REFERENCE[rule](GRID), rtol=1e-6, atol=1e-6)
