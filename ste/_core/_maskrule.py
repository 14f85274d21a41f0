"""``ste.mask_rule(predicate)``: a hand-written VJP whose gradient reads its input only through a predicate.

A rule such as ``dy·1[low <= x <= high]`` needs one bit per element of ``x``, not ``x``. Declared with
``@ste.mask_rule(predicate)``, the op evaluates ``predicate(x, **hyperparams)`` in the forward pass and keeps the
boolean result bit-packed (``ste/_core/_bitmask.py``); the rule is then called as ``rule(dy, mask, *kept,
**hyperparams)``. ``predicate`` returns the boolean mask, or a tuple ``(mask, *kept)`` whose other tensors are kept
as they are (small ones, e.g. a per-channel scale held constant in the backward pass). With bit masks off (or an
eager tensor too small to pack) the op keeps ``x`` and evaluates the predicate in the backward pass instead: the
rule sees the same mask either way, so its gradients are the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import RuleError
from ._describe import callable_name

__all__ = ["declared_mask", "mask_rule"]

_ATTRIBUTE = "__ste_mask__"
F = TypeVar("F", bound=Callable[..., Any])


def mask_rule(predicate: Callable[..., Any]) -> Callable[[F], F]:
    """Declare that a VJP rule reads its (single) input only through ``predicate(x, **hyperparams)``.

    The decorated rule is called as ``rule(dy, mask, *kept, **hyperparams)``; ``predicate`` returns a boolean tensor,
    or ``(mask, *kept)``. Ops with such a rule keep the mask as bits instead of their float input::

        @ste.mask_rule(lambda x: abs(x) <= 1.0)
        def clipped(dy, inside):
            return dy * tf.cast(inside, dy.dtype)

        op = ste.forward(tf.sign).backward(clipped)
    """
    if not callable(predicate):
        raise RuleError(
            f"ste.mask_rule(predicate): expected a function of the input returning a boolean mask (or a tuple "
            f"(mask, *kept)); received {type(predicate).__name__} {predicate!r}."
        )

    def declare(rule: F) -> F:
        if not callable(rule):
            raise RuleError(
                f"ste.mask_rule({callable_name(predicate)}) decorates a VJP rule(dy, mask, *kept, **hyperparams); "
                f"received {type(rule).__name__} {rule!r}."
            )
        setattr(rule, _ATTRIBUTE, predicate)
        return rule

    return declare


def declared_mask(rule: Any) -> Callable[..., Any] | None:
    """The predicate ``rule`` declared with :func:`mask_rule`, or None."""
    predicate = getattr(rule, _ATTRIBUTE, None)
    return predicate if callable(predicate) else None
