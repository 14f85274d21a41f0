"""The cluster assignment as an ste op: ``cluster_assign(weights, centroids)``.

Forward (TFMOT's ``get_pulling_indices`` and ``get_clustered_weight``)::

    index = argmin_j |w - c_j|          (the first centroid on a tie)
    y     = c[index]                    (so y has at most k distinct values)

Backward, the vector-Jacobian product of TFMOT's op::

    dL/dw   = dL/dy                     (straight through to the latent weights)
    dL/dc_j = sum of dL/dy over the weights with index j      (``aggregation="SUM"``)
              that sum / the cluster's size (0 for an empty cluster)    (``aggregation="AVG"``)

Both are linear in ``dL/dy`` and the index is piecewise constant, so differentiating the rule again is exact: the
second derivative of ``w`` and ``c`` through the index is zero, and the rule's own ops (a gather, a segment sum)
carry the rest. The JVP is ``t_w + t_c[index]`` (SUM), for forward-mode autodiff and ``tf.vectorized_map``.
"""

from __future__ import annotations

import tensorflow as tf

from .._core._dsl import forward

__all__ = ["cluster_assign", "cluster_indices"]


def cluster_indices(weights: tf.Tensor, centroids: tf.Tensor) -> tf.Tensor:
    """The index of each weight's nearest centroid (int32, the weights' shape; the first one on a tie).

    Half-precision distances are compared in float32: rounded to bfloat16, two distances that differ can become
    equal, and the tie would send a weight to a farther centroid."""
    if tf.as_dtype(weights.dtype) in (tf.float16, tf.bfloat16) or tf.as_dtype(centroids.dtype) in (
        tf.float16,
        tf.bfloat16,
    ):
        weights, centroids = tf.cast(weights, tf.float32), tf.cast(centroids, tf.float32)
    return tf.argmin(tf.abs(tf.expand_dims(weights, -1) - centroids), axis=-1, output_type=tf.int32)


def _cluster_assign(weights: tf.Tensor, centroids: tf.Tensor, aggregation: str = "SUM") -> tf.Tensor:
    return tf.gather(centroids, cluster_indices(weights, centroids))


def _cluster_assign_vjp(
    dy: tf.Tensor, weights: tf.Tensor, centroids: tf.Tensor, aggregation: str = "SUM"
) -> tuple[tf.Tensor, tf.Tensor]:
    index = tf.reshape(cluster_indices(weights, centroids), [-1])
    k = tf.shape(centroids)[0]
    dc = tf.math.unsorted_segment_sum(tf.reshape(dy, [-1]), index, k)
    if aggregation == "AVG":
        sizes = tf.math.unsorted_segment_sum(tf.ones_like(index, dy.dtype), index, k)
        dc = tf.math.divide_no_nan(dc, sizes)
    return dy, dc


def _cluster_assign_jvp(
    tangents: tuple[tf.Tensor, tf.Tensor], weights: tf.Tensor, centroids: tf.Tensor, aggregation: str = "SUM"
) -> tf.Tensor:
    t_w, t_c = tangents
    index = cluster_indices(weights, centroids)
    if aggregation == "AVG":
        sizes = tf.math.unsorted_segment_sum(
            tf.ones([tf.size(index)], t_c.dtype), tf.reshape(index, [-1]), tf.shape(centroids)[0]
        )
        t_c = tf.math.divide_no_nan(t_c, sizes)
    return t_w + tf.gather(t_c, index)


#: ``cluster_assign(weights, centroids, aggregation="SUM")``: the clustered weights (see the module docstring).
cluster_assign = forward(_cluster_assign).backward(_cluster_assign_vjp, jvp=_cluster_assign_jvp)
