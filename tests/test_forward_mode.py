"""Forward-mode autodiff (``tf.autodiff.ForwardAccumulator``, ``keras.ops.jvp``) gives the rule's JVP.

Registry surrogates: ``d(x)·t`` (d from the shared numpy table); ``backward_like(g)``: the JVP of g (autodiff of g
itself, a different code path from the op); a hand-written VJP rule: its declared ``jvp=`` (the built-in quantizers
DoReFa, Uniform, MagnitudeAwareSign, LSQ, PACT: numpy formulas, and the transpose of the tape gradient), else
:class:`ste.errors.RuleError`. Eager, ``tf.function``
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


@pytest.mark.parametrize("mode", ["eager", "tf.function", "jit_compile"])
@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("sigmoid_surrogate", {"beta": 2.0}),
        ("atan", {}),
        ("gaussian", {}),
        ("tanh_surrogate", {}),
        ("erf_surrogate", {}),
    ],
)
def test_hessian_vector_products_differentiate_the_surrogate(name: str, params: dict[str, Any], mode: str) -> None:
    """Forward-over-reverse (an accumulator around a tape) gives d'(x)·v, as reverse-over-reverse does (was None)."""
    op = ste.forward(tf_sign).backward(name, **params)

    def hvp(x: tf.Tensor, v: tf.Tensor) -> tf.Tensor:
        with tf.autodiff.ForwardAccumulator(x, v) as acc:
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = tf.reduce_sum(op(x))
            g = tape.gradient(y, x)
        return acc.jvp(g)

    if mode != "eager":
        hvp = tf.function(hvp, jit_compile=mode == "jit_compile")
    x = X64[np.abs(X64) > 1e-2]  # smooth entries; central differences of the numpy d (step 1e-6, float64)
    v = np.linspace(-1.0, 2.0, x.size)
    step = 1e-6
    expected = (reference_derivative(name, x + step, params) - reference_derivative(name, x - step, params)) / (
        2 * step
    )
    got = hvp(tf.constant(x), tf.constant(v))
    assert got is not None
    np.testing.assert_allclose(got.numpy(), expected * v, rtol=1e-6, atol=1e-8)


def test_hand_written_rule_raises_under_an_accumulator() -> None:
    op = ste.forward(tf_sign).backward(lambda dy, x: dy * tf.cast(tf.abs(x) <= 1.0, dy.dtype))
    x, t = tf.constant(X64), tf.constant(T64)
    with pytest.raises(ste.errors.RuleError, match="ForwardAccumulator") as info:
        with tf.autodiff.ForwardAccumulator(x, t):
            op(x)
    assert "backward_like" in str(info.value) and "vector-Jacobian" in str(info.value)

    @tf.function
    def inside(x: tf.Tensor) -> tf.Tensor:
        with tf.autodiff.ForwardAccumulator(x, t) as acc:
            y = op(x)
        return acc.jvp(y)

    with pytest.raises(ste.errors.RuleError, match="ForwardAccumulator"):
        inside(x)
    with pytest.raises(ste.errors.RuleError, match="ForwardAccumulator"):
        keras.ops.jvp(op, (x,), (t,))
    # the same op without an accumulator (or on an input the accumulator does not watch) is unaffected
    with tf.autodiff.ForwardAccumulator(tf.constant(1.0), tf.constant(1.0)):
        np.testing.assert_array_equal(op(x).numpy(), np.where(X64 >= 0, 1.0, -1.0))


# -- hand-written rules with a declared JVP: the built-in quantizers -------------------------------------------------


def _lsq_reference(x: np.ndarray, s: float, tx: np.ndarray, ts: float, q_n: int, q_p: int) -> np.ndarray:
    v = x / s
    below, above = v <= -q_n, v >= q_p
    inside = ~(below | above)
    ds = np.where(inside, np.round(v) - v, np.where(below, -q_n, q_p)) / np.sqrt(x.size * q_p)
    return inside * tx + ds * ts


def _quantizer_case(name: str) -> tuple[Any, list[np.ndarray], np.ndarray]:
    """(fn of the inputs, the inputs, the numpy JVP for the tangents [T64, TS]) of one built-in quantizer."""
    x, t, ts = X64, T64, 0.75
    if name == "dorefa_activations":
        return ste.quantizers.DoReFa(bits=2), [x], ((x >= 0) & (x <= 1)) * t
    if name == "dorefa_weights":
        m = np.max(np.abs(np.tanh(x)))
        return ste.quantizers.DoReFa(bits=3, mode="weights"), [x], (1.0 - np.tanh(x) ** 2) / m * t
    if name == "uniform":
        return ste.quantizers.Uniform(bits=3, min=-0.5, max=2.0), [x], ((x >= -0.5) & (x <= 2.0)) * t
    if name == "magnitude_aware_sign":
        alpha = np.mean(np.abs(x), axis=0)  # every axis but the last
        return ste.quantizers.MagnitudeAwareSign(), [x], alpha * (np.abs(x) <= 1.0) * t
    if name == "lsq":
        q = ste.quantizers.LSQ(bits=3)  # signed: Q_N = 4, Q_P = 3; s = 0.37 keeps x/s off the ends and the halves
        return (
            lambda x, s: q.op(x, s, q_n=q.q_n, q_p=q.q_p),
            [x, np.array(0.37)],
            _lsq_reference(x, 0.37, t, ts, 4, 3),
        )
    assert name == "pact"
    q = ste.quantizers.PACT(bits=2)
    a = 1.25  # an element of X64: 1[x >= α] and 1[0 <= x <= α] both hold there
    return lambda x, a: q.op(x, a, bits=2), [x, np.array(a)], ((x >= 0) & (x <= a)) * t + (x >= a) * ts


QUANTIZERS = ["dorefa_activations", "dorefa_weights", "uniform", "magnitude_aware_sign", "lsq", "pact"]


@pytest.mark.parametrize("mode", ["eager", "tf.function"])
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("name", QUANTIZERS)
def test_built_in_quantizers_give_their_documented_jvp(name: str, dtype: tf.DType, mode: str) -> None:
    """acc.jvp = the numpy formula · tangent, and ⟨w, J t⟩ = ⟨Jᵀ w, t⟩ with Jᵀ w from a GradientTape (the VJP)."""
    fn, inputs64, expected = _quantizer_case(name)
    xs = [tf.constant(v, dtype) for v in inputs64]
    ts = [tf.constant(T64, dtype), tf.constant(0.75, dtype)][: len(xs)]
    w = tf.constant(np.cos(np.arange(X64.size)).reshape(X64.shape), dtype)

    def both(*xs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, list[tf.Tensor]]:
        with tf.autodiff.ForwardAccumulator(list(xs), ts) as acc:
            y = fn(*xs)
        with tf.GradientTape() as tape:
            tape.watch(xs)
            y_again = fn(*xs)
        return y - y_again, acc.jvp(y), tape.gradient(y_again, list(xs), output_gradients=w)

    if mode == "tf.function":
        both = tf.function(both)
    change, jvp, vjps = both(*xs)
    where = f"{name} {dtype.name} {mode}"
    assert jvp.dtype == dtype and tuple(jvp.shape) == X64.shape, where
    np.testing.assert_array_equal(change.numpy(), 0.0, err_msg=where)  # the accumulator leaves the value as it is
    tol = 1e-5 if dtype == tf.float32 else 1e-12
    np.testing.assert_allclose(as_f64(jvp), expected, rtol=tol, atol=tol, err_msg=where)
    inner_jvp = float(np.sum(as_f64(w) * as_f64(jvp)))
    inner_vjp = sum(float(np.sum(as_f64(g) * as_f64(t))) for g, t in zip(vjps, ts))
    np.testing.assert_allclose(inner_jvp, inner_vjp, rtol=tol, atol=tol, err_msg=where)


@pytest.mark.parametrize("name", ["dorefa_weights", "pact"])
def test_keras_ops_jvp_of_a_quantizer_layer(name: str) -> None:
    """keras.ops.jvp on the layer itself (PACT: α is the layer's variable, with no tangent)."""
    layer = (
        ste.quantizers.DoReFa(bits=3, mode="weights") if name == "dorefa_weights" else ste.quantizers.PACT(alpha=1.25)
    )
    _, _, expected = _quantizer_case(name)
    if name == "pact":
        expected = ((X64 >= 0) & (X64 <= 1.25)) * T64
    x, t = tf.constant(X64, tf.float32), tf.constant(T64, tf.float32)
    for run in (keras.ops.jvp, tf.function(keras.ops.jvp, autograph=False)):
        _, jvp = run(layer, (x,), (t,))
        np.testing.assert_allclose(jvp.numpy(), expected, rtol=1e-5, atol=1e-6)


def _clipped_vjp(dy: tf.Tensor, x: tf.Tensor, b: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    return dy * tf.cast(tf.abs(x) <= 1.0, dy.dtype) * b, dy * tf_sign(x)


def _clipped_jvp(tangents: tuple[tf.Tensor, tf.Tensor], x: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    tx, tb = tangents
    return tx * tf.cast(tf.abs(x) <= 1.0, tx.dtype) * b + tb * tf_sign(x)


def _signed_product(x: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    return tf_sign(x) * b


def test_a_user_rule_declares_its_jvp() -> None:
    """.backward(vjp, jvp=jvp): forward mode uses jvp (two inputs); the declaration survives get_config and pickle."""
    import pickle

    op = ste.forward(_signed_product).backward(_clipped_vjp, jvp=_clipped_jvp)
    assert "jvp=_clipped_jvp" in repr(op)
    x, t = tf.constant(X64), tf.constant(T64)
    b, tb = tf.constant(X64[::-1] + 0.5), tf.constant(T64[::-1])
    expected = (np.abs(X64) <= 1.0) * b.numpy() * T64 + np.where(X64 >= 0, 1.0, -1.0) * tb.numpy()
    for same in (op, ste.STEFunction.from_config(op.get_config()), pickle.loads(pickle.dumps(op))):
        with tf.autodiff.ForwardAccumulator([x, b], [t, tb]) as acc:
            y = same(x, b)
        np.testing.assert_allclose(acc.jvp(y).numpy(), expected, rtol=1e-12)


def test_declared_jvp_misuse_is_a_rule_error() -> None:
    with pytest.raises(ste.errors.RuleError, match="already"):
        ste.forward(tf_sign).backward("straight_through", jvp=_clipped_jvp)
    with pytest.raises(ste.errors.RuleError, match="jvp must be a function"):
        ste.forward(_signed_product).backward(_clipped_vjp, jvp=3)
    wrong = ste.forward(_signed_product).backward(_clipped_vjp, jvp=lambda t, x, b: (t[0], t[1]))
    x = tf.constant(X64)
    with pytest.raises(ste.errors.RuleError, match="returned 2 tangent"):
        with tf.autodiff.ForwardAccumulator(x, tf.constant(T64)):
            wrong(x, x)


def test_a_declared_jvp_also_serves_vectorized_map() -> None:
    """Inside tf.vectorized_map the rebuilt op's own gradient is the declared JVP's transpose: the VJP (as map_fn)."""
    op = ste.forward(_signed_product).backward(_clipped_vjp, jvp=_clipped_jvp)
    x, b = tf.constant(X64), tf.constant(X64[::-1] + 0.5)

    def grads(pair: tuple[tf.Tensor, tf.Tensor]) -> list[tf.Tensor]:
        with tf.GradientTape() as tape:
            tape.watch(pair)
            y = op(*pair)
        return tape.gradient(y, list(pair), output_gradients=tf.ones_like(y))

    vectorized, mapped = (
        tf.vectorized_map(grads, (x, b)),
        tf.map_fn(grads, (x, b), fn_output_signature=[tf.float64] * 2),
    )
    np.testing.assert_array_equal(vectorized[0].numpy(), (np.abs(X64) <= 1.0) * b.numpy())
    np.testing.assert_array_equal(vectorized[1].numpy(), np.where(X64 >= 0, 1.0, -1.0))
    for got, want in zip(vectorized, mapped):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
