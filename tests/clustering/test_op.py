"""The cluster assignment op against numpy: forward, the centroid gradient (sum, or mean, of the members'
gradients), the straight-through gradient of the latent weights, in every float dtype, eagerly, in tf.function, under
XLA, to second order and in forward mode."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from ste.clustering import cluster_assign

DTYPES = ["float16", "bfloat16", "float32", "float64"]


def case(seed: int, shape=(5, 4), k: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    # Weights and centroids on a grid of eighths apart from the midpoints: exact in every dtype, no ties.
    w = (rng.integers(-16, 17, shape) + 0.25).astype(np.float64) / 8
    c = np.sort(rng.choice(np.arange(-16, 17), k, replace=False)).astype(np.float64) / 8
    dy = rng.integers(-4, 5, shape).astype(np.float64)
    return w, c, dy


def reference(w: np.ndarray, c: np.ndarray, dy: np.ndarray, aggregation: str = "SUM"):
    """Nearest centroid, element by element; each centroid's gradient summed (or averaged) over its members."""
    index = np.empty(w.shape, np.int64)
    for position, value in np.ndenumerate(w):
        index[position] = int(np.argmin(np.abs(value - c)))
    y = c[index]
    dc = np.zeros_like(c)
    count = np.zeros_like(c)
    for position, j in np.ndenumerate(index):
        dc[j] += dy[position]
        count[j] += 1
    if aggregation == "AVG":
        dc = np.where(count > 0, dc / np.maximum(count, 1), 0.0)
    return y, dy, dc


def run(w, c, dy, dtype, aggregation="SUM", mode="eager"):
    w, c, dy = (tf.constant(v, dtype) for v in (w, c, dy))

    def compute(w, c, dy):
        with tf.GradientTape() as tape:
            tape.watch([w, c])
            y = cluster_assign(w, c, aggregation=aggregation)
        return (y, *tape.gradient(y, [w, c], output_gradients=dy))

    if mode == "function":
        compute = tf.function(compute)
    elif mode == "xla":
        compute = tf.function(compute, jit_compile=True)
    return [tf.cast(t, tf.float64).numpy() for t in compute(w, c, dy)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["eager", "function", "xla"])
@pytest.mark.parametrize("aggregation", ["SUM", "AVG"])
def test_forward_and_gradients_match_numpy(dtype: str, mode: str, aggregation: str) -> None:
    w, c, dy = case(0, (6, 5), 5)
    expected = reference(w, c, dy, aggregation)
    got = run(w, c, dy, dtype, aggregation, mode)
    # SUM is exact (integers on a grid of eighths); AVG divides, rounded to the dtype's precision.
    eps = {"float16": 1e-3, "bfloat16": 8e-3, "float32": 1.2e-7, "float64": 2.3e-16}[dtype]
    tolerance = eps if aggregation == "AVG" else 0
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=tolerance, atol=tolerance)


def test_forward_has_at_most_k_values_and_empty_clusters_get_zero_gradient() -> None:
    w = np.linspace(-1, 1, 50)
    c = np.array([-0.5, 0.0, 0.5, 10.0])  # 10 is nobody's nearest centroid
    dy = np.ones_like(w)
    y, dw, dc = run(w, c, dy, "float64")
    assert set(np.unique(y)) <= set(c) and np.unique(y).size == 3
    assert dc[3] == 0.0 and dc.sum() == 50.0
    np.testing.assert_array_equal(dw, dy)


def test_a_tie_goes_to_the_first_centroid_as_tfmot_argmin() -> None:
    y, _, dc = run(np.array([0.5]), np.array([0.0, 1.0]), np.array([1.0]), "float32")
    assert y[0] == 0.0 and dc.tolist() == [1.0, 0.0]


@pytest.mark.parametrize("dtype", DTYPES)
def test_second_order_is_exact(dtype: str) -> None:
    # L = sum(y²): dL/dw = 2y (straight through), dL/dc_j = 2 Σ_members y. Then
    # d(Σ dL/dw)/dc_j = 2·n_j and d(Σ dL/dw)/dw = 2 (y's rule again); the index has no derivative.
    w, c, _ = case(1, (4, 6), 3)
    wt, ct = tf.constant(w, dtype), tf.constant(c, dtype)
    with tf.GradientTape(persistent=True) as outer:
        outer.watch([wt, ct])
        with tf.GradientTape() as inner:
            inner.watch([wt, ct])
            loss = tf.reduce_sum(cluster_assign(wt, ct) ** 2)
        gw, gc = inner.gradient(loss, [wt, ct])
        total = tf.reduce_sum(gw)
    d_w, d_c = outer.gradient(total, [wt, ct])
    index = np.argmin(np.abs(w[..., None] - c), axis=-1)
    counts = np.bincount(index.ravel(), minlength=c.size)
    y = c[index]
    np.testing.assert_allclose(tf.cast(gw, tf.float64).numpy(), 2 * y)
    np.testing.assert_allclose(tf.cast(gc, tf.float64).numpy(), [2 * y[index == j].sum() for j in range(c.size)])
    np.testing.assert_allclose(tf.cast(d_c, tf.float64).numpy(), 2 * counts)
    np.testing.assert_allclose(tf.cast(d_w, tf.float64).numpy(), np.full(w.shape, 2.0))


def test_forward_mode_is_the_transpose_of_the_gradient() -> None:
    w, c, _ = case(2, (3, 5), 4)
    rng = np.random.default_rng(9)
    tw, tc = rng.normal(size=w.shape), rng.normal(size=c.shape)
    wt, ct = tf.constant(w), tf.constant(c)
    with tf.autodiff.ForwardAccumulator([wt, ct], [tf.constant(tw), tf.constant(tc)]) as acc:
        y = cluster_assign(wt, ct)
    index = np.argmin(np.abs(w[..., None] - c), axis=-1)
    np.testing.assert_allclose(acc.jvp(y).numpy(), tw + tc[index])
