"""The three kinds of backward rule, behind the one :class:`Rule` interface the rest of the package uses.

* :class:`SurrogateRule` (``_surrogate``): a registry entry; the VJP is ``dy * d(x)``.
* :class:`CallableRule` (``_callable``): a user VJP ``rule(dy, *inputs, **hyperparams)``.
* :class:`LikeRule` (``_like``): ``backward_like(g)``; the VJP of ``g`` at the same inputs.

What they share is in ``_base`` (the :class:`Rule` interface, the situation of a call, what rebuilding needs) and
``_saved`` (what a rule keeps for the backward pass: the inputs or a bit-packed mask); :func:`make_rule` picks the
kind.

Nothing outside this package branches on these classes: the compiler (``_compile.py``), the ``tf.vectorized_map`` and
forward-mode paths, ``ste.testing.check_gradient``, ``STEFunction.__repr__`` and saving an op go through
:class:`Rule` only.

Rebuilding an op from ordinary ops (:meth:`Rule.rebuild`) is for the places where TensorFlow ignores custom
gradients (``tf.vectorized_map`` and forward-mode autodiff)::

    y = stop_gradient(f(x)) + term,    term = 0 in value, with the rule's derivative

* a registry surrogate: ``term = stop_gradient(d(x)) · (x − stop_gradient(x))``, computed as the surrogate's own
  ``vjp`` of the zero-valued tangent ``x − stop_gradient(x)`` (so entries that override ``vjp`` keep their formula):
  its VJP is ``dy·d(x)`` and its JVP ``d(x)·t``.
* ``backward_like(g)``: ``term = g(x) − stop_gradient(g(x))``: autodiff of ``g`` in either direction.
* a hand-written VJP with a declared JVP (``.backward(vjp, jvp=jvp)``):
  ``term = jvp(x − stop_gradient(x), …, stop_gradient(x), …)``, linear in the zero-valued tangents, so its JVP is
  the declared one; its reverse-mode gradient is the VJP rule itself.
* a hand-written VJP without one: :class:`ste.errors.RuleError`, naming the situation and the fix.

Where ``x`` (or ``g(x)``) is ±inf or NaN, ``x − stop_gradient(x)`` would be NaN, so those elements are masked with
``tf.where``: the forward value stays exactly ``f(x)`` and their derivative is 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...errors import RuleError
from ...registry import Surrogate, get
from ._base import Reference, Rule, RuleParts, Situation, accepted_keywords
from ._callable import CallableRule
from ._like import LikeRule
from ._saved import PackedMask, after_kept
from ._surrogate import SurrogateRule

__all__ = [
    "CallableRule",
    "LikeRule",
    "PackedMask",
    "Reference",
    "Rule",
    "RuleParts",
    "Situation",
    "SurrogateRule",
    "accepted_keywords",
    "after_kept",
    "make_rule",
]


def make_rule(rule: Any, params: Mapping[str, Any], jvp: Callable[..., Any] | None = None) -> Rule:
    """Normalise what ``.backward(rule, jvp=jvp, **params)`` received."""
    if isinstance(rule, (str, Surrogate, Mapping)) or (isinstance(rule, type) and issubclass(rule, Surrogate)):
        if jvp is not None:
            raise RuleError(
                f".backward({rule!r}, jvp=...): a registry surrogate has its JVP already (d(x)·t); jvp= is for a "
                f"hand-written VJP function. Fix: drop jvp=."
            )
        return SurrogateRule(get(rule, **params))
    if callable(rule):
        return CallableRule(rule, params, jvp)
    raise RuleError(
        f".backward() takes a registry name or spec string ('straight_through', 'sigmoid_surrogate(beta=4)'), a "
        f"ste.registry.Surrogate, or a function rule(dy, *inputs); received {type(rule).__name__} {rule!r}."
    )
