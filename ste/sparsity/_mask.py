"""The pruning mask: which weights are kept (by magnitude, in blocks, or N:M), and the straight-through op that
applies it.

Masks keep exactly ``k = max(round(n·(1 − sparsity)), 1)`` of the ``n`` weights (or blocks) with the largest
magnitude, as TFMOT's ``pruning_impl`` counts them; where magnitudes tie, the weight that comes first in row-major
order is kept (TFMOT keeps every weight tied with the threshold, so ties can leave it with fewer zeros). Blocks are
pooled as TFMOT pools them: by their mean (``"AVG"``) or largest (``"MAX"``) magnitude, with ``tf.nn.pool``'s
``SAME`` padding (over the rows, then over the columns). Where a block size does not divide the weight, ``SAME`` puts
half of the padding (rounded down) before the first row or column and the rest after the last, so the pooling windows
are shifted by that much, and a window averages only the weights inside the tensor; the kept blocks are then expanded
from the first row and column and cut to the weight's shape, as TFMOT does. ``(m, n)`` N:M sparsity (TFMOT's
``sparsity_m_by_n``) zeroes the ``m`` smallest of every ``n`` consecutive weights along the input-channel axis.

The op applying the mask is an ``ste`` op: its forward is ``weight · mask``, and its rule is the gradient choice:

* ``"masked"`` (TFMOT's): ``dweight = dy · mask``; pruned weights get no gradient.
* ``"sr_ste"`` (SR-STE, Zhou et al., ICLR 2021): ``dweight = dy + decay · (1 − mask) · weight``; every weight gets
  the gradient of the masked weight straight through, and the pruned ones also decay, so the mask can change.

SR-STE's decay does not depend on ``dy``: it is the gradient of the penalty ``decay/2 · Σ (1 − mask) · weight²``
added to whatever is differentiated, not a vector-Jacobian product. So that a gradient of the gradient sees that
penalty once, the rule adds the decay in the backward pass that computes the gradient, and not again when an
enclosing ``tf.GradientTape`` that recorded that pass differentiates through the op's forward a second time: the
second derivative is then ``∂(dy)/∂weight + decay · (1 − mask)``, as central differences of the gradient give.
"""

from __future__ import annotations

import weakref
from typing import Any

import tensorflow as tf
from tensorflow.python.eager import record

from .._core._dsl import forward

__all__ = ["GRADIENTS", "apply_mask", "magnitude_mask", "n_by_m_mask", "sr_ste"]


def masked_weight(weight: Any, mask: Any, decay: float = 0.0) -> Any:
    """``weight · mask``; the gradient reaches the kept weights only (``dy · mask``)."""
    return weight * tf.cast(mask, weight.dtype)


def sr_ste_weight(weight: Any, mask: Any, decay: float = 0.0) -> Any:
    """``weight · mask``; the gradient is ``dy + decay · (1 − mask) · weight`` (SR-STE)."""
    return weight * tf.cast(mask, weight.dtype)


def _masked_rule(dy: Any, weight: Any, mask: Any, decay: float = 0.0) -> Any:
    return dy * tf.cast(mask, dy.dtype), None


# The forward calls (keyed by the id of the weight tensor each one received) whose backward pass was recorded by an
# enclosing tape: that tape differentiates the decay added there, so its own pass through the forward adds none.
_RECORDED: dict[int, Any] = {}


def _adds_decay(weight: Any) -> bool:
    """Whether this backward pass through an ``sr_ste`` forward adds the decay (see the module docstring)."""
    key = id(weight)
    if record.should_record_backprop([weight]):  # an enclosing tape records this pass: it will differentiate it
        if key not in _RECORDED:
            _RECORDED[key] = weakref.finalize(weight, _RECORDED.pop, key, None)
        return True
    return key not in _RECORDED


def _sr_ste_rule(dy: Any, weight: Any, mask: Any, decay: float = 0.0) -> Any:
    if not _adds_decay(weight):
        return dy, None
    pruned = 1.0 - tf.cast(mask, dy.dtype)
    return dy + tf.convert_to_tensor(decay, dy.dtype) * pruned * tf.cast(weight, dy.dtype), None


apply_mask = forward(masked_weight).backward(_masked_rule)
_sr_ste_op = forward(sr_ste_weight).backward(_sr_ste_rule)


def sr_ste(weight: Any, mask: Any, decay: float = 0.0) -> Any:
    """``weight · mask``; the gradient is ``dy + decay · (1 − mask) · weight`` (SR-STE, Zhou et al., ICLR 2021),
    the decay counted once by gradients of gradients (see the module docstring)."""
    # A tensor of its own for each call: the backward pass of this call is told apart from another call's by it.
    return _sr_ste_op(tf.identity(weight), mask, decay=decay)


GRADIENTS: dict[str, Any] = {"masked": apply_mask, "sr_ste": sr_ste}


def _magnitude(weight: Any) -> tf.Tensor:
    """|weight| in float32 (float64 for float64 weights), so that half-precision ties are not created by rounding
    the sort keys further."""
    dtype = tf.float64 if weight.dtype == tf.float64 else tf.float32
    return tf.abs(tf.cast(weight, dtype))


def kept_count(size: int, sparsity: Any) -> tf.Tensor:
    """``max(round(size·(1 − sparsity)), 1)`` (round half to even), computed in float32 as TFMOT does."""
    kept = tf.round(tf.cast(size, tf.float32) * (1.0 - tf.cast(sparsity, tf.float32)))
    return tf.cast(tf.maximum(kept, 1.0), tf.int32)


def _top_mask(scores: tf.Tensor, k: Any) -> tuple[tf.Tensor, tf.Tensor]:
    """A boolean mask of ``scores``' shape keeping its ``k`` largest entries (earlier index first on ties), and the
    k-th largest score."""
    flat = tf.reshape(scores, [-1])
    order = tf.argsort(flat, direction="DESCENDING", stable=True)
    size = tf.size(flat)
    ranks = tf.scatter_nd(order[:, None], tf.range(size), [size])
    threshold = tf.gather(flat, order[k - 1])
    return tf.reshape(ranks < k, tf.shape(scores)), threshold


def _pool(magnitude: tf.Tensor, block: tuple[int, int], pooling: str) -> tf.Tensor:
    """TFMOT's ``factorized_pool``: ``tf.nn.pool`` with ``SAME`` padding and stride = window, over the rows, then
    over the columns. ``SAME`` splits the padding of a partial block, ``total // 2`` before the first row (column) and
    the rest after the last, and an ``AVG`` window averages only the weights inside the tensor."""
    rows, cols = magnitude.shape
    bh, bw = block
    pooled = tf.nn.pool(tf.reshape(magnitude, [1, 1, rows, cols]), [1, bh], pooling, strides=[1, bh], padding="SAME")
    pooled = tf.nn.pool(tf.transpose(pooled, [0, 1, 3, 2]), [1, bw], pooling, strides=[1, bw], padding="SAME")
    return tf.transpose(pooled, [0, 1, 3, 2])[0, 0]


def _scores(magnitude: tf.Tensor, previous: Any) -> tf.Tensor:
    """``magnitude`` with the entries ``previous`` prunes (False) set to −1, below every kept magnitude."""
    if previous is None:
        return magnitude
    return tf.where(tf.cast(previous, tf.bool), magnitude, -tf.ones_like(magnitude))


def magnitude_keep(
    weight: Any,
    sparsity: Any,
    block_size: tuple[int, int] = (1, 1),
    block_pooling_type: str = "AVG",
    previous: Any = None,
) -> tuple[tf.Tensor, tf.Tensor]:
    """:func:`magnitude_mask` as a boolean mask (True: kept), and the threshold in ``weight``'s dtype.

    With ``previous`` (the current boolean mask) the magnitudes are those of ``weight · previous``, and a weight (or a
    block) that ``previous`` prunes ranks below every kept one: it stays pruned unless fewer weights are kept than the
    new count asks for (the sparsity fell)."""
    magnitude = _magnitude(weight)
    if previous is not None:
        magnitude = tf.where(tf.cast(previous, tf.bool), magnitude, tf.zeros_like(magnitude))
    if tuple(block_size) == (1, 1):
        scores = _scores(magnitude, previous)
        keep, threshold = _top_mask(scores, kept_count(int(magnitude.shape.num_elements()), sparsity))
        return keep, tf.cast(tf.maximum(threshold, 0), weight.dtype)
    bh, bw = int(block_size[0]), int(block_size[1])
    pooled = _pool(magnitude, (bh, bw), block_pooling_type)
    # a block of the previous mask is kept or pruned whole; its first entry says which (blocks start at row 0)
    scores = _scores(pooled, None if previous is None else previous[::bh, ::bw])
    keep, threshold = _top_mask(scores, kept_count(int(pooled.shape.num_elements()), sparsity))
    expanded = tf.repeat(tf.repeat(keep, bh, axis=0), bw, axis=1)
    rows, cols = magnitude.shape
    return expanded[:rows, :cols], tf.cast(tf.maximum(threshold, 0), weight.dtype)


def magnitude_mask(
    weight: Any, sparsity: Any, block_size: tuple[int, int] = (1, 1), block_pooling_type: str = "AVG"
) -> tuple[tf.Tensor, tf.Tensor]:
    """The mask (in ``weight``'s dtype) keeping the weights (or blocks of a rank-2 weight) of largest magnitude so
    that ``sparsity`` of them are zero, and the threshold magnitude (the smallest one kept)."""
    keep, threshold = magnitude_keep(weight, sparsity, block_size, block_pooling_type)
    return tf.cast(keep, weight.dtype), threshold


def n_by_m_mask(weight: Any, zeros: int, group: int, axis: int) -> tf.Tensor:
    """The mask zeroing the ``zeros`` smallest-magnitude weights of every ``group`` consecutive ones along ``axis``
    (earlier position kept on ties); ``weight.shape[axis]`` must be a multiple of ``group``."""
    return tf.cast(n_by_m_keep(weight, zeros, group, axis), weight.dtype)


def n_by_m_keep(weight: Any, zeros: int, group: int, axis: int, previous: Any = None) -> tf.Tensor:
    """:func:`n_by_m_mask` as a boolean mask (True: kept). With ``previous`` (the current boolean N:M mask) the weights
    it prunes stay pruned (they rank below every kept one of their group)."""
    magnitude = _scores(_magnitude(weight), previous)
    rank = magnitude.shape.rank
    axis = axis % rank
    perm = [d for d in range(rank) if d != axis] + [axis]
    moved = tf.transpose(magnitude, perm)
    groups = tf.reshape(moved, [-1, group])
    order = tf.argsort(groups, axis=-1, direction="DESCENDING", stable=True)
    ranks = tf.argsort(order, axis=-1, stable=True)  # the position of each weight in its group's order
    keep = tf.reshape(ranks < group - zeros, tf.shape(moved))
    inverse = [perm.index(d) for d in range(rank)]
    return tf.transpose(keep, inverse)
