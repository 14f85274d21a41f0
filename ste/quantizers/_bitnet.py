"""BitNet b1.58's quantizers (Ma et al. 2024): :class:`AbsmeanTernary` weights, :class:`AbsmaxPerToken` activations.

Both are one ``ste`` op whose backward pass is the straight-through estimator of BitNet's ``x + (q(x) − x).detach()``:
the identity, ``dy`` (registry surrogate ``"identity"``; its derivative is 0, so higher orders are 0 too). The scale
(mean|W| or max|x|) is part of the forward only. Half-precision inputs compute in float32 and are rounded back once;
``tf.round`` rounds half to even.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from .._common._arguments import check_number
from .._core._dsl import forward
from ..errors import ParameterError
from ._base import Quantizer, as_tensor, check_bits, register
from ._dtypes import Levels, check_levels, wide

__all__ = ["AbsmaxPerToken", "AbsmeanTernary"]


def absmean_ternary(x: tf.Tensor, *, epsilon: float) -> tf.Tensor:
    """sign(x)·[|x| > (γ + ε)/2]·γ with γ = mean|x| over the whole tensor: BitNet's clip(round(x/(γ + ε)), −1, 1)·γ
    written as its threshold (round half to even sends |x|/(γ + ε) = 1/2 to 0, as the strict comparison does), so
    that ε = 0 needs no division; with ε = 0 it is Keras's ``TernaryDense`` rule (Δ = 0.5·mean|W|)."""
    w = tf.cast(x, wide(x.dtype))
    gamma = tf.reduce_mean(tf.abs(w))
    threshold = (gamma + tf.constant(epsilon, w.dtype)) / 2
    codes = tf.sign(w) * tf.cast(tf.abs(w) > threshold, w.dtype)
    return tf.cast(codes * gamma, x.dtype)


def absmax_per_token(x: tf.Tensor, *, bits: int, epsilon: float, axis: tuple[int, ...] = (-1,)) -> tf.Tensor:
    """clip(round(x·Q/m), −Q − 1, Q)·m/Q with Q = 2^(bits−1) − 1 and m = max(max|x|, ε) per token: over the
    ``axis`` axes (the channels of one token; the whole tensor for a scalar or a tensor with fewer axes)."""
    w = tf.cast(x, wide(x.dtype))
    q = tf.constant(2 ** (bits - 1) - 1, w.dtype)
    rank = w.shape.rank
    axes = None if rank == 0 or any(not -rank <= a < rank for a in axis) else list(axis)
    m = tf.maximum(tf.reduce_max(tf.abs(w), axis=axes, keepdims=True), tf.constant(epsilon, w.dtype))
    codes = tf.clip_by_value(tf.round(w * q / m), -q - 1, q)
    return tf.cast(codes * m / q, x.dtype)


absmean_ternary_op = forward(absmean_ternary).backward("identity")
absmax_per_token_op = forward(absmax_per_token).backward("identity")


def _check_epsilon(owner: str, epsilon: Any, zero: bool = False) -> float:
    value = check_number(owner, "epsilon", epsilon)
    if not (value >= 0 if zero else value > 0):
        bound = ">= 0" if zero else "> 0"
        raise ParameterError(
            f"{owner}: epsilon must be {bound}; received {epsilon!r}. Fix: e.g. {owner}(epsilon=1e-5)."
        )
    return value


def _identity(t: tf.Tensor) -> tf.Tensor:
    return t


@keras.saving.register_keras_serializable(package="ste")
@register("absmean_ternary")
class AbsmeanTernary(Quantizer):
    """BitNet b1.58's weight quantizer: γ = mean|W| over the tensor, W_q = clip(round(W/(γ + ε)), −1, 1)·γ (values
    −γ, 0, γ), computed as its threshold: W_q = sign(W)·[|W| > (γ + ε)/2]·γ; gradient ``dy`` (straight-through).
    ``epsilon=0`` (allowed: the threshold needs no division) is Keras's ``TernaryDense`` rule, Δ = 0.5·mean|W|,
    which ``ste.quantize_model(model, scheme="ternary")`` uses. Spec name ``"absmean_ternary"``."""

    precision = 2

    def __init__(self, epsilon: float = 1e-5, **kwargs: Any) -> None:
        self.epsilon = _check_epsilon("AbsmeanTernary", epsilon, zero=True)
        super().__init__(**kwargs)
        self.op = absmean_ternary_op
        self.built = True

    def call(self, inputs: Any) -> tf.Tensor:
        return self.op(as_tensor(inputs, self), epsilon=self.epsilon)

    def gradient_reference(self, x: tf.Tensor) -> Callable[[tf.Tensor], tf.Tensor] | None:
        """The identity: the gradient is ``dy``."""
        return _identity

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "epsilon": self.epsilon}


@keras.saving.register_keras_serializable(package="ste")
@register("absmax_per_token")
class AbsmaxPerToken(Quantizer):
    """BitNet b1.58's activation quantizer: ``bits``-bit absmax per token, m = max|x| over the token's channels
    (``axis``: the last axis by default, one row; ``axis=(-2, -1)`` for an attention output of heads × head_dim) at
    least ε, x_q = clip(round(x·Q/m), −Q − 1, Q)·m/Q with Q = 2^(bits−1) − 1 (127 for 8 bits); gradient ``dy``
    (straight-through). Spec name ``"absmax_per_token"``."""

    def __init__(self, bits: int = 8, epsilon: float = 1e-5, axis: int | tuple[int, ...] = -1, **kwargs: Any) -> None:
        self.bits = check_bits("AbsmaxPerToken", bits, low=2)
        self.epsilon = _check_epsilon("AbsmaxPerToken", epsilon)
        self.axis = _check_axis(axis)
        self.precision = self.bits
        super().__init__(**kwargs)
        self.op = absmax_per_token_op
        self.built = True

    def call(self, inputs: Any) -> tf.Tensor:
        x = as_tensor(inputs, self)
        check_levels(self, x.dtype, bits=self.bits, levels_for_bits=_token_levels)
        return self.op(x, bits=self.bits, epsilon=self.epsilon, axis=self.axis)

    def gradient_reference(self, x: tf.Tensor) -> Callable[[tf.Tensor], tf.Tensor] | None:
        """The identity: the gradient is ``dy``."""
        return _identity

    def get_config(self) -> dict[str, Any]:
        axis = self.axis[0] if len(self.axis) == 1 else list(self.axis)
        return {**super().get_config(), "bits": self.bits, "epsilon": self.epsilon, "axis": axis}


def _check_axis(axis: Any) -> tuple[int, ...]:
    """``axis`` (an int or a non-empty sequence of distinct ints) as a tuple."""
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    if not axes or any(isinstance(a, bool) or not isinstance(a, int) for a in axes) or len(set(axes)) < len(axes):
        raise ParameterError(
            f"AbsmaxPerToken: axis must be an int or a non-empty tuple of distinct ints (the axes of one token's "
            f"channels); received {axis!r}. Fix: e.g. axis=-1 (one row), or axis=(-2, -1) for heads × head_dim."
        )
    return axes


def _token_levels(bits: int) -> Levels:
    """The levels of a row whose max|x| is 1: k/Q for k = −Q … Q (the output dtype must keep them apart)."""
    q = 2 ** (bits - 1) - 1
    return Levels(-1.0, 1.0, 2 * q + 1, {"2^(bits-1) - 1": q})
