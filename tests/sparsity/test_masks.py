"""The masks against numpy: exactly max(round(n·(1 − s)), 1) weights (or blocks) kept by magnitude, blocks pooled by
AVG or MAX, and N:M checked group by group; in every floating dtype, in tf.function and under XLA."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import ste

S = ste.sparsity
DTYPES = ["float16", "bfloat16", "float32", "float64"]


def numpy_kept(size: int, sparsity: float) -> int:
    return max(int(np.round(np.float32(size) * (np.float32(1) - np.float32(sparsity)))), 1)


def numpy_mask(w: np.ndarray, sparsity: float) -> np.ndarray:
    """Keep the k largest |w| (distinct magnitudes: no ties)."""
    flat = np.abs(w).ravel()
    k = numpy_kept(flat.size, sparsity)
    keep = np.zeros(flat.size, bool)
    keep[np.argsort(-flat, kind="stable")[:k]] = True
    return keep.reshape(w.shape)


def distinct(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Weights with distinct magnitudes, exactly representable in bfloat16 and float16."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    values = (rng.permutation(n) + 1).astype(np.float64) / 64  # multiples of 1/64 up to n/64: exact for n <= 256
    return (values * rng.choice([-1.0, 1.0], n)).reshape(shape)


@pytest.mark.parametrize("sparsity", [0.0, 0.1, 0.25, 0.5, 0.8, 0.9, 0.99])
@pytest.mark.parametrize("shape", [(7, 5), (3, 3, 4, 6), (13,)])
def test_magnitude_mask_keeps_the_scheduled_count_by_magnitude(sparsity: float, shape: tuple[int, ...]) -> None:
    w = np.random.default_rng(1).normal(size=shape)
    mask, threshold = S.magnitude_mask(tf.constant(w, tf.float32), sparsity)
    expected = numpy_mask(w.astype(np.float32), sparsity)
    np.testing.assert_array_equal(mask.numpy().astype(bool), expected)
    assert int(mask.numpy().sum()) == numpy_kept(w.size, sparsity)
    assert np.isclose(threshold.numpy(), np.abs(w.astype(np.float32))[expected].min())


@pytest.mark.parametrize("dtype", DTYPES)
def test_masks_are_the_same_in_every_dtype(dtype: str) -> None:
    w = distinct((8, 16))
    mask, _ = S.magnitude_mask(tf.constant(w, dtype), 0.7)
    assert mask.dtype == tf.as_dtype(dtype)
    np.testing.assert_array_equal(mask.numpy().astype(bool), numpy_mask(w, 0.7))
    nm = S.n_by_m_mask(tf.constant(w, dtype), 2, 4, axis=0)
    assert nm.dtype == tf.as_dtype(dtype)
    np.testing.assert_array_equal(nm.numpy().astype(bool), numpy_n_by_m(w, 2, 4, 0))


def test_ties_keep_exactly_k_weights_first_index_first() -> None:
    w = np.array([1.0, -1.0, 1.0, 1.0, 0.5, -1.0])
    mask, _ = S.magnitude_mask(tf.constant(w, tf.float32), 0.5)
    np.testing.assert_array_equal(mask.numpy(), [1, 1, 1, 0, 0, 0])


def numpy_pool(a: np.ndarray, block: tuple[int, int], pooling: str) -> np.ndarray:
    """TensorFlow's SAME pooling, as TFMOT uses it: p // 2 of the p padding rows (columns) go before the first."""
    rows, cols = a.shape
    out = np.zeros((-(-rows // block[0]), -(-cols // block[1])))
    top, left = (out.shape[0] * block[0] - rows) // 2, (out.shape[1] * block[1] - cols) // 2
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            r, c = i * block[0] - top, j * block[1] - left
            cell = a[max(r, 0) : r + block[0], max(c, 0) : c + block[1]]
            out[i, j] = cell.max() if pooling == "MAX" else cell.mean()
    return out


@pytest.mark.parametrize("pooling", ["AVG", "MAX"])
@pytest.mark.parametrize("block, shape", [((2, 2), (8, 6)), ((1, 4), (5, 12)), ((3, 2), (7, 5)), ((4, 1), (9, 3))])
def test_block_masks_pool_blocks_and_keep_the_scheduled_count(pooling: str, block, shape) -> None:
    w = np.random.default_rng(2).normal(size=shape)
    sparsity = 0.6
    mask, _ = S.magnitude_mask(tf.constant(w, tf.float64), sparsity, block, pooling)
    pooled = numpy_pool(np.abs(w), block, pooling)
    keep_blocks = numpy_mask(pooled, sparsity)
    expected = np.kron(keep_blocks, np.ones(block, bool))[: shape[0], : shape[1]]
    np.testing.assert_array_equal(mask.numpy().astype(bool), expected)
    assert keep_blocks.sum() == numpy_kept(pooled.size, sparsity)


def numpy_n_by_m(w: np.ndarray, zeros: int, group: int, axis: int) -> np.ndarray:
    """Group by group along `axis`: the `zeros` smallest |w| of each `group` consecutive weights are dropped."""
    moved = np.moveaxis(np.abs(w), axis, -1)
    keep = np.ones(moved.shape, bool)
    for index in np.ndindex(moved.shape[:-1]):
        for start in range(0, moved.shape[-1], group):
            cell = moved[index][start : start + group]
            dropped = np.argsort(cell, kind="stable")[:zeros]  # distinct values in these tests
            for d in dropped:
                keep[(*index, start + d)] = False
    return np.moveaxis(keep, -1, axis)


@pytest.mark.parametrize("zeros, group", [(2, 4), (1, 4), (3, 4), (4, 8), (1, 2), (5, 16)])
@pytest.mark.parametrize("shape, axis", [((16, 5), 0), ((3, 3, 16, 4), -2), ((2, 4, 16), -1)])
def test_n_by_m_masks_hold_m_zeros_in_every_group(zeros: int, group: int, shape, axis: int) -> None:
    w = np.random.default_rng(3).normal(size=shape)
    mask = S.n_by_m_mask(tf.constant(w, tf.float32), zeros, group, axis).numpy()
    np.testing.assert_array_equal(mask.astype(bool), numpy_n_by_m(w, zeros, group, axis))
    groups = np.moveaxis(mask, axis, -1).reshape(-1, group)
    assert (groups.sum(axis=1) == group - zeros).all()  # every group, one by one


def test_masks_compute_in_tf_function_and_xla() -> None:
    w = np.random.default_rng(4).normal(size=(12, 8)).astype(np.float32)
    for jit in (False, True):
        f = tf.function(lambda x, s: S.magnitude_mask(x, s)[0], jit_compile=jit)
        np.testing.assert_array_equal(f(tf.constant(w), tf.constant(0.75)).numpy().astype(bool), numpy_mask(w, 0.75))
        g = tf.function(lambda x: S.n_by_m_mask(x, 2, 4, 0), jit_compile=jit)
        np.testing.assert_array_equal(g(tf.constant(w)).numpy().astype(bool), numpy_n_by_m(w, 2, 4, 0))
        h = tf.function(lambda x: S.magnitude_mask(x, 0.5, (2, 2), "MAX")[0], jit_compile=jit)
        expected = np.kron(numpy_mask(numpy_pool(np.abs(w), (2, 2), "MAX"), 0.5), np.ones((2, 2), bool))
        np.testing.assert_array_equal(h(tf.constant(w)).numpy().astype(bool), expected)
