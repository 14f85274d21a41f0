"""Smooth surrogates: the derivative of a smooth, sigmoid-shaped primitive.

``sigmoid_surrogate``, ``tanh_surrogate``, ``atan``, ``fast_sigmoid``, ``soft_sign``, ``erf_surrogate``,
``gaussian`` and ``swish_sign``. Every derivative here is finite for every finite input in float16, bfloat16,
float32 and float64, including inputs where ``beta·x`` overflows to inf: no entry takes ``exp`` of a large positive
number, forms ``1 - tanh²`` or ``1 - sigmoid`` near 1, or multiplies 0 by inf. Half-precision inputs are evaluated in
float32 and rounded once (see :func:`ste.registry._numerics.elementwise`).
"""

from __future__ import annotations

import math

import tensorflow as tf

from ._numerics import SAFE_LOGIT, elementwise, saturating_ratio
from ._registry import register
from ._surrogate import HasPrimitive, Surrogate

__all__ = [
    "Atan",
    "ErfSurrogate",
    "FastSigmoid",
    "Gaussian",
    "SigmoidSurrogate",
    "SoftSign",
    "SwishSign",
    "TanhSurrogate",
]

_SQRT_PI = math.sqrt(math.pi)
_SQRT_2PI = math.sqrt(2.0 * math.pi)
_SQRT_HALF = math.sqrt(0.5)


@register("sigmoid_surrogate")
class SigmoidSurrogate(Surrogate, HasPrimitive):
    """d(x) = beta·s·(1 − s) with s = sigmoid(beta·x).

    Primitive: sigmoid(beta·x). Default beta = 1.0; peak beta/4 (0.25 by default) at x = 0.
    Computed as beta·sigmoid(z)·sigmoid(−z), z = beta·x: no exp of a large positive number and no 1 − s
    cancellation, so it is finite (and tends to 0) for every finite input in every float dtype.
    Reference: the sigmoid surrogate of spiking-network training (e.g. Zenke & Vogels 2021).
    """

    beta: float = 1.0
    formula = "beta * sigmoid(beta*x) * (1 - sigmoid(beta*x))"
    reference = "Zenke & Vogels 2021, The remarkable robustness of surrogate gradient learning"

    def validate(self) -> None:
        self.require_positive("beta")

    @elementwise
    def derivative(self, x: tf.Tensor) -> tf.Tensor:
        beta = self.param("beta", x.dtype)
        z = beta * x
        return beta * tf.sigmoid(z) * tf.sigmoid(-z)

    @elementwise
    def primitive(self, x: tf.Tensor) -> tf.Tensor:
        return tf.sigmoid(self.param("beta", x.dtype) * x)


@register("tanh_surrogate")
class TanhSurrogate(Surrogate, HasPrimitive):
    """d(x) = beta·(1 − tanh²(beta·x)).

    Primitive: tanh(beta·x). Default beta = 1.0; peak beta (1.0 by default) at x = 0.
    Computed as 4·beta·sigmoid(2z)·sigmoid(−2z), z = beta·x (the same value, since 1 − tanh²(z) = sech²(z)):
    ``1 − tanh²`` would round to 0 long before the true value does.
    Reference: the derivative of a scaled tanh (a tanh-shaped spike surrogate; no single source).
    """

    beta: float = 1.0
    formula = "beta * (1 - tanh(beta*x)**2)"
    reference = "derivative of tanh(beta*x)"

    def validate(self) -> None:
        self.require_positive("beta")

    @elementwise
    def derivative(self, x: tf.Tensor) -> tf.Tensor:
        beta = self.param("beta", x.dtype)
        z2 = 2 * (beta * x)
        return beta * (4 * tf.sigmoid(z2) * tf.sigmoid(-z2))  # 4·beta could overflow where beta does not

    @elementwise
    def primitive(self, x: tf.Tensor) -> tf.Tensor:
        return tf.tanh(self.param("beta", x.dtype) * x)


@register("atan")
class Atan(Surrogate, HasPrimitive):
    """d(x) = (alpha/2) / (1 + (π·alpha·x/2)²).

    Primitive: arctan(π·alpha·x/2)/π + 1/2 (from 0 to 1). Default alpha = 2.0; peak alpha/2 (1.0 by default) at 0.
    Where (π·alpha·x/2)² overflows to inf the derivative is (alpha/2)/inf = 0.
    Reference: Fang et al. 2021, Incorporating learnable membrane time constant to enhance learning of spiking
    neural networks (SpikingJelly's ``ATan``).
    """

    alpha: float = 2.0
    formula = "(alpha/2) / (1 + (pi*alpha*x/2)**2)"
    reference = "Fang et al. 2021, Incorporating learnable membrane time constant (SpikingJelly ATan)"

    def validate(self) -> None:
        self.require_positive("alpha")

    @elementwise
    def derivative(self, x: tf.Tensor) -> tf.Tensor:
        alpha = self.param("alpha", x.dtype)
        w = alpha * (x * (math.pi / 2))  # alpha·π/2 could overflow (and inf·0 is NaN) where alpha does not
        return (alpha / 2) / (1 + w * w)

    @elementwise
    def primitive(self, x: tf.Tensor) -> tf.Tensor:
        alpha = self.param("alpha", x.dtype)
        return tf.atan((alpha * (math.pi / 2)) * x) / math.pi + 0.5


@register("fast_sigmoid")
class FastSigmoid(Surrogate, HasPrimitive):
    """d(x) = 1 / (1 + slope·abs(x))².

    Primitive: x / (1 + slope·abs(x)) (from −1/slope to 1/slope). Default slope = 25.0; peak 1 at x = 0 for every
    slope. Computed as r·r with r = 1/(1 + slope·abs(x)), so neither the square nor slope·abs(x) can overflow into
    a NaN. Reference: Zenke & Ganguli 2018, SuperSpike (snnTorch's ``fast_sigmoid``, Norse's ``super``).
    """

    slope: float = 25.0
    formula = "1 / (1 + slope*abs(x))**2"
    reference = "Zenke & Ganguli 2018, SuperSpike: Supervised learning in multilayer spiking neural networks"

    def validate(self) -> None:
        self.require_positive("slope")

    @elementwise
    def derivative(self, x: tf.Tensor) -> tf.Tensor:
        r = 1 / (1 + self.param("slope", x.dtype) * tf.abs(x))
        return r * r

    @elementwise
    def primitive(self, x: tf.Tensor) -> tf.Tensor:
        slope = self.param("slope", x.dtype)
        return saturating_ratio(slope * x) / slope


@register("soft_sign")
class SoftSign(Surrogate, HasPrimitive):
    """d(x) = alpha / (2·(1 + alpha·abs(x))²).

    Primitive: (alpha·x/(1 + alpha·abs(x)) + 1)/2 (from 0 to 1). Default alpha = 2.0; peak alpha/2 (1.0 by default)
    at x = 0. Computed as (alpha/2)·r·r with r = 1/(1 + alpha·abs(x)).
    Reference: SpikingJelly's ``SoftSign`` (a rescaled SuperSpike, Zenke & Ganguli 2018).
    """

    alpha: float = 2.0
    formula = "alpha / (2 * (1 + alpha*abs(x))**2)"
    reference = "SpikingJelly SoftSign; the SuperSpike shape of Zenke & Ganguli 2018"

    def validate(self) -> None:
        self.require_positive("alpha")

    @elementwise
    def derivative(self, x: tf.Tensor) -> tf.Tensor:
        alpha = self.param("alpha", x.dtype)
        r = 1 / (1 + alpha * tf.abs(x))
        return (alpha / 2) * r * r

    @elementwise
    def primitive(self, x: tf.Tensor) -> tf.Tensor:
        return (saturating_ratio(self.param("alpha", x.dtype) * x) + 1) / 2


@register("erf_surrogate")
class ErfSurrogate(Surrogate, HasPrimitive):
    """d(x) = (alpha/√π)·exp(−alpha²·x²).

    Primitive: erfc(−alpha·x)/2 (from 0 to 1; erfc keeps the left tail accurate where 1 + erf would round to 0).
    Default alpha = 2.0; peak alpha/√π (≈ 1.128 by default) at x = 0. The exponent is never positive.
    Reference: Esser et al. 2015 and Wu et al. 2018 (STBP), as SpikingJelly's ``Erf``.
    """

    alpha: float = 2.0
    formula = "(alpha/sqrt(pi)) * exp(-alpha**2 * x**2)"
    reference = "Esser et al. 2015; Wu et al. 2018 (STBP); SpikingJelly Erf"

    def validate(self) -> None:
        self.require_positive("alpha")

    @elementwise
    def derivative(self, x: tf.Tensor) -> tf.Tensor:
        alpha = self.param("alpha", x.dtype)
        t = alpha * x
        return (alpha / _SQRT_PI) * tf.exp(-(t * t))

    @elementwise
    def primitive(self, x: tf.Tensor) -> tf.Tensor:
        return tf.math.erfc(-(self.param("alpha", x.dtype) * x)) / 2


@register("gaussian")
class Gaussian(Surrogate, HasPrimitive):
    """d(x) = exp(−x²/(2·sigma²)) / (sigma·√(2π)), the normal density.

    Primitive: Φ(x/sigma), the normal CDF, computed as erfc(−x/(sigma·√2))/2 (from 0 to 1).
    Default sigma = 0.5; peak 1/(sigma·√(2π)) (≈ 0.798 by default) at x = 0. The exponent is never positive.
    Reference: the Gaussian curve of Wu et al. 2018 (STBP, Spatio-temporal backpropagation for training
    high-performance spiking neural networks).
    """

    sigma: float = 0.5
    formula = "exp(-x**2 / (2*sigma**2)) / (sigma*sqrt(2*pi))"
    reference = "Wu et al. 2018, Spatio-temporal backpropagation (STBP), Gaussian curve"

    def validate(self) -> None:
        self.require_positive("sigma")

    @elementwise
    def derivative(self, x: tf.Tensor) -> tf.Tensor:
        sigma = self.param("sigma", x.dtype)
        t = x / sigma
        return tf.exp(-0.5 * (t * t)) / (sigma * _SQRT_2PI)

    @elementwise
    def primitive(self, x: tf.Tensor) -> tf.Tensor:
        return tf.math.erfc(-(x / self.param("sigma", x.dtype)) * _SQRT_HALF) / 2


@register("swish_sign")
class SwishSign(Surrogate, HasPrimitive):
    """d(x) = beta·(2 − beta·x·tanh(beta·x/2)) / (1 + cosh(beta·x)).

    Primitive: 2·sigmoid(beta·x)·(1 + beta·x·(1 − sigmoid(beta·x))) − 1, the SignSwish of BNN+ (from −1 to 1).
    Default beta = 5.0; peak beta (5.0 by default) at x = 0; negative for abs(x) > ~2.4/beta (minimum ≈ −0.088·beta).

    With z = beta·x, 1 + cosh z = 2·cosh²(z/2) and sigmoid(z)·sigmoid(−z) = 1/(4·cosh²(z/2)), so
    d = 2·beta·q·(2 − z·tanh(z/2)) with q = sigmoid(z)·sigmoid(−z), and the primitive is tanh(z/2) + 2·z·q.
    No cosh (which overflows), no exp of a positive number; z is clamped to ±1e4, where q is exactly 0 in float32
    and float64, so z·q never becomes inf·0 when beta·x overflows.
    Reference: Darabi et al. 2018, BNN+: Improved binary network training (SignSwish); larq's ``swish_sign``.
    """

    beta: float = 5.0
    formula = "beta * (2 - beta*x*tanh(beta*x/2)) / (1 + cosh(beta*x))"
    reference = "Darabi et al. 2018, BNN+: Improved binary network training (SignSwish)"

    def validate(self) -> None:
        self.require_positive("beta")

    def _z(self, x: tf.Tensor) -> tf.Tensor:
        limit = tf.constant(SAFE_LOGIT, x.dtype)
        return tf.clip_by_value(self.param("beta", x.dtype) * x, -limit, limit)

    @elementwise
    def derivative(self, x: tf.Tensor) -> tf.Tensor:
        beta = self.param("beta", x.dtype)
        z = self._z(x)
        q = tf.sigmoid(z) * tf.sigmoid(-z)
        return beta * (2 * q * (2 - z * tf.tanh(z / 2)))  # 2·beta could overflow where beta does not

    @elementwise
    def primitive(self, x: tf.Tensor) -> tf.Tensor:
        z = self._z(x)
        return tf.tanh(z / 2) + 2 * z * (tf.sigmoid(z) * tf.sigmoid(-z))
