"""Detecting that an ``ste`` op is traced inside ``tf.vectorized_map`` (or any other ``pfor`` loop body).

``tf.vectorized_map`` traces its function once and then rewrites ("converts") every op of the trace into a batched
op. ``tf.custom_gradient`` attaches its gradient to an ``IdentityN`` op through a per-op gradient override, and the
converter for ``IdentityN`` builds a plain ``IdentityN`` without it: the custom gradient disappears and TensorFlow
differentiates the forward function instead (a sign STE silently gets all-zero gradients).

An ``ste`` op therefore checks, while it is traced, whether a ``pfor`` loop body is being traced (the conversion
machinery, ``parallel_for.control_flow_ops._pfor_impl``, is on the Python stack). There the compiler asks the rule to
rebuild the op from ordinary differentiable ops, which the converter keeps (:meth:`ste._core._rules.Rule.rebuild`: exact
for registry surrogates and ``backward_like``; :class:`ste.errors.RuleError` for a hand-written rule).

Limitation: a ``tf.function`` that was already traced outside ``tf.vectorized_map`` and is then called inside it is
not traced again, so the check cannot run; trace it inside (or call the ste op directly in the mapped function).
"""

from __future__ import annotations

import sys
from types import CodeType, FrameType

import tensorflow as tf

from ._rules import Situation

__all__ = ["VECTORIZED_MAP", "in_vectorized_map"]


def _pfor_code() -> CodeType | None:
    try:
        from tensorflow.python.ops.parallel_for import control_flow_ops
    except ImportError:  # pragma: no cover - layout of a future TensorFlow
        return None
    impl = getattr(control_flow_ops, "_pfor_impl", None)
    code = getattr(impl, "__code__", None)
    return code if isinstance(code, CodeType) else None


_PFOR_CODE = _pfor_code()


def _is_pfor_frame(frame: FrameType) -> bool:
    code = frame.f_code
    if _PFOR_CODE is not None:
        return code is _PFOR_CODE
    return code.co_name == "_pfor_impl" and "parallel_for" in code.co_filename  # pragma: no cover


def in_vectorized_map() -> bool:
    """Whether the caller is being traced as (part of) the loop body of ``tf.vectorized_map`` / ``pfor``."""
    if tf.executing_eagerly():  # pfor always traces its loop body in graph mode
        return False
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if _is_pfor_frame(frame):
            return True
        frame = frame.f_back
    return False


VECTORIZED_MAP = Situation(
    where="inside tf.vectorized_map (a pfor loop body)",
    why="TensorFlow drops custom gradients there",
    fix=(
        "use tf.map_fn instead of tf.vectorized_map, or a registry surrogate / .backward_like(g) rule, which ste "
        "rebuilds exactly inside tf.vectorized_map, or declare the rule's JVP: .backward(rule, jvp=jvp)."
    ),
)
