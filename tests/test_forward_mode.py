"""Forward-mode autodiff (``tf.autodiff.ForwardAccumulator``, ``keras.ops.jvp``) gives the rule's JVP.

Registry surrogates: ``d(x)·t`` (d from the shared numpy table); ``backward_like(g)``: the JVP of g (autodiff of g
itself, a different code path from the op); a hand-written VJP rule: :class:`ste.RuleError`. Eager, ``tf.function``
(accumulator inside the function, and a function traced outside called under it) and ``jit_compile=True``.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
from tests.references import DTYPES, as_f64, entry_cases, eps, peak, reference_derivative, tf_sign

CASES = entry_cases()
DEFAULT_CASES = [(name, params) for name, params in CASES if not params]
X64 = np.array([[-3.0, -1.0, -0.75, -0.3], [0.0, 0.2, 0.5, 1.0], [1.25, 2.0, 4.0, -1e-3]])
T64 = np.array([[1.0, -0.5, 2.0, 1.5], [0.25, 1.0, -2.0, 0.5], [1.0, 3.0, -1.0, 0.75]])


def _jvps(ops: list[Any], x: tf.Tensor, t: tf.Tensor) -> tuple[list[tf.Tensor], list[tf.Tensor]]:
    with tf.autodiff.ForwardAccumulator(x, t) as acc:
        ys = [op(x) for op in ops]
    return ys, [acc.jvp(y, unconnected_gradients=tf.UnconnectedGradients.ZERO) for y in ys]


def _assert_jvps(cases: list[tuple[str, dict[str, Any]]], ys: Any, jvps: Any, x: tf.Tensor, t: tf.Tensor, mode: str):
    xv, tv = as_f64(x), as_f64(t)
    tol = 8 * eps(x.dtype)
    for (name, params), y, jvp in zip(cases, ys, jvps):
        where = f"{name}{params} {x.dtype.name} {mode}"
        assert jvp.dtype == x.dtype and tuple(jvp.shape) == tuple(x.shape), where
        np.testing.assert_array_equal(as_f64(y), np.where(xv >= 0, 1.0, -1.0), err_msg=where)
        expected = reference_derivative(name, xv, params) * tv
        atol = tol * peak(name, params) * 3.0
        np.testing.assert_allclose(as_f64(jvp), expected, rtol=tol, atol=atol, err_msg=where)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_every_entry_gives_d_times_tangent_eagerly(dtype: tf.DType) -> None:
    x, t = tf.cast(tf.constant(X64), dtype), tf.cast(tf.constant(T64), dtype)
    ops = [ste.forward(tf_sign).backward(name, **params) for name, params in CASES]
    _assert_jvps(CASES, *_jvps(ops, x, t), x, t, "eager")


@pytest.mark.parametrize("jit", [False, True], ids=["tf.function", "jit_compile"])
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=lambda d: d.name)
def test_every_entry_gives_d_times_tangent_inside_tf_function(dtype: tf.DType, jit: bool) -> None:
    ops = [ste.forward(tf_sign).backward(name, **params) for name, params in DEFAULT_CASES]
    x, t = tf.constant(X64, dtype), tf.constant(T64, dtype)
    ys, jvps = tf.function(lambda x, t: _jvps(ops, x, t), jit_compile=jit)(x, t)
    _assert_jvps(DEFAULT_CASES, ys, jvps, x, t, "jit" if jit else "tf.function")


def test_a_tf_function_traced_outside_the_accumulator() -> None:
    """Not traced again under the accumulator: TensorFlow transposes the function's backward pass (the rule)."""
    ops = [ste.forward(tf_sign).backward(name, **params) for name, params in DEFAULT_CASES]
    x, t = tf.constant(X64), tf.constant(T64)
    function = tf.function(lambda x: [op(x) for op in ops])
    function(x)  # traced here, without an accumulator
    with tf.autodiff.ForwardAccumulator(x, t) as acc:
        ys = function(x)
    jvps = [acc.jvp(y, unconnected_gradients=tf.UnconnectedGradients.ZERO) for y in ys]
    _assert_jvps(DEFAULT_CASES, ys, jvps, x, t, "traced outside")


@pytest.mark.parametrize("mode", ["eager", "tf.function", "jit_compile", "traced outside"])
def test_backward_like_gives_the_jvp_of_g(mode: str) -> None:
    """relu forward, sigmoid backward: the JVP is sigmoid'(x)·t, not relu's step; two inputs: the JVP of g(a, b)."""
    one = ste.forward(tf.nn.relu).backward_like(tf.sigmoid)
    two = ste.forward(lambda a, b: tf.sign(a) * b).backward_like(lambda a, b: tf.tanh(a) * b)
    x, t = tf.constant(X64), tf.constant(T64)
    b, tb = tf.constant(X64[::-1] + 0.5), tf.constant(T64[::-1])

    def jvps(x: tf.Tensor, b: tf.Tensor) -> Any:
        with tf.autodiff.ForwardAccumulator([x, b], [t, tb]) as acc:
            y1, y2 = one(x), two(x, b)
        return y1, y2, acc.jvp(y1), acc.jvp(y2)

    if mode == "eager":
        y1, y2, j1, j2 = jvps(x, b)
    elif mode == "traced outside":
        function = tf.function(lambda x, b: (one(x), two(x, b)))
        function(x, b)
        with tf.autodiff.ForwardAccumulator([x, b], [t, tb]) as acc:
            y1, y2 = function(x, b)
        j1, j2 = acc.jvp(y1), acc.jvp(y2)
    else:
        y1, y2, j1, j2 = tf.function(jvps, jit_compile=mode == "jit_compile")(x, b)
    s = 1.0 / (1.0 + np.exp(-X64))
    np.testing.assert_array_equal(y1.numpy(), np.maximum(X64, 0.0))
    np.testing.assert_allclose(j1.numpy(), s * (1.0 - s) * T64, rtol=1e-12, atol=1e-15)
    bv, tbv = b.numpy(), tb.numpy()
    np.testing.assert_array_equal(y2.numpy(), np.sign(X64) * bv)
    expected = (1.0 - np.tanh(X64) ** 2) * bv * T64 + np.tanh(X64) * tbv
    np.testing.assert_allclose(j2.numpy(), expected, rtol=1e-12, atol=1e-15)


def test_backward_like_with_dict_outputs() -> None:
    op = ste.forward(lambda x: {"hard": tf_sign(x), "step": tf.cast(x > 0, x.dtype)}).backward_like(
        lambda x: {"hard": tf.tanh(x), "step": tf.sigmoid(x)}
    )
    x, t = tf.constant(X64), tf.constant(T64)
    with tf.autodiff.ForwardAccumulator(x, t) as acc:
        y = op(x)
    jvp = acc.jvp(y)
    s = 1.0 / (1.0 + np.exp(-X64))
    np.testing.assert_allclose(jvp["hard"].numpy(), (1.0 - np.tanh(X64) ** 2) * T64, rtol=1e-12)
    np.testing.assert_allclose(jvp["step"].numpy(), s * (1.0 - s) * T64, rtol=1e-12)


def test_keras_ops_jvp() -> None:
    op = ste.forward(tf_sign).backward("sigmoid_surrogate", beta=2.0)
    x, t = tf.constant(X64, tf.float32), tf.constant(T64, tf.float32)
    expected = reference_derivative("sigmoid_surrogate", X64, {"beta": 2.0}) * T64
    y, jvp = keras.ops.jvp(op, (x,), (t,))
    np.testing.assert_array_equal(y.numpy(), np.where(X64 >= 0, 1.0, -1.0))
    np.testing.assert_allclose(jvp.numpy(), expected, rtol=1e-6, atol=1e-7)
    y, jvp = tf.function(lambda x, t: keras.ops.jvp(op, (x,), (t,)))(x, t)
    np.testing.assert_allclose(jvp.numpy(), expected, rtol=1e-6, atol=1e-7)


def test_reverse_mode_under_an_accumulator_still_uses_the_rule() -> None:
    """A GradientTape inside or outside the accumulator gets dy·d(x) from the rebuilt op."""
    op = ste.forward(tf_sign).backward("triangle")
    x, t = tf.constant(X64), tf.constant(T64)
    for outer_tape in (False, True):
        if outer_tape:
            with tf.GradientTape() as tape:
                tape.watch(x)
                with tf.autodiff.ForwardAccumulator(x, t) as acc:
                    y = op(x)
        else:
            with tf.autodiff.ForwardAccumulator(x, t) as acc:
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    y = op(x)
        d = np.maximum(0.0, 1.0 - np.abs(X64))  # triangle(width=1)
        np.testing.assert_array_equal(tape.gradient(y, x, output_gradients=tf.constant(T64)).numpy(), T64 * d)
        np.testing.assert_array_equal(acc.jvp(y).numpy(), d * T64)


def test_hand_written_rule_raises_under_an_accumulator() -> None:
    op = ste.forward(tf_sign).backward(lambda dy, x: dy * tf.cast(tf.abs(x) <= 1.0, dy.dtype))
    x, t = tf.constant(X64), tf.constant(T64)
    with pytest.raises(ste.RuleError, match="ForwardAccumulator") as info:
        with tf.autodiff.ForwardAccumulator(x, t):
            op(x)
    assert "backward_like" in str(info.value) and "vector-Jacobian" in str(info.value)

    @tf.function
    def inside(x: tf.Tensor) -> tf.Tensor:
        with tf.autodiff.ForwardAccumulator(x, t) as acc:
            y = op(x)
        return acc.jvp(y)

    with pytest.raises(ste.RuleError, match="ForwardAccumulator"):
        inside(x)
    with pytest.raises(ste.RuleError, match="ForwardAccumulator"):
        keras.ops.jvp(ste.quantizers.DoReFa(), (x,), (t,))  # a quantizer with a hand-written rule
    # the same op without an accumulator (or on an input the accumulator does not watch) is unaffected
    with tf.autodiff.ForwardAccumulator(tf.constant(1.0), tf.constant(1.0)):
        np.testing.assert_array_equal(op(x).numpy(), np.where(X64 >= 0, 1.0, -1.0))
