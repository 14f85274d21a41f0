"""The rate-coded cross-entropy loss: the output spikes of every step read as logits (snnTorch's ``ce_rate_loss``).

``L = (1/T)·Σ_t CE(softmax(S[:, t]), y)``: at each step the correct class's neuron is pushed to fire and the others
to stay silent, so the class with the highest firing rate wins. ``from_counts=True`` instead takes the spike counts
over all steps as logits (snnTorch's ``ce_count_loss``).
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from .._common._arguments import check_bool

__all__ = ["RateCrossEntropy", "rate_cross_entropy"]


def rate_cross_entropy(y_true: Any, spikes: Any, *, sparse: bool = True, from_counts: bool = False) -> tf.Tensor:
    """Per-sample rate-coded cross-entropy of ``spikes[batch, time, classes]`` against labels ``y_true``.

    Args:
        y_true: integer class labels ``[batch]`` (``sparse=True``) or one-hot ``[batch, classes]``.
        spikes: the output layer's spike train.
        from_counts: use the spike count over time as the logits instead of averaging per-step losses.
    """
    sparse = check_bool("rate_cross_entropy", "sparse", sparse)
    from_counts = check_bool("rate_cross_entropy", "from_counts", from_counts)
    spikes = tf.convert_to_tensor(spikes)
    logits = tf.cast(spikes, tf.float32)
    if sparse:
        labels = tf.cast(tf.reshape(y_true, [-1]), tf.int32)
        if from_counts:
            return tf.nn.sparse_softmax_cross_entropy_with_logits(labels, tf.reduce_sum(logits, axis=1))
        steps = tf.shape(logits)[1]
        per_step = tf.nn.sparse_softmax_cross_entropy_with_logits(tf.repeat(labels[:, None], steps, axis=1), logits)
    else:
        target = tf.cast(y_true, tf.float32)
        if from_counts:
            return tf.nn.softmax_cross_entropy_with_logits(target, tf.reduce_sum(logits, axis=1))
        per_step = tf.nn.softmax_cross_entropy_with_logits(target[:, None, :] + tf.zeros_like(logits), logits)
    return tf.reduce_mean(per_step, axis=1)


@keras.saving.register_keras_serializable(package="ste.spiking")
class RateCrossEntropy(keras.losses.Loss):  # type: ignore[misc]
    """Keras loss for ``model.compile(loss=...)``: :func:`rate_cross_entropy` averaged over the batch."""

    def __init__(self, sparse: bool = True, from_counts: bool = False, name: str = "rate_cross_entropy", **kwargs: Any):
        super().__init__(name=name, **kwargs)
        self.sparse = check_bool("RateCrossEntropy", "sparse", sparse)
        self.from_counts = check_bool("RateCrossEntropy", "from_counts", from_counts)

    def call(self, y_true: Any, y_pred: Any) -> tf.Tensor:
        return rate_cross_entropy(y_true, y_pred, sparse=self.sparse, from_counts=self.from_counts)

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.update(sparse=self.sparse, from_counts=self.from_counts)
        return config
