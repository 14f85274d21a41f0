"""``ste`` ops inside ``tf.vectorized_map`` (and any other ``pfor`` loop body), where custom gradients are lost.

``tf.vectorized_map`` traces its function once and then rewrites ("converts") every op of the trace into a batched
op. ``tf.custom_gradient`` attaches its gradient to an ``IdentityN`` op through a per-op gradient override, and the
converter for ``IdentityN`` builds a plain ``IdentityN`` without it: the custom gradient disappears and TensorFlow
differentiates the forward function instead (a sign STE silently gets all-zero gradients).

An ``ste`` op therefore checks, while it is traced, whether a ``pfor`` loop body is being traced (the conversion
machinery, ``parallel_for.control_flow_ops._pfor_impl``, is on the Python stack). There it builds an equivalent
op out of ordinary differentiable ops, which the converter keeps:

* a registry surrogate (rule ``dy·d(x)``, elementwise)::

      y = stop_gradient(f(x)) + stop_gradient(d(x)) · (x − stop_gradient(x))

  The second term is exactly 0 in the forward pass and its gradient is exactly ``dy·d(x)`` (the surrogate's own
  ``vjp``, applied to the zero-valued tangent, so entries that override ``vjp`` keep their formula).
* ``backward_like(g)``: ``y = stop_gradient(f(x)) + (g(x) − stop_gradient(g(x)))``: the gradient is autodiff of g.
* a hand-written rule ``rule(dy, *inputs)`` cannot be expressed without a custom gradient: :class:`ste.RuleError`
  is raised while tracing, naming the op and the fix. Never a silently wrong gradient.

Where ``x`` (or ``g(x)``) is ±inf or NaN, ``x − stop_gradient(x)`` would be NaN, so those elements are masked with
``tf.where``: the forward value stays exactly ``f(x)`` and their gradient is 0 (the documented ``dy·d(±inf)`` is 0 for
every decaying or clipped surrogate; only entries with a non-zero derivative at infinity, such as ``identity``,
differ there, and only inside ``tf.vectorized_map``). Elsewhere in the tensor gradients are unaffected.

Limitation: a ``tf.function`` that was already traced outside ``tf.vectorized_map`` and is then called inside it is
not traced again, so the check cannot run; trace it inside (or call the ste op directly in the mapped function).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from types import CodeType, FrameType
from typing import Any

import tensorflow as tf

from ._errors import GradientShapeError, RuleError
from ._gradients import check_gradients, input_spec
from ._rules import LikeRule, Rule, SurrogateRule, _select

__all__ = ["in_vectorized_map", "stop_gradient_call"]


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


def _zero_tangent(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """``(x − stop_gradient(x), stop_gradient(x))`` with non-finite elements replaced by 0 (value exactly 0)."""
    held = tf.stop_gradient(x)
    finite = tf.math.is_finite(held)
    zeros = tf.zeros_like(held)
    return tf.where(finite, x - held, zeros), tf.where(finite, held, zeros)


def _exact_zero(term: tf.Tensor) -> tf.Tensor:
    """``term`` where its value is finite, else 0: the added term never changes the forward value."""
    return tf.where(tf.math.is_finite(tf.stop_gradient(term)), term, tf.zeros_like(term))


def _check_like_output(result: tf.Tensor, x: tf.Tensor, what: str, label: str) -> None:
    if result.shape.rank is not None and x.shape.rank is not None and not result.shape.is_compatible_with(x.shape):
        raise GradientShapeError(
            f"{label}: inside tf.vectorized_map the output of the forward function has shape {result.shape} but "
            f"{what} has shape {x.shape}; ste builds the gradient there elementwise, so they must be equal. Fix: make "
            f"the forward elementwise, or use tf.map_fn instead of tf.vectorized_map."
        )


def _surrogate_call(
    forward_fn: Callable[..., Any], rule: SurrogateRule, kwargs: Mapping[str, Any], xs: Sequence[tf.Tensor], label: str
) -> Any:
    (x,) = xs  # SurrogateRule.check_call has already required exactly one input
    result = forward_fn(tf.stop_gradient(x), **kwargs)
    if not isinstance(result, tf.Tensor):
        raise RuleError(
            f"{label}: the surrogate {rule.describe()} is the derivative of a one-output elementwise op; this "
            f"forward returned {type(result).__name__}. Fix: write a rule rule(dy, x) returning one gradient."
        )
    _check_like_output(result, x, "the input", label)
    specs = [input_spec(x)]
    tangent, held = _zero_tangent(x)
    if rule.surrogate.constant_derivative == 0:
        # zero: keep the gradient a tensor of zeros (never None) without multiplying an infinite dy by 0.
        term = tf.math.multiply_no_nan(tangent, tf.zeros_like(held))
    else:
        (term,) = check_gradients(rule.gradients(tangent, [held], specs, kwargs), specs, label)
        assert term is not None
        term = _exact_zero(term)
    return tf.stop_gradient(result) + tf.cast(term, result.dtype)


def _like_call(
    forward_fn: Callable[..., Any], rule: LikeRule, kwargs: Mapping[str, Any], xs: Sequence[tf.Tensor], label: str
) -> Any:
    result = forward_fn(*(tf.stop_gradient(x) for x in xs), **kwargs)
    reference = rule.g(*xs, **_select(kwargs, rule._accepted))
    flat_result = tf.nest.flatten(result)
    flat_reference = tf.nest.flatten(reference)
    if len(flat_result) != len(flat_reference):
        raise RuleError(
            f"{label}: backward_like g returned {len(flat_reference)} output(s); the forward returns "
            f"{len(flat_result)}. g must return outputs like the forward's."
        )
    outputs = []
    for index, (out, ref) in enumerate(zip(flat_result, flat_reference)):
        if not isinstance(ref, tf.Tensor):
            raise RuleError(f"{label}: output {index} of backward_like g is a {type(ref).__name__}, not a tensor.")
        _check_like_output(out, ref, f"output {index} of backward_like g", label)
        term = _exact_zero(ref - tf.stop_gradient(ref))
        outputs.append(tf.stop_gradient(out) + tf.cast(term, out.dtype))
    return tf.nest.pack_sequence_as(result, outputs)


def stop_gradient_call(
    forward_fn: Callable[..., Any], rule: Rule, kwargs: Mapping[str, Any], xs: Sequence[tf.Tensor], label: str
) -> Any:
    """The op built from ordinary ops (no custom gradient), for use inside ``tf.vectorized_map``."""
    if isinstance(rule, SurrogateRule):
        return _surrogate_call(forward_fn, rule, kwargs, xs, label)
    if isinstance(rule, LikeRule):
        return _like_call(forward_fn, rule, kwargs, xs, label)
    raise RuleError(
        f"{label}: called inside tf.vectorized_map (a pfor loop body). TensorFlow drops custom gradients there, and "
        f"the hand-written rule {rule.describe()} cannot be rebuilt from ordinary ops, so its gradient would be "
        f"silently wrong. Fix: use tf.map_fn instead of tf.vectorized_map, or a registry surrogate / "
        f".backward_like(g) rule, which ste rebuilds exactly inside tf.vectorized_map."
    )
