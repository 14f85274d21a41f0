"""Piecewise surrogates: compactly supported or piecewise-defined derivatives.

``approx_sign``, ``triangle``, ``piecewise_quadratic``, ``boxcar`` and ``piecewise_exp``. Each primitive is written
so that TensorFlow's autodiff of it equals the derivative everywhere, kinks included where the primitive is
differentiable (clip passes the gradient at its bounds; ``abs`` has gradient 0 at 0, which is multiplied by 0).
Half-precision inputs are evaluated in float32 and rounded once.
"""

from __future__ import annotations

import tensorflow as tf

from ._numerics import elementwise
from ._registry import register
from ._surrogate import HasPrimitive, MaskOnly, Surrogate

__all__ = ["ApproxSign", "Boxcar", "PiecewiseExp", "PiecewiseQuadratic", "Triangle"]


@register("approx_sign")
class ApproxSign(Surrogate, HasPrimitive):
    """d(x) = (2 − 2·abs(x))·1[abs(x) <= 1].

    Primitive: the ApproxSign of Bi-Real Net, 2·c − c·abs(c) with c = clip(x, −1, 1) (2x + x² on [−1, 0),
    2x − x² on [0, 1], ±1 outside). No hyperparameters; peak 2 at x = 0; 0 at abs(x) >= 1.
    Reference: Liu et al. 2018, Bi-Real Net: Enhancing the performance of 1-bit CNNs.
    """

    formula = "(2 - 2*abs(x)) * 1[abs(x) <= 1]"
    reference = "Liu et al. 2018, Bi-Real Net (ApproxSign)"

    @elementwise
    def derivative(self, x: tf.Tensor) -> tf.Tensor:
        return 2 * tf.nn.relu(1 - tf.abs(x))

    @elementwise
    def primitive(self, x: tf.Tensor) -> tf.Tensor:
        c = tf.clip_by_value(x, -1.0, 1.0)
        return 2 * c - c * tf.abs(c)


@register("triangle")
class Triangle(Surrogate, HasPrimitive):
    """d(x) = max(0, 1 − abs(x)/width).

    Primitive: c − c·abs(c)/(2·width) + width/2 with c = clip(x, −width, width) (from 0 to width; a unit step for
    width = 1). Default width = 1.0; peak 1 at x = 0; 0 at abs(x) >= width.
    Reference: Bellec et al. 2018, Long short-term memory and learning-to-learn in networks of spiking neurons.
    """

    width: float = 1.0
    formula = "max(0, 1 - abs(x)/width)"
    reference = "Bellec et al. 2018, Long short-term memory and learning-to-learn in networks of spiking neurons"

    def validate(self) -> None:
        self.require_positive("width")

    @elementwise
    def derivative(self, x: tf.Tensor) -> tf.Tensor:
        return tf.nn.relu(1 - tf.abs(x) / self.param("width", x.dtype))

    @elementwise
    def primitive(self, x: tf.Tensor) -> tf.Tensor:
        width = self.param("width", x.dtype)
        c = tf.clip_by_value(x, -width, width)
        return c - c * tf.abs(c) / (2 * width) + width / 2


@register("piecewise_quadratic")
class PiecewiseQuadratic(Surrogate, HasPrimitive):
    """d(x) = max(0, alpha − alpha²·abs(x)), computed as alpha·max(0, 1 − alpha·abs(x)).

    Primitive: alpha·c − (alpha²/2)·c·abs(c) + 1/2 with c = clip(x, −1/alpha, 1/alpha) (from 0 to 1).
    Default alpha = 1.0; peak alpha at x = 0; 0 at abs(x) >= 1/alpha.
    Reference: Esser et al. 2016; Neftci et al. 2019; SpikingJelly's ``PiecewiseQuadratic``.
    """

    alpha: float = 1.0
    formula = "max(0, alpha - alpha**2 * abs(x))"
    reference = "Esser et al. 2016; Neftci et al. 2019 (SpikingJelly PiecewiseQuadratic)"

    def validate(self) -> None:
        self.require_positive("alpha")

    @elementwise
    def derivative(self, x: tf.Tensor) -> tf.Tensor:
        alpha = self.param("alpha", x.dtype)
        return alpha * tf.nn.relu(1 - alpha * tf.abs(x))

    @elementwise
    def primitive(self, x: tf.Tensor) -> tf.Tensor:
        alpha = self.param("alpha", x.dtype)
        bound = 1 / alpha
        c = tf.clip_by_value(x, -bound, bound)
        return alpha * c - (alpha * alpha / 2) * c * tf.abs(c) + 0.5


@register("boxcar")
class Boxcar(Surrogate, MaskOnly, HasPrimitive):
    """d(x) = 1[abs(x) < width/2] / width (0 at exactly ±width/2).

    Primitive: clip(x/width, −1/2, 1/2) + 1/2 (from 0 to 1), written with a ``tf.where`` on the same strict
    comparison so that its autodiff is 0 at ±width/2, like the derivative. Default width = 1.0; peak 1/width.
    Reference: the rectangular curve of Wu et al. 2018 (STBP, Spatio-temporal backpropagation).
    """

    width: float = 1.0
    formula = "1[abs(x) < width/2] / width"
    reference = "Wu et al. 2018, Spatio-temporal backpropagation (STBP), rectangular curve"

    def validate(self) -> None:
        self.require_positive("width")

    @elementwise
    def derivative(self, x: tf.Tensor) -> tf.Tensor:
        width = self.param("width", x.dtype)
        return tf.cast(tf.abs(x) < width / 2, x.dtype) / width

    def mask(self, x: tf.Tensor) -> tf.Tensor:
        x = tf.convert_to_tensor(x)
        x = tf.cast(x, self.compute_dtype(x.dtype))
        return tf.abs(x) < self.param("width", x.dtype) / 2

    def derivative_from_mask(self, mask: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        wide = self.compute_dtype(dtype)
        return tf.cast(tf.cast(mask, wide) / self.param("width", wide), dtype)

    @elementwise
    def primitive(self, x: tf.Tensor) -> tf.Tensor:
        width = self.param("width", x.dtype)
        inside = tf.abs(x) < width / 2
        return tf.where(inside, x / width, tf.sign(x) / 2) + 0.5


@register("piecewise_exp")
class PiecewiseExp(Surrogate, HasPrimitive):
    """d(x) = (alpha/2)·exp(−alpha·abs(x)).

    Primitive: sign(x)·(1 − exp(−alpha·abs(x)))/2 + 1/2 (from 0 to 1), computed as exp(alpha·x)/2 for x < 0 and
    1 − exp(−alpha·x)/2 for x >= 0 (each exponent clamped to <= 0, so autodiff is alpha/2 at 0 and never NaN).
    Default alpha = 1.0; peak alpha/2 (0.5 by default) at x = 0. The exponent is never positive.
    Reference: Shrestha & Orchard 2018 (SLAYER); Neftci et al. 2019; SpikingJelly's ``PiecewiseExp``.
    """

    alpha: float = 1.0
    formula = "(alpha/2) * exp(-alpha*abs(x))"
    reference = "Shrestha & Orchard 2018 (SLAYER); Neftci et al. 2019 (SpikingJelly PiecewiseExp)"

    def validate(self) -> None:
        self.require_positive("alpha")

    @elementwise
    def derivative(self, x: tf.Tensor) -> tf.Tensor:
        alpha = self.param("alpha", x.dtype)
        return (alpha / 2) * tf.exp(-(alpha * tf.abs(x)))

    @elementwise
    def primitive(self, x: tf.Tensor) -> tf.Tensor:
        alpha = self.param("alpha", x.dtype)
        left = tf.exp(alpha * tf.minimum(x, 0)) / 2
        right = 1 - tf.exp(-(alpha * tf.maximum(x, 0))) / 2
        return tf.where(x < 0, left, right)
