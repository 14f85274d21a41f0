"""The initial centroids of a weight tensor, by TFMOT's four methods (``clustering_centroids.py``), computed eagerly.

The four are registered in :data:`ste.clustering._init_names.INITS` under ``"linear"``, ``"random"``,
``"density_based"`` and ``"kmeans_plus_plus"``; a function registered with :func:`ste.clustering.register_init`
runs the same way. Every method works on the flattened weights, in float32 (float64 for a float64 weight) and returns
``k`` centroids in the weight's dtype:

* ``LINEAR``: ``linspace(min(w), max(w), k)``.
* ``RANDOM``: ``uniform(min(w), max(w))``, ``k`` draws from Keras's seed generator.
* ``DENSITY_BASED``: the empirical CDF ``F(x) = #(w <= x) / n`` on 30 grid points ``linspace(min(w) - gap,
  max(w) + gap, 30)`` (``gap = 0.01``), probabilities ``linspace(0.01, 1, k)`` looked up with
  ``searchsorted(F, p, side="right")`` → ``i``; each centroid is TFMOT's interpolation between grid points
  ``min(i, 29)`` and the one before it (which lands on grid point ``min(i, 29)``).
* ``KMEANS_PLUS_PLUS``: TensorFlow's ``KmeansPlusPlusInitialization`` kernel on the weights, seed 9,
  ``2 + log(k)`` candidates per draw (TFMOT's call): each centroid is one of the weights, in every dtype (the kernel
  draws among the weights rounded to float32; a float64 centroid is the weight itself, not its rounding).

With ``preserve_sparsity`` (TFMOT's sparsity-aware initialization) one centroid is exactly 0, and the other ``k - 1``
are split between the negative and the positive weights in proportion to their counts (``round`` half to even),
each side initialized by the method on its own; the order is negative, zero, positive. ``DENSITY_BASED``'s gap
becomes ``min(0.01, min(|min|, |max|) / 2)`` of the side.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

from ..errors import ParameterError
from ._init_names import INITS, CentroidInit, init_name

__all__ = ["initial_centroids"]

_GRID = 30  # TFMOT's number of CDF interpolation nodes
_KMEANS_SEED = 9  # TFMOT's seed for k-means++


def _linear(w: tf.Tensor, k: int, preserve_sparsity: bool) -> tf.Tensor:
    return tf.linspace(tf.reduce_min(w), tf.reduce_max(w), k)


def _random(w: tf.Tensor, k: int, preserve_sparsity: bool) -> tf.Tensor:
    low, high = tf.reduce_min(w), tf.reduce_max(w)
    return tf.convert_to_tensor(keras.random.uniform((k,), minval=low, maxval=high, dtype=w.dtype.name))


def _density_based(w: tf.Tensor, k: int, preserve_sparsity: bool) -> tf.Tensor:
    low, high = tf.reduce_min(w), tf.reduce_max(w)
    gap = tf.constant(0.01, w.dtype)
    if preserve_sparsity:
        gap = tf.minimum(gap, tf.minimum(tf.abs(low), tf.abs(high)) / 2)
    grid = tf.linspace(low - gap, high + gap, _GRID)
    size = tf.cast(tf.size(w), w.dtype)
    cdf = tf.reduce_sum(tf.cast(w[None, :] <= grid[:, None], w.dtype), axis=1) / size
    probabilities = tf.linspace(tf.constant(0.01, w.dtype), tf.constant(1.0, w.dtype), k)
    index = tf.searchsorted(cdf, probabilities, side="right")
    clipped = tf.minimum(index, _GRID - 1)
    previous = tf.maximum(0, clipped - 1)
    x1, x2 = tf.gather(grid, clipped), tf.gather(grid, previous)
    y1, y2 = tf.gather(cdf, clipped), tf.gather(cdf, previous)
    # TFMOT's TFLinearEquationSolver through (x1, y1) and (x2, y2), solved for x at y1.
    run = tf.maximum(x2 - x1, tf.constant(0.001, w.dtype))
    slope = (y2 - y1) / run
    intercept = y1 - x1 * ((y2 - y1) / run)
    return tf.where(tf.equal(y2, y1), x1, (y1 - intercept) / tf.where(tf.equal(slope, 0), tf.ones_like(slope), slope))


def _kmeans_plus_plus(w: tf.Tensor, k: int, preserve_sparsity: bool) -> tf.Tensor:
    points = tf.reshape(tf.cast(w, tf.float32), [-1, 1])  # the kernel takes float32 points only
    drawn = min(k, int(points.shape[0]))  # the kernel cannot draw more centroids than there are points
    centroids = tf.raw_ops.KmeansPlusPlusInitialization(
        points=points,
        num_to_sample=tf.constant(drawn, tf.int64),
        seed=tf.constant(_KMEANS_SEED, tf.int64),
        num_retries_per_sample=tf.constant(-1, tf.int64),
    )
    # Each drawn point is a weight rounded to float32: take that weight itself (the first one that rounds to it), so
    # a float64 centroid is one of the weights and not its float32 rounding.
    same = tf.equal(tf.reshape(centroids, [drawn, 1]), tf.reshape(points, [1, -1]))
    centroids = tf.gather(w, tf.argmax(tf.cast(same, tf.int32), axis=1))
    if drawn < k:  # only a side of a sparsity-preserving split can be this small; repeat its largest centroid
        centroids = tf.concat([centroids, tf.fill([k - drawn], tf.reduce_max(centroids))], axis=0)
    return centroids


for _name, _init in (
    ("linear", _linear),
    ("random", _random),
    ("density_based", _density_based),
    ("kmeans_plus_plus", _kmeans_plus_plus),
):
    INITS.register(_name, _init)


def _interval(name: str, init: CentroidInit, w: tf.Tensor, k: int, preserve_sparsity: bool) -> tf.Tensor:
    if k <= 0:
        return tf.zeros([0], w.dtype)
    centroids = tf.cast(tf.convert_to_tensor(init(w, k, preserve_sparsity)), w.dtype)
    if centroids.shape.rank != 1 or centroids.shape[0] != k:
        raise ParameterError(
            f"ste.clustering.initial_centroids: the initialization {name!r} ({getattr(init, '__qualname__', init)}) "
            f"returned centroids of shape {tuple(centroids.shape)} for number_of_clusters={k}; expected shape "
            f"({k},). Fix: return number_of_clusters centroids as a 1-D tensor."
        )
    return centroids


def _zero_centroid(name: str, init: CentroidInit, w: tf.Tensor, k: int) -> tf.Tensor:
    negative = tf.boolean_mask(w, w < 0)
    positive = tf.boolean_mask(w, w > 0)
    nonzero = int(tf.size(negative)) + int(tf.size(positive))
    zero = tf.zeros([1], w.dtype)
    if nonzero == 0:
        return zero
    n_negative = int(np.round((k - 1) * (int(tf.size(negative)) / nonzero)))  # numpy and TF both round half to even
    n_positive = k - 1 - n_negative
    return tf.concat(
        [_interval(name, init, negative, n_negative, True), zero, _interval(name, init, positive, n_positive, True)],
        axis=0,
    )


def initial_centroids(weights: tf.Tensor, k: int, method: Any, preserve_sparsity: bool = False) -> tf.Tensor:
    """``k`` initial centroids of ``weights`` (any shape) by ``method``, in the weights' dtype (see the module
    docstring). Runs eagerly (inside ``tf.init_scope``).

    Args:
        weights: the weight tensor.
        k: the number of centroids.
        method: a :class:`CentroidInitialization` member, its name or string value, or a name registered with
            :func:`ste.clustering.register_init`.
        preserve_sparsity: one centroid exactly 0, the others split between the negative and the positive weights.
    """
    name = init_name(method, "ste.clustering.initial_centroids", "method")
    init = INITS.lookup(name)
    with tf.init_scope():
        dtype = tf.as_dtype(weights.dtype)
        compute = tf.float64 if dtype == tf.float64 else tf.float32
        w = tf.reshape(tf.cast(tf.convert_to_tensor(weights), compute), [-1])
        if preserve_sparsity:
            centroids = _zero_centroid(name, init, w, k)
        else:
            centroids = _interval(name, init, w, k, False)
        missing = k - int(centroids.shape[0])
        if missing > 0:  # every weight is zero: the zero centroid only
            centroids = tf.concat([centroids, tf.zeros([missing], compute)], axis=0)
        return tf.cast(centroids, dtype)
