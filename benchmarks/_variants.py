"""The same quantizer written four ways: with ``ste``, as a hand-written ``tf.custom_gradient`` (the baseline), and
with the two stop-gradient tricks.

A second, independently built copy of the baseline (``custom_gradient_copy``) is timed like the others: its ratio
to the baseline shows how large the measurement noise is (an A/A comparison).

Every variant computes sign(x) (sign(0) = +1) in the forward pass and one of three local derivatives d(x) in the
backward pass (the VJP is dy·d(x)):

* ``straight_through``: 1[abs(x) <= 1] (clipped STE, BinaryNet); primitive clip(x, -1, 1).
* ``sigmoid_surrogate``: beta·sigmoid(beta·x)·sigmoid(-beta·x), beta = 4; primitive sigmoid(beta·x).
* ``approx_sign``: (2 - 2·abs(x))·1[abs(x) <= 1] (Bi-Real Net); primitive 2x - x·abs(x) inside [-1, 1], sign(x) outside.

The stop-gradient tricks need the primitive P: exact ``(P(x) - sg(P(x))) + sg(f(x))`` and naive
``P(x) + sg(f(x) - P(x))`` (the naive form is wrong in the forward for large abs(x) in float16/bfloat16).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

import ste

__all__ = ["RULES", "VARIANTS", "make_op", "sign"]

RULES = ("straight_through", "sigmoid_surrogate", "approx_sign")
VARIANTS = ("custom_gradient", "ste", "stop_gradient_exact", "stop_gradient_naive", "custom_gradient_copy")
BETA = 4.0

Op = Callable[[tf.Tensor], tf.Tensor]


def sign(x: tf.Tensor) -> tf.Tensor:
    """sign(x) with sign(0) = +1."""
    return tf.where(x >= 0, tf.constant(1, x.dtype), tf.constant(-1, x.dtype))


def _derivative(rule: str, x: tf.Tensor) -> tf.Tensor:
    """The hand-written local derivative d(x) (the baseline's math)."""
    if rule == "straight_through":
        return tf.cast(tf.abs(x) <= tf.constant(1, x.dtype), x.dtype)
    if rule == "sigmoid_surrogate":
        beta = tf.constant(BETA, x.dtype)
        z = beta * x
        return beta * tf.sigmoid(z) * tf.sigmoid(-z)
    if rule == "approx_sign":
        ax = tf.abs(x)
        one = tf.constant(1, x.dtype)
        return tf.where(ax <= one, tf.constant(2, x.dtype) - tf.constant(2, x.dtype) * ax, tf.zeros_like(x))
    raise ValueError(rule)


def _primitive(rule: str, x: tf.Tensor) -> tf.Tensor:
    """A function P with P' = d(x), for the stop-gradient tricks."""
    if rule == "straight_through":
        return tf.clip_by_value(x, tf.constant(-1, x.dtype), tf.constant(1, x.dtype))
    if rule == "sigmoid_surrogate":
        return tf.sigmoid(tf.constant(BETA, x.dtype) * x)
    if rule == "approx_sign":
        inside = tf.constant(2, x.dtype) * x - x * tf.abs(x)
        return tf.where(tf.abs(x) <= tf.constant(1, x.dtype), inside, tf.stop_gradient(sign(x)))
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


def make_op(variant: str, rule: str) -> Op:
    """The quantizer ``variant`` of ``rule``."""
    if variant == "ste":
        op: Op = make_ste(rule)
        return op
    if variant in ("custom_gradient", "custom_gradient_copy"):  # the copy: an A/A check of the timing noise
        return make_custom_gradient(rule)
    if variant == "stop_gradient_exact":
        return make_stop_gradient(rule, exact=True)
    if variant == "stop_gradient_naive":
        return make_stop_gradient(rule, exact=False)
    raise ValueError(f"unknown variant {variant!r}")
