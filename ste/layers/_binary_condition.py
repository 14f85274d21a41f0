"""The condition a binary tensor was selected by, read from its graph (a pass over the float input less)."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

__all__ = ["is_high"]


def _constant(tensor: tf.Tensor) -> Any:
    """The value of a ``Const`` op's output (through identities), or None."""
    op = tensor.op
    while op.type == "Identity" and op.inputs:
        op = op.inputs[0].op
    return tf.get_static_value(op.outputs[0]) if op.type == "Const" else None


def is_high(x: tf.Tensor, low: float, high: float) -> tf.Tensor:
    """``x == high`` for a tensor ``x`` of two values ``low``/``high``. In a graph where ``x`` is a select between
    those two constants (``Sign``: ``tf.where(h >= 0, 1, -1)``, through the identities of its op) or a boolean cast
    to 0/1 (``Heaviside``: ``cast(h > 0)``), that condition, already computed: a pass over the float input less per
    binary layer (the same booleans)."""
    if not tf.executing_eagerly():
        tensor = x
        while tensor.op.type in ("Identity", "IdentityN") and tensor.op.inputs:
            tensor = tensor.op.inputs[tensor.value_index if tensor.op.type == "IdentityN" else 0]
        op = tensor.op
        condition = op.inputs[0] if op.inputs and op.graph is x.graph else None
        if op.type == "Cast" and condition is not None and condition.dtype == tf.bool and (low, high) == (0.0, 1.0):
            return condition  # Heaviside: cast(h > 0)
        if (
            op.type == "SelectV2"
            and condition is not None
            and condition.dtype == tf.bool
            and condition.shape == x.shape
        ):
            on, off = _constant(op.inputs[1]), _constant(op.inputs[2])
            if on is not None and off is not None and on.size == off.size == 1 and high != low:
                if float(on) == high and float(off) == low:
                    return condition
    return tf.equal(x, tf.constant(high, x.dtype))
