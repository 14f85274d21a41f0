"""``tf.vectorized_map``, ``tape.jacobian`` and ``batch_jacobian`` give the documented gradients
(ste/_core/_vectorized.py).

TensorFlow drops ``tf.custom_gradient`` inside ``tf.vectorized_map``; ste rebuilds surrogate and ``backward_like``
ops from stop-gradient forms there and raises :class:`ste.errors.RuleError` for hand-written rules.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import ste
from tests.references import DTYPES, FORWARDS, as_f64, entry_cases, eps, peak, reference_derivative, tf_sign

DEFAULT_CASES = [(name, params) for name, params in entry_cases() if not params]
X64 = np.array([[0.5, -2.0, 0.0, 1.0, -0.25], [0.3, 1.5, -0.2, -1.0, 3.0], [-0.7, 0.9, 2.5, -1e-3, 0.05]])
DY64 = np.array([[1.0, -0.5, 2.0, 1.5, -1.0], [0.25, 1.0, -2.0, 0.5, 1.0], [1.0, 1.0, -1.0, 2.0, 0.5]])


def _map_gradients(ops: list[Any], x: tf.Tensor, dy: tf.Tensor) -> tuple[list[tf.Tensor], list[tf.Tensor]]:
    """All ops in one vectorized_map (one trace), each op's output and gradient."""
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ys = tf.vectorized_map(lambda row: tuple(op(row) for op in ops), x)
    return list(ys), [tape.gradient(y, x, output_gradients=dy) for y in ys]


def test_tensorflow_itself_still_drops_custom_gradients_in_vectorized_map() -> None:
    """The upstream behaviour this module works around (if this fails, TensorFlow fixed it)."""

    @tf.custom_gradient
    def raw(x: tf.Tensor) -> Any:
        return tf.sign(x), lambda dy: dy

    x = tf.constant(X64, tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.vectorized_map(raw, x)
    grad = tape.gradient(y, x)
    assert grad is None or np.all(grad.numpy() == 0.0)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_every_entry_gives_its_documented_gradient_inside_vectorized_map(dtype: tf.DType) -> None:
    x = tf.cast(tf.constant(X64), dtype)
    dy = tf.cast(tf.constant(DY64), dtype)
    xv, dyv = as_f64(x), as_f64(dy)
    ops = [ste.forward(FORWARDS["sign"][0]).backward(name, **params) for name, params in DEFAULT_CASES]
    ys, grads = _map_gradients(ops, x, dy)
    tol = 8 * eps(dtype)
    for (name, params), op, y, grad in zip(DEFAULT_CASES, ops, ys, grads):
        assert grad is not None, f"{op!r}: no gradient inside vectorized_map"
        assert grad.dtype == dtype
        np.testing.assert_array_equal(as_f64(y), np.where(xv >= 0, 1.0, -1.0))
        expected = dyv * reference_derivative(name, xv, params)
        np.testing.assert_allclose(
            as_f64(grad), expected, rtol=tol, atol=tol * peak(name, params) * 2, err_msg=f"{op!r} {dtype.name}"
        )


@pytest.mark.parametrize("dtype", [tf.float16, tf.float32], ids=lambda d: d.name)
def test_forward_values_inside_vectorized_map_are_exact(dtype: tf.DType) -> None:
    """The stop-gradient form adds an exact zero: forward values equal the forward's, ±inf and NaN included.

    Every entry with sign; every forward with identity, straight_through, sigmoid_surrogate and a backward_like.
    """
    x64 = np.array([[np.inf, -np.inf, np.nan, 0.0], [-0.0, 0.5, -7.5, 1e4]])
    x = tf.cast(tf.constant(x64), dtype)
    few = [case for case in DEFAULT_CASES if case[0] in ("identity", "straight_through", "sigmoid_surrogate")]
    fns, ops = [], []
    for forward, (fn, _) in sorted(FORWARDS.items()):
        for name, params in DEFAULT_CASES if forward == "sign" else few:
            fns.append(fn)
            ops.append(ste.forward(fn).backward(name, **params))
        fns.append(fn)
        ops.append(ste.forward(fn).backward_like(tf.tanh))
    ys, grads = _map_gradients(ops, x, tf.ones_like(x))
    finite = np.isfinite(x64)
    for fn, op, y, grad in zip(fns, ops, ys, grads):
        np.testing.assert_array_equal(as_f64(y), as_f64(fn(x)), err_msg=repr(op))
        assert np.all(np.isfinite(as_f64(grad)[finite])), repr(op)


def test_vectorized_map_inside_tf_function_and_xla() -> None:
    x = tf.constant(X64, tf.float32)
    dy = tf.constant(DY64, tf.float32)
    ops = [ste.forward(tf_sign).backward("straight_through"), ste.forward(tf_sign).backward("sigmoid_surrogate")]
    expected = [DY64 * reference_derivative(n, X64, {}) for n in ("straight_through", "sigmoid_surrogate")]
    for jit in (False, True):

        @tf.function(jit_compile=jit)
        def run(x: tf.Tensor, dy: tf.Tensor) -> Any:
            return _map_gradients(ops, x, dy)[1]

        for grad, want in zip(run(x, dy), expected):
            np.testing.assert_allclose(grad.numpy(), want, rtol=1e-6, atol=1e-7, err_msg=f"jit={jit}")


def test_a_tf_function_traced_inside_vectorized_map_is_covered() -> None:
    op = ste.forward(tf_sign).backward("straight_through")
    inner = tf.function(lambda row: op(row) * 2.0)
    x = tf.constant(X64, tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.vectorized_map(inner, x)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), 2.0 * (np.abs(X64) <= 1.0))


def test_backward_like_inside_vectorized_map_with_two_inputs() -> None:
    op = ste.forward(lambda x, w: tf.round(x * w)).backward_like(lambda x, w: tf.tanh(x) * w)
    x = tf.constant(X64, tf.float64)
    w = tf.constant(DY64 + 3.0, tf.float64)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([x, w])
        y = tf.vectorized_map(lambda args: op(*args), (x, w))
    gx, gw = tape.gradient(y, [x, w])
    np.testing.assert_array_equal(y.numpy(), np.round(X64 * (DY64 + 3.0)))
    np.testing.assert_allclose(gx.numpy(), (1.0 - np.tanh(X64) ** 2) * (DY64 + 3.0), rtol=1e-12)
    np.testing.assert_allclose(gw.numpy(), np.tanh(X64), rtol=1e-12)


def test_hand_written_rules_raise_inside_vectorized_map() -> None:
    op = ste.forward(tf_sign).backward(lambda dy, x: dy * tf.cast(tf.abs(x) <= 1.0, dy.dtype))
    with pytest.raises(ste.errors.RuleError) as info:
        tf.vectorized_map(op, tf.constant(X64, tf.float32))
    message = str(info.value)
    assert "tf.vectorized_map" in message and "tf.map_fn" in message and "sign" in message

    @tf.function
    def traced(x: tf.Tensor) -> tf.Tensor:
        return tf.vectorized_map(op, x)

    with pytest.raises(ste.errors.RuleError, match="vectorized_map"):
        traced(tf.constant(X64, tf.float32))
    # outside vectorized_map the same op works, also under tf.map_fn (the suggested fix)
    x = tf.constant(X64, tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.map_fn(op, x)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), (np.abs(X64) <= 1.0).astype(np.float32))


def test_non_elementwise_forward_with_a_surrogate_inside_vectorized_map() -> None:
    op = ste.forward(lambda x: tf.reduce_sum(tf_sign(x), keepdims=True)).backward("identity")
    with pytest.raises(ste.errors.RuleError, match="elementwise forward"):
        tf.vectorized_map(op, tf.constant(X64, tf.float32))


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=lambda d: d.name)
def test_jacobian_and_batch_jacobian_are_the_documented_diagonal(dtype: tf.DType) -> None:
    x = tf.constant(X64, dtype)
    for name in ("straight_through", "sigmoid_surrogate"):
        op = ste.forward(tf_sign).backward(name)
        d = reference_derivative(name, X64, {})
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            y = op(x)
        full = tape.jacobian(y, x).numpy()  # (3, 5, 3, 5)
        loop = tape.jacobian(y, x, experimental_use_pfor=False).numpy()
        batch = tape.batch_jacobian(y, x).numpy()  # (3, 5, 5)
        expected_full = np.einsum("ij,ik,jl->ijkl", d, np.eye(3), np.eye(5))
        np.testing.assert_allclose(full, expected_full, rtol=1e-6, atol=1e-7, err_msg=name)
        np.testing.assert_allclose(loop, expected_full, rtol=1e-6, atol=1e-7, err_msg=name)
        np.testing.assert_allclose(batch, np.einsum("ij,jl->ijl", d, np.eye(5)), rtol=1e-6, atol=1e-7, err_msg=name)


def test_jacobian_of_a_two_input_hand_written_rule() -> None:
    """A non-diagonal rule: y = sign(x)·v with gradients (dy·v·1[|x|<=1], dy·sign(x)); jacobian wrt both inputs."""

    @ste.forward
    def scaled(x: tf.Tensor, v: tf.Tensor) -> tf.Tensor:
        return tf_sign(x) * v

    @scaled.backward
    def scaled(dy: tf.Tensor, x: tf.Tensor, v: tf.Tensor) -> Any:
        return dy * v * tf.cast(tf.abs(x) <= 1.0, dy.dtype), tf.reduce_sum(dy * tf_sign(x), axis=0)

    x = tf.constant(X64, tf.float64)
    v = tf.constant([1.0, 2.0, -1.0, 0.5, 3.0], tf.float64)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([x, v])
        y = scaled(x, v)
    jx, jv = tape.jacobian(y, [x, v])
    sign = np.where(X64 >= 0, 1.0, -1.0)
    np.testing.assert_allclose(
        jx.numpy(), np.einsum("ij,ik,jl->ijkl", v.numpy() * (np.abs(X64) <= 1.0), np.eye(3), np.eye(5))
    )
    np.testing.assert_allclose(jv.numpy(), np.einsum("ij,jl->ijl", sign, np.eye(5)))
    bx = tape.batch_jacobian(y, x)
    np.testing.assert_allclose(bx.numpy(), np.einsum("ij,jl->ijl", v.numpy() * (np.abs(X64) <= 1.0), np.eye(5)))


def test_user_registered_surrogate_inside_vectorized_map() -> None:
    name = "rel_vmap_cubic_bump"
    ste.registry.register(name, lambda x, width=2.0: tf.nn.relu(1.0 - (x / width) ** 2) ** 3)
    try:
        op = ste.forward(tf_sign).backward(f"{name}(width=1.5)")
        x = tf.constant(X64, tf.float64)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.vectorized_map(op, x)
        expected = DY64 * np.maximum(0.0, 1.0 - (X64 / 1.5) ** 2) ** 3
        np.testing.assert_allclose(tape.gradient(y, x, output_gradients=tf.constant(DY64)).numpy(), expected)
    finally:
        ste.registry.unregister(name)


def test_surrogate_with_several_outputs_raises_inside_vectorized_map() -> None:
    op = ste.forward(lambda x: (tf_sign(x), tf_sign(-x))).backward("identity")
    with pytest.raises(ste.errors.RuleError, match="one-output"):
        tf.vectorized_map(op, tf.constant(X64, tf.float32))
