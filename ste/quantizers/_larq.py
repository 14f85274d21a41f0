"""larq 0.14 aliases: the same names, parameter names, forward values and gradients, on Keras 3.

=========================  =========================================================================
larq name (spec string)    ste equivalent
=========================  =========================================================================
``ste_sign``               ``Sign(surrogate=straight_through(clip=clip_value))``
``approx_sign``            ``Sign(surrogate="approx_sign")``
``swish_sign``             ``Sign(surrogate=swish_sign(beta=beta))``
``ste_heaviside``          ``Heaviside(surrogate=straight_through(clip=clip_value))``
``ste_tern``               ``Ternary(threshold_value, ternary_weight_networks, straight_through(clip_value))``
``magnitude_aware_sign``   ``MagnitudeAwareSign(clip_value=...)`` (the class itself accepts larq's argument)
``dorefa_quantizer``       ``DoReFa(k_bit=..., mode=...)`` (the class itself accepts larq's argument)
=========================  =========================================================================

``clip_value=None`` means no clipping, as in larq. larq's ``metrics=["flip_ratio"]`` on a quantizer is an argument
of the quantized layer in ``ste`` (``QuantDense(..., metrics=["flip_ratio"])``, see :mod:`ste.metrics`).
"""

from __future__ import annotations

from typing import Any

import keras

from .._arguments import check_number
from ..registry import get as get_surrogate
from ._base import Quantizer, register
from ._binary import Heaviside, Sign, Ternary
from ._uniform import DoReFa

__all__ = ["ApproxSign", "DoReFaQuantizer", "SteHeaviside", "SteSign", "SteTern", "SwishSign"]


def _clip(owner: str, clip_value: float | None) -> float | None:
    return None if clip_value is None else check_number(owner, "clip_value", clip_value, positive=True)


@keras.saving.register_keras_serializable(package="ste")
@register("ste_sign")
class SteSign(Sign):
    """larq's ``SteSign`` / ``"ste_sign"``: sign (sign(0) = +1) with gradient dy·1[abs(x) <= clip_value]."""

    def __init__(self, clip_value: float | None = 1.0, **kwargs: Any) -> None:
        self.clip_value = _clip("SteSign", clip_value)
        super().__init__(surrogate=get_surrogate("straight_through", clip=self.clip_value), **kwargs)

    def get_config(self) -> dict[str, Any]:
        return {**Quantizer.get_config(self), "clip_value": self.clip_value}


@keras.saving.register_keras_serializable(package="ste")
@register("approx_sign")
class ApproxSign(Sign):
    """larq's ``ApproxSign`` / ``"approx_sign"`` (Bi-Real Net): gradient dy·(2 − 2·abs(x))·1[abs(x) <= 1]."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(surrogate="approx_sign", **kwargs)

    def get_config(self) -> dict[str, Any]:
        return dict(Quantizer.get_config(self))


@keras.saving.register_keras_serializable(package="ste")
@register("swish_sign")
class SwishSign(Sign):
    """larq's ``SwishSign`` / ``"swish_sign"`` (BNN+): gradient dy·β(2 − βx·tanh(βx/2))/(1 + cosh(βx))."""

    def __init__(self, beta: float = 5.0, **kwargs: Any) -> None:
        self.beta = check_number("SwishSign", "beta", beta, positive=True)
        super().__init__(surrogate=get_surrogate("swish_sign", beta=self.beta), **kwargs)

    def get_config(self) -> dict[str, Any]:
        return {**Quantizer.get_config(self), "beta": self.beta}


@keras.saving.register_keras_serializable(package="ste")
@register("ste_heaviside")
class SteHeaviside(Heaviside):
    """larq's ``SteHeaviside`` / ``"ste_heaviside"``: 1 where x > 0 else 0; gradient dy·1[abs(x) <= clip_value]."""

    def __init__(self, clip_value: float | None = 1.0, **kwargs: Any) -> None:
        self.clip_value = _clip("SteHeaviside", clip_value)
        super().__init__(surrogate=get_surrogate("straight_through", clip=self.clip_value), **kwargs)

    def get_config(self) -> dict[str, Any]:
        return {**Quantizer.get_config(self), "clip_value": self.clip_value}


@keras.saving.register_keras_serializable(package="ste")
@register("ste_tern")
class SteTern(Ternary):
    """larq's ``SteTern`` / ``"ste_tern"``: ternary with Δ = threshold_value (or TWN's 0.7·mean(abs(x)));
    gradient dy·1[abs(x) <= clip_value]."""

    def __init__(
        self,
        threshold_value: float = 0.05,
        ternary_weight_networks: bool = False,
        clip_value: float | None = 1.0,
        **kwargs: Any,
    ) -> None:
        self.clip_value = _clip("SteTern", clip_value)
        super().__init__(
            threshold=threshold_value,
            ternary_weight_networks=ternary_weight_networks,
            surrogate=get_surrogate("straight_through", clip=self.clip_value),
            **kwargs,
        )

    def get_config(self) -> dict[str, Any]:
        return {
            **Quantizer.get_config(self),
            "threshold_value": self.threshold,
            "ternary_weight_networks": self.ternary_weight_networks,
            "clip_value": self.clip_value,
        }


#: larq's backwards-compatible name of ``DoReFa``.
DoReFaQuantizer = DoReFa
