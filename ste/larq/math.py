"""``lq.math``: larq's ``sign`` (+1 at 0) and ``heaviside`` (0 at 0), plain functions with a zero gradient.

For a straight-through gradient use a quantizer (``lq.quantizers.SteSign()``); these are the forward values only,
as in larq.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

__all__ = ["heaviside", "sign"]


def sign(x: Any) -> tf.Tensor:
    """-1 where x < 0, else +1 (``tf.sign`` gives 0 at 0; larq's and ste's quantizers give +1)."""
    x = tf.convert_to_tensor(x)
    return tf.where(x >= 0, tf.constant(1, x.dtype), tf.constant(-1, x.dtype))  # scalars: the pattern LCE matches


def heaviside(x: Any) -> tf.Tensor:
    """1 where x > 0, else 0."""
    x = tf.convert_to_tensor(x)
    return tf.where(x > 0, tf.constant(1, x.dtype), tf.constant(0, x.dtype))
