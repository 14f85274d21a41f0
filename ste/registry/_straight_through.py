"""The plain straight-through family: ``identity``, ``straight_through`` (clipped) and ``zero``."""

from __future__ import annotations

import tensorflow as tf

from ._registry import register
from ._surrogate import HasPrimitive, MaskOnly, Surrogate

__all__ = ["Identity", "StraightThrough", "Zero"]


@register("identity")
class Identity(Surrogate, HasPrimitive):
    """d(x) = 1: the upstream gradient passes through unchanged (the plain straight-through estimator).

    Primitive: x. Peak: 1 everywhere.
    """

    formula = "1"
    reference = "plain straight-through estimator (Bengio et al. 2013)"

    @property
    def constant_derivative(self) -> float | None:
        return 1.0

    def derivative(self, x: tf.Tensor) -> tf.Tensor:
        return tf.ones_like(x)

    def primitive(self, x: tf.Tensor) -> tf.Tensor:
        return tf.identity(x)


@register("straight_through")
class StraightThrough(Surrogate, MaskOnly, HasPrimitive):
    """d(x) = 1 where abs(x) <= clip, else 0; ``clip=None`` gives 1 everywhere (the same as ``identity``).

    Primitive: clip(x, -clip, clip). Default clip = 1.0, peak 1. The gradient at exactly ±clip is 1.
    Reference: Hubara et al. 2016 (BinaryNet), the clipped straight-through estimator.
    """

    clip: float | None = 1.0
    indicator = True  # derivative_from_mask is the mask's 0/1
    formula = "1[abs(x) <= clip]"
    reference = "Hubara et al. 2016, Binarized Neural Networks (BinaryNet)"

    def validate(self) -> None:
        self.require_positive("clip", allow_none=True)

    @property
    def constant_derivative(self) -> float | None:
        return 1.0 if self.clip is None else None

    def derivative(self, x: tf.Tensor) -> tf.Tensor:
        if self.clip is None:
            return tf.ones_like(x)
        return self.derivative_from_mask(self.mask(x), x.dtype)

    def mask(self, x: tf.Tensor) -> tf.Tensor:
        if self.clip is None:
            return tf.ones_like(x, dtype=tf.bool)
        return tf.abs(x) <= self.param("clip", x.dtype)

    def primitive(self, x: tf.Tensor) -> tf.Tensor:
        if self.clip is None:
            return tf.identity(x)
        clip = self.param("clip", x.dtype)
        return tf.clip_by_value(x, -clip, clip)


@register("zero")
class Zero(Surrogate, HasPrimitive):
    """d(x) = 0: the gradient is a tensor of zeros of the input's shape (a stop-gradient with a defined value).

    Primitive: 0. Peak: 0.
    """

    formula = "0"
    reference = "stop-gradient with a defined zero gradient"

    @property
    def constant_derivative(self) -> float | None:
        return 0.0

    def derivative(self, x: tf.Tensor) -> tf.Tensor:
        return tf.zeros_like(x)

    def vjp(self, dy: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
        return tf.zeros_like(x)

    def primitive(self, x: tf.Tensor) -> tf.Tensor:
        return tf.zeros_like(x)
