"""Multi-bit fixed-range quantizers: :class:`DoReFa` and :class:`Uniform` (explicit rules, no surrogate).

Both round with ``tf.round``, which rounds half to even (0.5 → 0, 1.5 → 2, 2.5 → 2).
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import keras
import tensorflow as tf

from .._common._arguments import check_number
from .._core._dsl import STEFunction, forward
from .._core._maskrule import mask_rule
from ..errors import ParameterError
from ._base import Quantizer, as_tensor, check_bits, refuse_larq_keyword, register
from ._dtypes import Levels, check_levels, wide

__all__ = ["DoReFa", "Uniform"]

_MODES = ("activations", "weights")


def dorefa_activations(x: tf.Tensor, *, bits: int) -> tf.Tensor:
    """round(n·clip(x, 0, 1))/n with n = 2^bits − 1 (round half to even; half precision computes in float32)."""
    w = tf.cast(x, wide(x.dtype))
    n = tf.constant(2**bits - 1, w.dtype)
    return tf.cast(tf.round(tf.clip_by_value(w, tf.zeros([], w.dtype), tf.ones([], w.dtype)) * n) / n, x.dtype)


def _in_unit_interval(x: tf.Tensor) -> tf.Tensor:
    return (x >= 0.0) & (x <= 1.0)


@mask_rule(_in_unit_interval)
def dorefa_activations_vjp(dy: tf.Tensor, inside: tf.Tensor, *, bits: int) -> tf.Tensor:
    """dy·1[0 <= x <= 1], from the mask 0 <= x <= 1 (the op keeps it as bits, not x)."""
    return dy * tf.cast(inside, dy.dtype)


def dorefa_activations_jvp(t: tf.Tensor, x: tf.Tensor, *, bits: int) -> tf.Tensor:
    """t·1[0 <= x <= 1]: the Jacobian is diagonal, so the JVP is the VJP's formula applied to the tangent."""
    return t * tf.cast(_in_unit_interval(x), t.dtype)


dorefa_activations_op = forward(dorefa_activations).backward(dorefa_activations_vjp, jvp=dorefa_activations_jvp)


def _tanh_and_max(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    t = tf.tanh(x)
    m = tf.reduce_max(tf.abs(t))
    return t, tf.where(m > 0, m, tf.ones_like(m))  # an all-zero input has m = 0: use 1 instead of 0/0


def dorefa_weights(x: tf.Tensor, *, bits: int) -> tf.Tensor:
    """2·q(tanh(x)/(2m) + 1/2) − 1 with q(u) = round(n·u)/n, m = max(abs(tanh(x))) (round half to even; half
    precision computes in float32)."""
    w = tf.cast(x, wide(x.dtype))
    n = tf.constant(2**bits - 1, w.dtype)
    t, m = _tanh_and_max(w)
    u = t / (2 * m) + tf.constant(0.5, w.dtype)
    return tf.cast(2 * (tf.round(u * n) / n) - 1, x.dtype)


def dorefa_weights_vjp(dy: tf.Tensor, x: tf.Tensor, *, bits: int) -> tf.Tensor:
    """dy·(1 − tanh²(x))/m, m held constant; 1 − tanh²(x) is computed as 1/cosh²(x) (no cancellation near ±1)."""
    _, m = _tanh_and_max(x)
    sech = 1 / tf.cosh(x)  # cosh overflows to inf for large abs(x), giving the correct limit 0
    return dy * (sech * sech) / m


dorefa_weights_op = forward(dorefa_weights).backward(dorefa_weights_vjp, jvp=dorefa_weights_vjp)


def _dorefa_levels(mode: str) -> Any:
    low = 0.0 if mode == "activations" else -1.0

    def levels(bits: int) -> Levels:
        return Levels(low, 1.0, 2**bits, {"2^bits - 1": 2**bits - 1})

    return levels


@keras.saving.register_keras_serializable(package="ste")
@register("dorefa")
class DoReFa(Quantizer):
    """k-bit DoReFa quantizer (Zhou et al. 2016).

    ``mode="activations"``: round(n·clip(x, 0, 1))/n with n = 2^bits − 1; gradient dy·1[0 <= x <= 1].
    ``mode="weights"``: t = tanh(x), m = max(abs(t)) over the whole tensor (a constant in the backward pass),
    output 2·round(n·(t/(2m) + 1/2))/n − 1 in [−1, 1]; gradient dy·(1 − tanh²(x))/m. An all-zero input uses m = 1.
    Rounding: ``tf.round``, half to even. Spec name ``"dorefa"``. larq's ``DoReFa(k_bit=..., mode=...)`` and
    ``"dorefa_quantizer"`` are ``ste.larq.quantizers.DoReFa``, this class with larq's arguments.
    """

    def __init__(self, bits: int = 2, mode: str = "activations", **kwargs: Any) -> None:
        refuse_larq_keyword(
            "DoReFa",
            kwargs,
            "k_bit",
            takes="bits= and mode=",
            fix=lambda value: f"DoReFa(bits={value}, mode={mode!r})",
        )
        super().__init__(**kwargs)
        self.bits = bits
        self.mode = mode

    # ``bits`` and ``mode`` are read by ``call`` and saved by ``get_config``: setting them validates the new value,
    # so that what is saved is always what is computed.
    @property
    def bits(self) -> int:
        """The bit width, an integer from 1 to 16 (settable; validated)."""
        return self._bits

    @bits.setter
    def bits(self, value: int) -> None:
        self._bits = check_bits("DoReFa", value)
        self.precision = self._bits

    @property
    def mode(self) -> str:
        """``"activations"`` or ``"weights"`` (settable; validated; :meth:`call` reads it at each call)."""
        return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        if not isinstance(value, str) or value not in _MODES:
            raise ParameterError(f"DoReFa: mode must be 'activations' or 'weights'; received {value!r}.")
        self._mode = value

    @property
    def op(self) -> STEFunction[..., tf.Tensor]:
        """The ste op of the current :attr:`mode`."""
        return dorefa_activations_op if self._mode == "activations" else dorefa_weights_op

    def call(self, inputs: Any) -> tf.Tensor:
        x = as_tensor(inputs, self)
        check_levels(self, x.dtype, bits=self._bits, levels_for_bits=_dorefa_levels(self._mode))
        return self.op(x, bits=self._bits)

    def gradient_reference(self, x: tf.Tensor) -> Callable[[tf.Tensor], tf.Tensor] | None:
        """clip(t, 0, 1) for activations; tanh(t)/m with m = max(abs(tanh(x))) of ``x`` held fixed for weights."""
        if self._mode == "activations":
            return lambda t: tf.clip_by_value(t, tf.zeros([], t.dtype), tf.ones([], t.dtype))
        _, m = _tanh_and_max(tf.convert_to_tensor(x))
        return lambda t: tf.tanh(t) / tf.cast(m, t.dtype)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "bits": self.bits, "mode": self.mode}


def zero_grid(bits: int, low: float, high: float) -> tuple[float, int, int]:
    """(Δ, k_low, k_high) of a range across 0 (low < 0 < high): the levels k·Δ for k_low <= k <= k_high, with
    Δ = (high − low)/(2^bits − 2) and the ends k_low = round(low/Δ), k_high = round(high/Δ) (half to even), computed
    exactly: at most 2^bits levels, 0 among them."""
    steps = max(2**bits - 2, 1)  # bits = 1 is refused by Uniform (two levels cannot hold min, max and 0)
    low_q, high_q = Fraction(low), Fraction(high)
    step = (high_q - low_q) / steps
    return float(step), round(low_q / step), round(high_q / step)


def uniform(x: tf.Tensor, *, bits: int, low: float, high: float) -> tf.Tensor:
    """Round to the nearest level of :class:`Uniform`'s grid (round half to even; half precision computes in
    float32): a range across 0 takes clip(round(x/Δ), k_low, k_high)·Δ (:func:`zero_grid`); a range on one side of 0
    takes low + round((clip(x, low, high) − low)/Δ)·Δ with Δ = (high − low)/(2^bits − 1) (written from ``high``
    down when high <= 0, so that high = 0 gives exactly 0)."""
    w = tf.cast(x, wide(x.dtype))
    if low < 0.0 < high:
        step, k_low, k_high = zero_grid(bits, low, high)
        delta = tf.constant(step, w.dtype)
        k = tf.clip_by_value(tf.round(w / delta), tf.constant(k_low, w.dtype), tf.constant(k_high, w.dtype))
        return tf.cast(k * delta, x.dtype)
    lo = tf.constant(low, w.dtype)
    hi = tf.constant(high, w.dtype)
    step = tf.constant((high - low) / (2**bits - 1), w.dtype)
    clipped = tf.clip_by_value(w, lo, hi)
    if high <= 0.0:
        return tf.cast(hi - tf.round((hi - clipped) / step) * step, x.dtype)
    return tf.cast(lo + tf.round((clipped - lo) / step) * step, x.dtype)


def _in_range(x: tf.Tensor, *, low: float, high: float) -> tf.Tensor:
    return (x >= tf.constant(low, x.dtype)) & (x <= tf.constant(high, x.dtype))


@mask_rule(_in_range)
def uniform_vjp(dy: tf.Tensor, inside: tf.Tensor, *, bits: int, low: float, high: float) -> tf.Tensor:
    """dy·1[low <= x <= high], from the mask low <= x <= high (the op keeps it as bits, not x)."""
    return dy * tf.cast(inside, dy.dtype)


def uniform_jvp(t: tf.Tensor, x: tf.Tensor, *, bits: int, low: float, high: float) -> tf.Tensor:
    """t·1[low <= x <= high] (diagonal Jacobian). The VJP reads a mask, so the JVP evaluates the predicate on x."""
    return t * tf.cast(_in_range(x, low=low, high=high), t.dtype)


uniform_op = forward(uniform).backward(uniform_vjp, jvp=uniform_jvp)


@keras.saving.register_keras_serializable(package="ste")
@register("uniform")
class Uniform(Quantizer):
    """Round-to-nearest fake quantization on evenly spaced levels from ``min`` to ``max`` that hold 0 whenever the
    range does, so that an exact 0 (a pruned weight) stays exactly 0.

    * A range across 0 (min < 0 < max; the default [−1, 1]): the multiples k·Δ of Δ = (max − min)/(2^bits − 2),
      from the one nearest min to the one nearest max, k_low = round(min/Δ) to k_high = round(max/Δ): forward
      clip(round(x/Δ), k_low, k_high)·Δ. 0 is a level. A symmetric range keeps both ends as levels on 2^bits − 1
      levels (TFLite's narrow int8 grid [−127, 127]·max/127 at 8 bits); otherwise an end moves to the nearest
      multiple of Δ, by at most Δ/2, and there are at most 2^bits levels. ``bits=1`` is refused there: two levels
      cannot hold min, max and 0.
    * A range on one side of 0 (min >= 0 or max <= 0): 2^bits levels from min to max, both included,
      Δ = (max − min)/(2^bits − 1): forward min + round((clip(x, min, max) − min)/Δ)·Δ. 0 is a level when it is an
      end (min = 0 or max = 0); otherwise 0 is outside the range and maps to the nearer end.

    Gradient dy·1[min <= x <= max]. Rounding: ``tf.round``, half to even. Spec name ``"uniform"``.
    """

    def __init__(self, bits: int = 8, min: float = -1.0, max: float = 1.0, **kwargs: Any) -> None:
        self.bits = check_bits("Uniform", bits)
        self.min = check_number("Uniform", "min", min)
        self.max = check_number("Uniform", "max", max)
        if not self.min < self.max:
            raise ParameterError(f"Uniform: min must be < max; received min={min!r}, max={max!r}.")
        if self.bits == 1 and self.min < 0.0 < self.max:
            raise ParameterError(
                f"Uniform: bits=1 with the range [{min!r}, {max!r}] across 0: two levels cannot hold min, max and 0 "
                f"(the grid keeps 0 exact). Fix: bits >= 2 (bits=2 gives min, 0 and max for a symmetric range), "
                f"ste.quantizers.Sign() for ±1, or a range with 0 at one end (Uniform(bits=1, min=0.0, max=1.0))."
            )
        self.precision = self.bits
        super().__init__(**kwargs)
        self.op = uniform_op

    def call(self, inputs: Any) -> tf.Tensor:
        x = as_tensor(inputs, self)
        check_levels(self, x.dtype, bits=self.bits, levels_for_bits=self._levels)
        return self.op(x, bits=self.bits, low=self.min, high=self.max)

    def gradient_reference(self, x: tf.Tensor) -> Callable[[tf.Tensor], tf.Tensor] | None:
        """clip(t, min, max): the gradient is dy·1[min <= x <= max]."""
        return lambda t: tf.clip_by_value(t, tf.constant(self.min, t.dtype), tf.constant(self.max, t.dtype))

    def _levels(self, bits: int) -> Levels:
        if self.min < 0.0 < self.max:
            step, k_low, k_high = zero_grid(bits, self.min, self.max)
            constants = {"min": self.min, "max": self.max, "step": step}  # Δ is exact: max − min is not computed
            return Levels(k_low * step, k_high * step, k_high - k_low + 1, constants)
        n = 2**bits - 1
        constants = {"min": self.min, "max": self.max, "max - min": self.max - self.min, "2^bits - 1": n}
        return Levels(self.min, self.max, n + 1, constants)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "bits": self.bits, "min": self.min, "max": self.max}
