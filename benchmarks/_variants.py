"""The same quantizer written five ways: with ``ste`` (by default, and with ``ste.bit_masks(False)``), as a
hand-written ``tf.custom_gradient`` (the baseline), and with the two stop-gradient tricks.

``ste_bits_off`` is the op as in ste 0.1 (it keeps its float input: the "costs nothing against a hand-written
custom gradient" comparison, whose traced graph must equal the hand-written one); ``ste`` is the default, which
keeps a bit-packed mask for mask-only rules such as ``straight_through`` (the time it costs buys 1/32 of the memory).

A second, independently built copy of the baseline (``custom_gradient_copy``) is timed like the others: its ratio
to the baseline shows how large the measurement noise is (an A/A comparison).

Every variant computes sign(x) (sign(0) = +1) in the forward pass and one of three local derivatives d(x) in the
backward pass (the VJP is dy·d(x)):

* ``straight_through``: 1[abs(x) <= 1] (clipped STE, BinaryNet); primitive clip(x, -1, 1).
* ``sigmoid_surrogate``: beta·sigmoid(beta·x)·sigmoid(-beta·x), beta = 4; primitive sigmoid(beta·x).
* ``approx_sign``: (2 - 2·abs(x))·1[abs(x) <= 1] = 2·relu(1 - abs(x)) (Bi-Real Net); primitive 2c - c·abs(c) with
  c = clip(x, -1, 1).

The hand-written formulas are those of ste's registry entries, including their choice to evaluate the two smooth
ones in float32 for float16/bfloat16 inputs, so that every variant does the same math.

The stop-gradient tricks need the primitive P: exact ``(P(x) - sg(P(x))) + sg(f(x))`` and naive
``P(x) + sg(f(x) - P(x))`` (the naive form is wrong in the forward for large abs(x) in float16/bfloat16).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

import ste

__all__ = ["RULES", "VARIANTS", "bits_off", "make_op", "sign"]

RULES = ("straight_through", "sigmoid_surrogate", "approx_sign")
VARIANTS = (
    "custom_gradient",
    "ste_bits_off",
    "ste",
    "stop_gradient_exact",
    "stop_gradient_naive",
    "custom_gradient_copy",
)
BETA = 4.0

Op = Callable[[tf.Tensor], tf.Tensor]


def sign(x: tf.Tensor) -> tf.Tensor:
    """sign(x) with sign(0) = +1."""
    return tf.where(x >= 0, tf.constant(1, x.dtype), tf.constant(-1, x.dtype))


def _half_in_float32(fn: Callable[[tf.Tensor], tf.Tensor], x: tf.Tensor) -> tf.Tensor:
    """Evaluate ``fn`` on float16/bfloat16 input in float32 and round once, as ste's registry entries do."""
    if x.dtype in (tf.float16, tf.bfloat16):
        return tf.cast(fn(tf.cast(x, tf.float32)), x.dtype)
    return fn(x)


def _sigmoid_derivative(x: tf.Tensor) -> tf.Tensor:
    beta = tf.constant(BETA, x.dtype)
    z = beta * x
    return beta * tf.sigmoid(z) * tf.sigmoid(-z)


def _derivative(rule: str, x: tf.Tensor) -> tf.Tensor:
    """The hand-written local derivative d(x): the same formulas as ste's registry entries (the same math)."""
    if rule == "straight_through":
        return tf.cast(tf.abs(x) <= tf.constant(1, x.dtype), x.dtype)
    if rule == "sigmoid_surrogate":
        return _half_in_float32(_sigmoid_derivative, x)
    if rule == "approx_sign":
        return _half_in_float32(lambda v: 2 * tf.nn.relu(1 - tf.abs(v)), x)
    raise ValueError(rule)


def _approx_sign_primitive(x: tf.Tensor) -> tf.Tensor:
    c = tf.clip_by_value(x, -1.0, 1.0)
    return 2 * c - c * tf.abs(c)


def _primitive(rule: str, x: tf.Tensor) -> tf.Tensor:
    """A function P with P' = d(x), for the stop-gradient tricks (the registry entries' primitives)."""
    if rule == "straight_through":
        return tf.clip_by_value(x, tf.constant(-1, x.dtype), tf.constant(1, x.dtype))
    if rule == "sigmoid_surrogate":
        return _half_in_float32(lambda v: tf.sigmoid(tf.constant(BETA, v.dtype) * v), x)
    if rule == "approx_sign":
        return _half_in_float32(_approx_sign_primitive, x)
    raise ValueError(rule)


def _approx_sign_rule(dy: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
    return dy * _derivative("approx_sign", x)


def ste_rule_description(rule: str) -> str:
    """How the ``ste`` variant gets its rule (a registry entry, or a function rule where the entry is missing)."""
    if rule == "approx_sign" and "approx_sign" not in ste.registry.names():
        return "function rule (no 'approx_sign' registry entry on this branch)"
    return f"registry '{_ste_spec(rule)}'"


def _ste_spec(rule: str) -> str:
    if rule == "straight_through":
        return "straight_through(clip=1.0)"
    if rule == "sigmoid_surrogate":
        return f"sigmoid_surrogate(beta={BETA})"
    return "approx_sign"


def make_ste(rule: str) -> Any:
    """A fresh ``ste`` op (no compile cache shared with other calls)."""
    if rule == "approx_sign" and "approx_sign" not in ste.registry.names():
        return ste.forward(sign).backward(_approx_sign_rule)
    return ste.forward(sign).backward(_ste_spec(rule))


def make_custom_gradient(rule: str) -> Op:
    """The hand-written baseline: what a user writes without ``ste``."""

    @tf.custom_gradient
    def quantize(x: tf.Tensor) -> Any:
        def grad(dy: tf.Tensor) -> tf.Tensor:
            return dy * _derivative(rule, x)

        return sign(x), grad

    return quantize


def make_stop_gradient(rule: str, exact: bool) -> Op:
    def quantize(x: tf.Tensor) -> tf.Tensor:
        p = _primitive(rule, x)
        if exact:
            return (p - tf.stop_gradient(p)) + tf.stop_gradient(sign(x))
        return p + tf.stop_gradient(sign(x) - p)

    return quantize


def bits_off(op: Op) -> Op:
    """``op`` as ste 0.1 ran it: traced or called with ``ste.bit_masks(False)``, so a mask-only rule keeps its float
    input (the switch is read when the op is traced or called)."""

    def quantize(x: tf.Tensor) -> tf.Tensor:
        with ste.bit_masks(False):
            return op(x)

    return quantize


def make_op(variant: str, rule: str) -> Op:
    """The quantizer ``variant`` of ``rule``."""
    if variant == "ste":
        op: Op = make_ste(rule)
        return op
    if variant == "ste_bits_off":
        return bits_off(make_ste(rule))
    if variant in ("custom_gradient", "custom_gradient_copy"):  # the copy: an A/A check of the timing noise
        return make_custom_gradient(rule)
    if variant == "stop_gradient_exact":
        return make_stop_gradient(rule, exact=True)
    if variant == "stop_gradient_naive":
        return make_stop_gradient(rule, exact=False)
    raise ValueError(f"unknown variant {variant!r}")
