"""What every kind of rule shares: the :class:`Rule` interface, the situation a rule is called in, and what
rebuilding an op from ordinary ops needs (the zero-valued tangent and its checks)."""

from __future__ import annotations

import abc
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import tensorflow as tf

from ..._common._abstract import Extension
from ...errors import GradientShapeError
from .._gradients import InputSpec


class Situation(NamedTuple):
    """Where an op is rebuilt from ordinary ops, for error messages: ``where``, and the way out for a VJP rule."""

    where: str  # "inside tf.vectorized_map (a pfor loop body)"
    why: str  # why custom gradients do not apply there
    fix: str  # what to do with a hand-written rule


class Reference(NamedTuple):
    """What ``ste.testing.check_gradient`` compares a rule with when no reference is given."""

    fn: Callable[..., Any]  # a function of the op's positional inputs; its autodiff gradient is the expected one
    what: str  # how the failure message names it
    in_float64: bool  # differentiate it in float64 (a surrogate's primitive: the most accurate reference)


class RuleParts(NamedTuple):
    """How a rule was attached, for saving an op: ``kind`` is "surrogate", "like" or "function"."""

    kind: str
    rule: Any  # the Surrogate, g, or the rule function
    params: dict[str, Any]  # hyperparameters bound by .backward(fn, **params) (a function rule only)
    jvp: Any = None  # the JVP declared by .backward(fn, jvp=...) (a function rule only)


class Rule(Extension):
    """Everything the package needs of a backward rule."""

    @property
    @abc.abstractmethod
    def needs_inputs(self) -> bool:
        """Whether :meth:`gradients` reads the forward's inputs (else only their shapes are kept)."""

    @property
    @abc.abstractmethod
    def public(self) -> Any:
        """What ``STEFunction.rule`` shows: the Surrogate, the rule function, or ``g``."""

    @property
    @abc.abstractmethod
    def elementwise(self) -> bool:
        """Whether the op must be elementwise (one input, one output of the input's shape)."""

    @abc.abstractmethod
    def describe(self) -> str:
        """How the rule was attached: ``backward(sigmoid_surrogate(beta=1.0))``, ``backward_like(tanh)``."""

    @abc.abstractmethod
    def saved_for_backward(self, xs: Sequence[tf.Tensor], kwargs: Mapping[str, Any]) -> Any:
        """What the op keeps for :meth:`gradients` (called only when :attr:`needs_inputs`): the inputs, or less
        (a mask-only surrogate or a :func:`ste.mask_rule` rule: a :class:`PackedMask`)."""

    @abc.abstractmethod
    def check_call(self, n_inputs: int, kwargs: Mapping[str, Any], op: str) -> None:
        """Before tracing: can the rule serve ``n_inputs`` positional inputs and these keyword hyperparameters?"""

    @abc.abstractmethod
    def check_outputs(self, xs: Sequence[tf.Tensor], result: Any, op: str) -> None:
        """While tracing, once the forward has run: can the rule serve these outputs?"""

    @abc.abstractmethod
    def gradients(
        self, dy: Any, inputs: Sequence[tf.Tensor] | None, specs: Sequence[InputSpec], kwargs: Mapping[str, Any]
    ) -> Any:
        """One gradient per positional input (``inputs`` is None unless :attr:`needs_inputs`)."""

    @abc.abstractmethod
    def rebuild(
        self,
        forward_fn: Callable[..., Any],
        kwargs: Mapping[str, Any],
        xs: Sequence[tf.Tensor],
        op: str,
        situation: Situation,
    ) -> Any:
        """The op made of ordinary differentiable ops (no custom gradient), or :class:`ste.errors.RuleError`."""

    @abc.abstractmethod
    def reference(self, kwargs: Mapping[str, Any]) -> Reference | None:
        """The differentiable function the rule's gradient should equal; None for a hand-written VJP."""

    @abc.abstractmethod
    def parts(self) -> RuleParts:
        """What saving the op records: the kind, the public object and the hyperparameters bound to it."""


def accepted_keywords(fn: Callable[..., Any]) -> frozenset[str] | None:
    """The keyword names ``fn`` accepts; None when it takes ``**kwargs`` (or its signature cannot be read)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return frozenset(
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    )


def select_accepted(kwargs: Mapping[str, Any], accepted: frozenset[str] | None) -> dict[str, Any]:
    if accepted is None:
        return dict(kwargs)
    return {key: value for key, value in kwargs.items() if key in accepted}


def zero_tangent(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """``(x − stop_gradient(x), stop_gradient(x))`` with non-finite elements replaced by 0 (value exactly 0)."""
    held = tf.stop_gradient(x)
    finite = tf.math.is_finite(held)
    zeros = tf.zeros_like(held)
    return tf.where(finite, x - held, zeros), tf.where(finite, held, zeros)


def exact_zero(term: tf.Tensor) -> tf.Tensor:
    """``term`` where its value is finite, else 0: the added term never changes the forward value."""
    return tf.where(tf.math.is_finite(tf.stop_gradient(term)), term, tf.zeros_like(term))


def check_same_shape(out: tf.Tensor, ref: tf.Tensor, what: str, op: str, situation: Situation) -> None:
    if out.shape.rank is not None and ref.shape.rank is not None and not out.shape.is_compatible_with(ref.shape):
        raise GradientShapeError(
            f"{op}: {situation.where} the output of the forward function has shape {out.shape} but {what} has shape "
            f"{ref.shape}; ste builds the derivative there elementwise, so they must be equal. Fix: make the forward "
            f"elementwise."
        )
