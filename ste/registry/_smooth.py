"""Smooth surrogates: the derivative of a smooth sigmoid-shaped primitive."""

from __future__ import annotations

import tensorflow as tf

from ._registry import register
from ._surrogate import Surrogate

__all__ = ["SigmoidSurrogate"]


@register("sigmoid_surrogate")
class SigmoidSurrogate(Surrogate):
    """d(x) = beta·s·(1 − s) with s = sigmoid(beta·x).

    Primitive: sigmoid(beta·x). Default beta = 1.0; peak beta/4 at x = 0.
    Computed as beta·sigmoid(z)·sigmoid(−z), z = beta·x: no exp of a large positive number and no 1 − s
    cancellation, so it is finite (and tends to 0) for every finite input in every float dtype.
    Reference: the sigmoid surrogate of spiking-network training (e.g. Zenke & Vogels 2021).
    """

    beta: float = 1.0
    formula = "beta * sigmoid(beta*x) * (1 - sigmoid(beta*x))"
    reference = "Zenke & Vogels 2021, The remarkable robustness of surrogate gradient learning"

    def validate(self) -> None:
        self.require_positive("beta")

    def derivative(self, x: tf.Tensor) -> tf.Tensor:
        beta = self.param("beta", x.dtype)
        z = beta * x
        return beta * tf.sigmoid(z) * tf.sigmoid(-z)

    def primitive(self, x: tf.Tensor) -> tf.Tensor:
        return tf.sigmoid(self.param("beta", x.dtype) * x)
