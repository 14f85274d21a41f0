"""larq's function forms of the quantizers: ``ste_sign(x)``, ``approx_sign(x)``, ``swish_sign(x)``,
``ste_heaviside(x)``, ``ste_tern(x)``, ``magnitude_aware_sign(x)``, ``dorefa_quantizer(x)``.

Each takes larq's keyword names and defaults and computes exactly what the quantizer class of the same larq name
computes (values and gradients), through one cached quantizer per argument tuple, so a call builds no Keras layer.
"""

from __future__ import annotations

import functools
from typing import Any

import tensorflow as tf

from ..quantizers import Quantizer
from ._arguments import check_bool
from ._quantizers import ApproxSign, DoReFa, MagnitudeAwareSign, SteHeaviside, SteSign, SteTern, SwishSign

__all__ = [
    "approx_sign",
    "dorefa_quantizer",
    "magnitude_aware_sign",
    "ste_heaviside",
    "ste_sign",
    "ste_tern",
    "swish_sign",
]


@functools.lru_cache(maxsize=256)
def _quantizer(cls: Any, *args: Any) -> Quantizer:
    """One shared quantizer per class and (positional, hashable) argument tuple."""
    quantizer: Quantizer = cls(*args)
    return quantizer


def _apply(cls: Any, x: Any, *args: Any) -> tf.Tensor:
    quantizer = _quantizer(cls, *args)
    return quantizer.call(x)  # call reads x as a float tensor (InputError otherwise)


def ste_sign(x: Any, clip_value: float | None = 1.0) -> tf.Tensor:
    """sign(x) (sign(0) = +1); gradient dy·1[abs(x) <= clip_value] (no clipping for ``None``). larq's ``ste_sign``."""
    return _apply(SteSign, x, clip_value)


def approx_sign(x: Any) -> tf.Tensor:
    """sign(x) (sign(0) = +1); gradient dy·(2 − 2·abs(x))·1[abs(x) <= 1] (Bi-Real Net). larq's ``approx_sign``."""
    return _apply(ApproxSign, x)


def swish_sign(x: Any, beta: float = 5.0) -> tf.Tensor:
    """sign(x) (sign(0) = +1); gradient dy·β(2 − βx·tanh(βx/2))/(1 + cosh(βx)) (BNN+). larq's ``swish_sign``."""
    return _apply(SwishSign, x, beta)


def ste_heaviside(x: Any, clip_value: float | None = 1.0) -> tf.Tensor:
    """1 where x > 0 else 0; gradient dy·1[abs(x) <= clip_value]. larq's ``ste_heaviside``."""
    return _apply(SteHeaviside, x, clip_value)


def ste_tern(
    x: Any, threshold_value: float = 0.05, ternary_weight_networks: bool = False, clip_value: float | None = 1.0
) -> tf.Tensor:
    """sign(sign(x + Δ) + sign(x − Δ)) with Δ = ``threshold_value`` (or 0.7·mean(abs(x)) when
    ``ternary_weight_networks``); gradient dy·1[abs(x) <= clip_value]. larq's ``ste_tern``."""
    # checked here: the quantizer cache cannot tell 1 from True
    twn = check_bool("ste_tern", "ternary_weight_networks", ternary_weight_networks)
    return _apply(SteTern, x, threshold_value, twn, clip_value)


def magnitude_aware_sign(x: Any, clip_value: float | None = 1.0) -> tf.Tensor:
    """α·sign(x), α = mean(abs(x)) over every axis but the last (a constant in the backward pass); gradient
    dy·α·1[abs(x) <= clip_value]. larq's ``MagnitudeAwareSign`` as a function."""
    return _apply(MagnitudeAwareSign, x, clip_value)


def dorefa_quantizer(x: Any, k_bit: int = 2, mode: str = "activations") -> tf.Tensor:
    """k_bit-bit DoReFa (``mode="activations"`` or ``"weights"``), as :class:`ste.quantizers.DoReFa` with
    ``bits=k_bit``. larq's ``DoReFa`` / ``"dorefa_quantizer"`` as a function."""
    return _apply(DoReFa, x, k_bit, mode)
