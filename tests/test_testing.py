"""ste.testing.check_gradient / check_finite: pass for correct rules, fail with a table for wrong ones."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

import ste
from ste.testing import check_finite, check_gradient, default_tolerances

# Off round numbers: kinks of clip-like primitives (x = ±1) have no derivative.
GRID = np.linspace(-3.0, 3.0, 121) + 1.234e-3


@pytest.fixture
def registered():
    names = []

    def register(name, derivative, primitive=None):
        ste.registry.register(name, derivative, primitive=primitive, replace=True)
        names.append(name)
        return name

    yield register
    for name in names:
        ste.registry.unregister(name)


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16", np.float32, np.float64])
def test_correct_surrogate_passes_in_every_dtype(dtype):
    x = tf.cast(tf.constant(GRID), tf.as_dtype(dtype))
    check_gradient("sigmoid_surrogate(beta=4.0)", x)
    check_gradient("straight_through", x)


def test_wrong_derivative_fails_with_the_worst_points_first(registered):
    # d claims cos(x), but the primitive sin(x) + 0.05 x² has derivative cos(x) + 0.1 x: error 0.1 |x|.
    name = registered("bad_sine", lambda x: tf.cos(x), primitive=lambda x: tf.sin(x) + 0.05 * x * x)
    rtol, atol = default_tolerances(tf.float64, finite_differences=False)
    expected_bad = int(np.sum(0.1 * np.abs(GRID) > atol + rtol * np.abs(np.cos(GRID) + 0.1 * GRID)))
    with pytest.raises(AssertionError) as caught:
        check_gradient(name, GRID, show=3)
    message = str(caught.value)
    assert f"at {expected_bad} of {GRID.size} point(s)" in message
    rows = [line.split() for line in message.splitlines()[2:]]
    assert len(rows) == 3
    worst = GRID[np.argmax(np.abs(GRID))]
    assert float(rows[0][1]) == pytest.approx(worst, rel=1e-5)  # columns: index, x, rule, reference, |difference|
    assert int(rows[0][0]) == int(np.argmax(np.abs(GRID)))
    assert float(rows[0][2]) == pytest.approx(np.cos(worst), rel=1e-5)
    assert float(rows[0][3]) == pytest.approx(np.cos(worst) + 0.1 * worst, rel=1e-5)


@pytest.mark.parametrize(
    ("rule", "reference"),
    [
        ("sigmoid_surrogate(beta=2.0)", lambda x: 1.0 / (1.0 + np.exp(-2.0 * x))),
        ("straight_through(clip=1.0)", lambda x: np.clip(x, -1.0, 1.0)),
    ],
)
@pytest.mark.parametrize("elementwise", [None, False])
def test_op_against_numpy_reference_by_finite_differences(rule, reference, elementwise):
    check_gradient(ste.forward(tf.sign).backward(rule), GRID, reference=reference, elementwise=elementwise)


def test_a_rule_that_ignores_dy_is_caught():
    @ste.forward
    def step(x):
        return tf.cast(x > 0, x.dtype)

    @step.backward
    def step(dy, x):  # wrong: should be dy * 1
        return tf.ones_like(x)

    with pytest.raises(AssertionError, match="vector-Jacobian"):
        check_gradient(step, GRID, reference=lambda x: x)
    check_gradient(step.backward(lambda dy, x: dy), GRID, reference=lambda x: x)


def test_several_inputs_report_which_input_is_wrong():
    @ste.forward
    def scale(x, s):
        return x * s

    @scale.backward
    def scale(dy, x, s):
        return dy * s, tf.reduce_sum(dy)  # wrong for s: must be sum(dy * x)

    x, s = np.linspace(-1.0, 1.0, 7), np.float64(2.0)
    with pytest.raises(AssertionError) as caught:
        check_gradient(scale, (x, s), reference=lambda x, s: x * s)
    header, first = str(caught.value).splitlines()[1:3]
    assert header.split()[0] == "input"
    assert first.split()[0] == "1"
    check_gradient(
        scale.backward(lambda dy, x, s: (dy * s, tf.reduce_sum(dy * x))), (x, s), reference=lambda x, s: x * s
    )


def test_backward_like_is_checked_against_autodiff_of_g_with_hyperparameters():
    @ste.backward_like(lambda x, k=1.0: tf.tanh(k * x))
    def hard(x, k=1.0):
        return tf.sign(x)

    check_gradient(hard, GRID, hyperparams={"k": 2.0})


def test_what_cannot_be_checked_is_an_ste_error(registered):
    op = ste.forward(tf.sign).backward(lambda dy, x: dy)
    with pytest.raises(ste.errors.CallError, match="reference="):
        check_gradient(op, GRID)
    name = registered("no_primitive", lambda x: tf.ones_like(x))
    with pytest.raises(ste.errors.CallError, match="no primitive"):
        check_gradient(name, GRID)
    check_gradient(name, GRID, reference=lambda x: x)
    with pytest.raises(ste.errors.CallError, match="no backward rule"):
        check_gradient(ste.forward(tf.sign), GRID)
    with pytest.raises(ste.errors.CallError):
        check_gradient(3.0, GRID)
    with pytest.raises(ste.errors.CallError, match="int"):
        check_gradient("identity", tf.constant([1, 2]))
    sum_op = ste.forward(tf.reduce_sum).backward(lambda dy, x: dy * tf.ones_like(x))
    check_gradient(sum_op, GRID[:20], reference=np.sum)  # not elementwise: each element perturbed on its own
    with pytest.raises(ste.errors.CallError, match="elementwise"):
        check_gradient(
            ste.forward(tf.reduce_sum).backward(lambda dy, x: dy * tf.ones_like(x)),
            GRID,
            reference=np.sum,
            elementwise=True,
        )


def test_check_finite(registered):
    check_finite("sigmoid_surrogate(beta=4.0)")
    check_finite(ste.forward(tf.sign).backward("straight_through"))
    # exp(-x) overflows for large negative x: inf / inf = nan.
    name = registered("naive_sigmoid", lambda x: tf.exp(-x) / (1.0 + tf.exp(-x)) ** 2)
    with pytest.raises(AssertionError) as caught:
        check_finite(name)
    message = str(caught.value)
    assert re.search(r"float32\s+x = -10000\s", message)
    assert "float64" in message  # -max overflows in every dtype
