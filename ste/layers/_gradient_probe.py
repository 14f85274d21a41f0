"""Whether a quantizer's gradient vanishes far out (the probe behind the missing-constraint warning)."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

__all__ = ["gradient_vanishes_far_out"]

_FAR = 1e3  # a latent weight this far out is beyond any clip range; an unclipped gradient is still non-zero there


def gradient_vanishes_far_out(quantizer: Any, rank: int) -> bool:
    """Whether ``quantizer``'s gradient is exactly 0 for latent weights at ±1000 (True when it cannot be told,
    e.g. while tracing a graph)."""
    if not tf.executing_eagerly():
        return True
    try:
        x = tf.reshape(tf.constant([-_FAR, _FAR]), [1] * max(rank - 1, 0) + [2])
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = quantizer(x)
        grad = tape.gradient(y, x)
        return grad is None or not bool(tf.reduce_any(tf.not_equal(grad, 0)))
    except Exception:  # a quantizer that cannot take the probe: warn, as for a clipped one
        return True
