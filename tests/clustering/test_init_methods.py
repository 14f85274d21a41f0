"""The four centroid initializations against numpy transcriptions of TFMOT's ``clustering_centroids.py`` (loops,
written from TFMOT's code, not from ste's), and k-means++'s determinism and validity."""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from ste.clustering import CentroidInitialization, initial_centroids

LINEAR = CentroidInitialization.LINEAR
DENSITY = CentroidInitialization.DENSITY_BASED
KMEANS = CentroidInitialization.KMEANS_PLUS_PLUS
RANDOM = CentroidInitialization.RANDOM


def tfmot_linear(w: np.ndarray, k: int) -> np.ndarray:
    if k <= 0:
        return np.zeros(0, w.dtype)
    return np.linspace(w.min(), w.max(), k).astype(w.dtype)


def tfmot_density(w: np.ndarray, k: int, preserve_sparsity: bool = False) -> np.ndarray:
    """TFMOT's DensityBasedCentroidsInitialisation, point by point."""
    if k <= 0:
        return np.zeros(0, w.dtype)
    f = w.dtype.type
    lo, hi = w.min(), w.max()
    gap = f(0.01) if not preserve_sparsity else min(f(0.01), min(abs(lo), abs(hi)) / f(2))
    grid = np.linspace(lo - gap, hi + gap, 30).astype(w.dtype)
    cdf = np.array([np.count_nonzero(w <= x) / f(w.size) for x in grid], w.dtype)
    probabilities = np.linspace(f(0.01), f(1), k).astype(w.dtype)
    centroids = []
    for p in probabilities:
        i = int(np.searchsorted(cdf, p, side="right"))
        i_clipped = min(i, cdf.size - 1)
        i_previous = max(0, i_clipped - 1)
        x1, x2, y1, y2 = grid[i_clipped], grid[i_previous], cdf[i_clipped], cdf[i_previous]
        if y2 == y1:
            centroids.append(x1)
        else:
            a = (y2 - y1) / max(x2 - x1, f(0.001))
            b = y1 - x1 * ((y2 - y1) / max(x2 - x1, f(0.001)))
            centroids.append((y1 - b) / a)
    return np.array(centroids, w.dtype)


def tfmot_zero_centroid(w: np.ndarray, k: int, method) -> np.ndarray:
    """TFMOT's _zero_centroid_initialization."""
    negative, positive = w[w < 0], w[w > 0]
    nonzero = negative.size + positive.size
    if nonzero == 0:
        return np.zeros(1, w.dtype)
    n_negative = int(np.round((k - 1) * (negative.size / nonzero)))
    n_positive = k - 1 - n_negative
    return np.concatenate([method(negative, n_negative), np.zeros(1, w.dtype), method(positive, n_positive)])


def weights(seed: int, shape=(6, 7), dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 0.3, shape).astype(dtype)


@pytest.mark.parametrize("k", [1, 2, 5, 16])
@pytest.mark.parametrize("seed", [0, 1])
def test_linear_is_tfmot(k: int, seed: int) -> None:
    w = weights(seed)
    got = initial_centroids(tf.constant(w), k, LINEAR).numpy()
    np.testing.assert_allclose(got, tfmot_linear(w.ravel(), k), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("k", [1, 3, 8, 16, 32])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_density_based_is_tfmot(k: int, seed: int) -> None:
    w = weights(seed, (40, 9))
    got = initial_centroids(tf.constant(w), k, DENSITY).numpy()
    np.testing.assert_allclose(got, tfmot_density(w.ravel(), k), rtol=1e-5, atol=1e-6)


def test_density_based_on_a_skewed_distribution() -> None:
    w = np.random.default_rng(3).exponential(0.2, (300,)).astype(np.float32)
    got = initial_centroids(tf.constant(w), 8, DENSITY).numpy()
    np.testing.assert_allclose(got, tfmot_density(w, 8), rtol=1e-5, atol=1e-6)
    assert np.all(np.diff(got) >= 0)  # the inverse of a CDF is monotone


@pytest.mark.parametrize("method,reference", [(LINEAR, tfmot_linear), (DENSITY, None)])
@pytest.mark.parametrize("k", [2, 3, 8])
def test_preserve_sparsity_is_tfmot(method, reference, k: int) -> None:
    w = weights(4, (10, 10))
    w[np.abs(w) < 0.2] = 0.0  # a pruned kernel
    if reference is None:

        def reference(v: np.ndarray, n: int) -> np.ndarray:
            return tfmot_density(v, n, preserve_sparsity=True)

    got = initial_centroids(tf.constant(w), k, method, preserve_sparsity=True).numpy()
    expected = tfmot_zero_centroid(w.ravel(), k, reference)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert np.count_nonzero(got == 0.0) >= 1


def test_preserve_sparsity_all_zero_weights_give_zero_centroids() -> None:
    got = initial_centroids(tf.zeros((3, 3)), 4, LINEAR, preserve_sparsity=True).numpy()
    np.testing.assert_array_equal(got, np.zeros(4, np.float32))


@pytest.mark.parametrize("k", [1, 4, 16])
def test_kmeans_plus_plus_is_deterministic_and_draws_distinct_weights(k: int) -> None:
    w = weights(5, (12, 10))
    first = initial_centroids(tf.constant(w), k, KMEANS).numpy()
    second = initial_centroids(tf.constant(w), k, KMEANS).numpy()
    np.testing.assert_array_equal(first, second)  # TFMOT's fixed seed
    assert first.shape == (k,)
    assert np.all(np.isin(first, w))  # k-means++ draws its centroids among the points
    assert np.unique(first).size == k  # a drawn point has distance 0 and is never drawn again


def test_kmeans_plus_plus_spreads_over_separated_groups() -> None:
    # Four tight, far-apart groups: D²-sampling picks one point of each (a uniform draw of 4 points among 400 would
    # miss a group with probability ~ 0.9).
    rng = np.random.default_rng(6)
    w = np.concatenate([c + 0.001 * rng.normal(size=100) for c in (-3.0, -1.0, 1.0, 3.0)]).astype(np.float32)
    got = np.sort(initial_centroids(tf.constant(w), 4, KMEANS).numpy())
    np.testing.assert_allclose(got, [-3.0, -1.0, 1.0, 3.0], atol=0.01)


def test_random_is_uniform_in_the_range_and_seeded_by_keras() -> None:
    w = weights(7, (20, 20))
    keras.utils.set_random_seed(11)
    first = initial_centroids(tf.constant(w), 64, RANDOM).numpy()
    keras.utils.set_random_seed(11)
    second = initial_centroids(tf.constant(w), 64, RANDOM).numpy()
    np.testing.assert_array_equal(first, second)
    assert first.min() >= w.min() and first.max() <= w.max()
    assert np.unique(first).size == 64


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("method", list(CentroidInitialization))
def test_every_dtype_gives_centroids_of_that_dtype(dtype: str, method: CentroidInitialization) -> None:
    w32 = weights(8, (8, 8))
    got = initial_centroids(tf.cast(tf.constant(w32), dtype), 5, method)
    assert got.dtype == tf.as_dtype(dtype) and got.shape == (5,)
    values = tf.cast(got, tf.float64).numpy()
    assert np.all(np.isfinite(values))
    tolerance = 0.02 if dtype in ("float16", "bfloat16") else 1e-6
    assert values.min() >= w32.min() - 0.02 - tolerance and values.max() <= w32.max() + 0.02 + tolerance
    if method is LINEAR:
        rounded = tf.cast(tf.cast(w32, dtype), tf.float64).numpy()  # the weights as the dtype holds them
        reference = tfmot_linear(rounded.ravel(), 5)
        np.testing.assert_allclose(values, reference, atol=tolerance)


DATA = Path(__file__).resolve().parents[1] / "data" / "tfmot_cluster_centroids.npz"


def _tfmot_cases() -> list[str]:
    with np.load(DATA) as data:
        return [key for key in data.files if not key.startswith("w_")]


@pytest.mark.parametrize("key", _tfmot_cases())
def test_centroids_equal_tfmot_0_8_s_own(key: str) -> None:
    # Recorded from TFMOT 0.8 itself (tests/clustering/make_tfmot_centroids.py): LINEAR, DENSITY_BASED and
    # KMEANS_PLUS_PLUS (the same kernel and seed), with and without preserve_sparsity.
    name, method, k, preserve_sparsity = key.split("|")
    with np.load(DATA) as data:
        w, expected = data[f"w_{name}"], data[key]
    got = initial_centroids(tf.constant(w), int(k), CentroidInitialization[method], preserve_sparsity == "True")
    np.testing.assert_array_equal(got.numpy(), expected)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("preserve_sparsity", [False, True])
def test_kmeans_plus_plus_centroids_are_weights_in_every_dtype(dtype: str, preserve_sparsity: bool) -> None:
    """The docs' promise: each k-means++ centroid is one of the weights, exactly (a float64 kernel's centroids are
    not the float32 roundings the kernel op draws among)."""
    w = np.random.default_rng(9).normal(size=(16, 12))
    if preserve_sparsity:
        w[np.abs(w) < 0.5] = 0.0
    values = tf.constant(w, dtype)
    got = initial_centroids(values, 8, KMEANS, preserve_sparsity)
    assert got.dtype == tf.as_dtype(dtype)
    held = tf.cast(values, tf.float64).numpy().ravel()
    for centroid in tf.cast(got, tf.float64).numpy():
        assert np.any(held == centroid), (centroid, np.abs(held - centroid).min())
    if preserve_sparsity:
        assert np.count_nonzero(tf.cast(got, tf.float64).numpy() == 0) >= 1
