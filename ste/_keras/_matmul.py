"""A product over the last axes of an input as one 2-D matmul (``QuantDense`` and ``ste.qat.QuantEinsumDense``).

On an input of rank > 2 the product is one 2-D matmul on the flattened rows, reshaped back afterwards (the same
numbers as Keras's N-D matmul): the TFLite converter then fuses a bias added to the rows into one FULLY_CONNECTED
whose output range is the layer's, where after an N-D matmul it kept the kernel float.
"""

from __future__ import annotations

import math
from typing import Any

import keras
import tensorflow as tf

__all__ = ["flat_matmul", "unflatten"]


def flat_matmul(x: Any, kernel: Any, contracted: int) -> Any:
    """The last ``contracted`` axes of ``x`` times the first ``contracted`` axes of ``kernel``, as one 2-D matmul:
    rows (the product of ``x``'s other axes) × the product of ``kernel``'s other axes."""
    inner = math.prod(kernel.shape[:contracted])
    rows = keras.ops.reshape(x, (-1, inner))
    return keras.ops.matmul(rows, keras.ops.reshape(kernel, (inner, -1)))


def unflatten(y: Any, x: Any, contracted: int, out_shape: tuple[int, ...]) -> Any:
    """``flat_matmul``'s rows back to ``x``'s leading axes followed by ``out_shape`` (static sizes kept)."""
    lead = list(x.shape[: x.shape.rank - contracted])
    if lead.count(None) <= 1:  # -1 for the batch: the static sizes stay known while Keras builds the model
        return keras.ops.reshape(y, tuple(-1 if size is None else size for size in lead) + tuple(out_shape))
    dynamic = tf.shape(x)
    shape = [size if size is not None else dynamic[i] for i, size in enumerate(lead)]
    return tf.reshape(y, [*shape, *out_shape])
