"""SR-STE's gradient of the gradient against independent references, in every float dtype, eagerly, in tf.function
and under XLA: its decay is the gradient of the penalty decay/2·Σ(1 − m)·w², counted once.

The reference is autodiff, in float64, of the smooth equivalent: the masked weight as stop_gradient(w·m) + (w −
stop_gradient(w)) (value w·m, derivative 1: the straight-through estimator at every order) and the loss plus the
penalty. Where the loss is a sum of elementwise terms, central differences of the gradient agree with it too."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import ste

S = ste.sparsity
DECAY = 0.5
M = np.array([1, 0, 1, 1, 0, 1, 0, 1], np.float64)
A = np.random.default_rng(20).normal(size=(8, 8))  # a loss coupling the weights: its Hessian is not diagonal


def loss(y: tf.Tensor) -> tf.Tensor:
    a = tf.constant(A, y.dtype)
    return tf.reduce_sum(y**3) + tf.reduce_sum(tf.tanh(tf.linalg.matvec(a, y)))


def reference(w: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The gradient and the Hessian-vector product Hv of the smooth equivalent, in float64."""
    w64, v64, m = tf.constant(w, tf.float64), tf.constant(v, tf.float64), tf.constant(M)
    with tf.GradientTape() as outer:
        outer.watch(w64)
        with tf.GradientTape() as inner:
            inner.watch(w64)
            y = tf.stop_gradient(w64 * m) + (w64 - tf.stop_gradient(w64))
            total = loss(y) + DECAY / 2 * tf.reduce_sum((1 - m) * w64**2)
        g = inner.gradient(total, w64)
        gv = tf.reduce_sum(g * v64)
    return g.numpy(), outer.gradient(gv, w64).numpy()


def ste_grad_and_hvp(w: tf.Tensor, v: tf.Tensor, m: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    with tf.GradientTape() as outer:
        outer.watch(w)
        with tf.GradientTape() as inner:
            inner.watch(w)
            f = loss(S.sr_ste(w, m, decay=DECAY))
        g = inner.gradient(f, w)
        gv = tf.reduce_sum(g * v)
    return g, outer.gradient(gv, w)


TOLERANCE = {"float16": 2e-2, "bfloat16": 3e-2, "float32": 1e-5, "float64": 1e-12}


@pytest.mark.parametrize("mode", ["eager", "function", "xla"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_hessian_vector_product_against_the_smooth_equivalent(dtype: str, mode: str) -> None:
    rng = np.random.default_rng(21)
    w, v = rng.normal(size=8) * 0.5, rng.normal(size=8)
    expected_g, expected_hv = reference(w, v)
    fn = ste_grad_and_hvp
    if mode != "eager":
        fn = tf.function(ste_grad_and_hvp, jit_compile=mode == "xla")
    g, hv = fn(tf.constant(w, dtype), tf.constant(v, dtype), tf.constant(M, dtype))
    assert g.dtype == dtype and hv.dtype == dtype
    tol = TOLERANCE[dtype]
    scale_g, scale_hv = np.abs(expected_g).max(), np.abs(expected_hv).max()
    np.testing.assert_allclose(g.numpy().astype(np.float64), expected_g, atol=tol * scale_g, rtol=tol)
    np.testing.assert_allclose(hv.numpy().astype(np.float64), expected_hv, atol=tol * scale_hv, rtol=tol)
    # at a pruned weight the decay is counted once: without it the answer would differ by DECAY·v there
    assert np.abs(expected_hv[M == 0]).max() > 0


@pytest.mark.parametrize("mode", ["eager", "function", "xla"])
def test_elementwise_loss_hessian_against_central_differences(mode: str) -> None:
    w = tf.constant(np.random.default_rng(22).normal(size=8), tf.float64)
    m = tf.constant(M)

    def grad(x: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            tape.watch(x)
            f = tf.reduce_sum(tf.sin(S.sr_ste(x, m, decay=DECAY)) + S.sr_ste(x, m, decay=DECAY) ** 4)
        return tape.gradient(f, x)

    def hessian_diagonal(x: tf.Tensor) -> tf.Tensor:
        columns = []
        for e in np.eye(8):
            with tf.GradientTape() as outer:
                outer.watch(x)
                gv = tf.reduce_sum(grad(x) * e)
            columns.append(outer.gradient(gv, x))
        return tf.stack(columns)

    fn = hessian_diagonal if mode == "eager" else tf.function(hessian_diagonal, jit_compile=mode == "xla")
    got = fn(w).numpy()
    eps = 1e-6
    fd = np.stack([(grad(w + eps * e).numpy() - grad(w - eps * e).numpy()) / (2 * eps) for e in np.eye(8)])
    # each use of the op adds the decay once (two uses: 2·DECAY at a pruned weight), both in the gradient and in fd
    np.testing.assert_allclose(got, fd.T, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.diag(got)[M == 0], 2 * DECAY, rtol=1e-9)


def test_first_order_gradient_adds_the_decay_in_each_gradient_call() -> None:
    w = tf.constant(np.random.default_rng(23).normal(size=8))
    m = tf.constant(M)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(w)
        y = S.sr_ste(w, m, decay=DECAY)
        f1, f2 = tf.reduce_sum(y * 2.0), tf.reduce_sum(y**2)
    expected_decay = DECAY * (1 - M) * w.numpy()
    np.testing.assert_allclose(tape.gradient(f1, w).numpy(), 2.0 + expected_decay, rtol=1e-12)
    np.testing.assert_allclose(tape.gradient(f2, w).numpy(), 2 * w.numpy() * M + expected_decay, rtol=1e-12)
    np.testing.assert_allclose(tape.gradient(f1, w).numpy(), 2.0 + expected_decay, rtol=1e-12)
