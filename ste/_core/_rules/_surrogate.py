"""Registry surrogates as rules: the VJP ``dy * d(x)``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from ...errors import RuleError
from ...registry import HasPrimitive, MaskOnly, Surrogate
from .._bitmask import (
    CallerHeld,
    held_by_caller,
    keep_bits,
    opaque,
    read_after,
    times_mask,
)
from .._gradients import InputSpec, check_gradients, input_spec
from ._base import Reference, Rule, RuleParts, Situation, exact_zero, zero_tangent
from ._saved import PackedMask, pack_mask, read_after_mask, unpack_mask


def _casts_the_mask(surrogate: MaskOnly) -> bool:
    """Whether ``surrogate`` declares its derivative from a mask the mask's 0s and 1s (``MaskOnly.indicator``), so
    that the mask can be unpacked straight into ``dtype``: the same 0s and 1s, multiplied the same way."""
    return surrogate.indicator


class SurrogateRule(Rule):
    """A registry surrogate used as the rule of an elementwise one-input, one-output op."""

    def __init__(self, surrogate: Surrogate) -> None:
        self.surrogate = surrogate
        # Properties of an immutable surrogate: read once, not on every call.
        self._masked: MaskOnly | None = surrogate if isinstance(surrogate, MaskOnly) else None
        self._mask_only = self._masked is not None
        self._constant = surrogate.constant_derivative

    @property
    def needs_inputs(self) -> bool:
        return self._constant is None

    @property
    def public(self) -> Surrogate:
        return self.surrogate

    elementwise = True

    def describe(self) -> str:
        return f"backward({self.surrogate!r})"

    def saved_for_backward(self, xs: Sequence[tf.Tensor], kwargs: Mapping[str, Any]) -> Any:
        x = xs[0]
        if self._masked is not None and keep_bits(x):
            return pack_mask(self._masked.mask(tf.stop_gradient(x)))  # see CallableRule.saved_for_backward
        if self._mask_only and held_by_caller(x):
            return CallerHeld(xs)
        return xs

    def _fix(self) -> str:
        return (
            f"Fix: write a rule rule(dy, *inputs) returning one gradient per input (apply the surrogate inside it: "
            f"ste.registry.get({repr(self.surrogate)!r}).vjp(dy, x)), or use .backward_like(g) with a "
            f"differentiable g of the same inputs and outputs."
        )

    def check_call(self, n_inputs: int, kwargs: Mapping[str, Any], op: str) -> None:
        if n_inputs != 1:
            raise RuleError(
                f"{op}: the surrogate {self.surrogate!r} is the derivative of an elementwise one-input, one-output "
                f"op; this op has {n_inputs} positional inputs. {self._fix()}"
            )

    def check_outputs(self, xs: Sequence[tf.Tensor], result: Any, op: str) -> None:
        if not isinstance(result, tf.Tensor):
            count = len(tf.nest.flatten(result))
            raise RuleError(
                f"{op}: the surrogate {self.surrogate!r} is the derivative of an elementwise one-input, one-output "
                f"op; this forward returns a {type(result).__name__} of {count} tensor(s), and one dy·d(x) cannot "
                f"say which output each gradient comes from. {self._fix()}"
            )
        (x,) = xs
        self.surrogate.check_dtype(x.dtype, op)  # hyperparameters that overflow this dtype: ParameterError
        out_shape, in_shape = result.shape, x.shape
        if out_shape == in_shape:  # the common case, checked first (equal shapes are compatible)
            return
        if out_shape.rank is not None and in_shape.rank is not None and not out_shape.is_compatible_with(in_shape):
            raise RuleError(
                f"{op}: registry surrogates such as {self.surrogate!r} need an elementwise forward (output shape = "
                f"input shape); this forward maps shape {in_shape} to {out_shape}, so dy·d(x) has no meaning. "
                f"{self._fix()}"
            )

    def gradients(
        self, dy: Any, inputs: Sequence[tf.Tensor] | None, specs: Sequence[InputSpec], kwargs: Mapping[str, Any]
    ) -> Any:
        if isinstance(inputs, CallerHeld):
            inputs = read_after(dy, inputs)
        if isinstance(inputs, PackedMask):
            masked = self._masked
            assert masked is not None  # only a mask-only surrogate keeps a mask
            dtype = specs[0].dtype
            if _casts_the_mask(masked):
                return times_mask(tf.cast(dy, dtype), read_after_mask(dy, inputs), inputs.shape)
            return opaque(masked.vjp_from_mask(dy, unpack_mask(dy, inputs), dtype))
        constant = self._constant
        if constant is None:
            assert inputs is not None
            return self.surrogate.vjp(dy, inputs[0])
        spec = specs[0]
        if constant == 0:
            shape = spec.shape if spec.dynamic_shape is None else spec.dynamic_shape
            return tf.zeros(shape, dtype=spec.dtype)
        grad = tf.cast(dy, spec.dtype)
        return grad if constant == 1 else grad * tf.constant(constant, spec.dtype)

    def rebuild(
        self,
        forward_fn: Callable[..., Any],
        kwargs: Mapping[str, Any],
        xs: Sequence[tf.Tensor],
        op: str,
        situation: Situation,
    ) -> Any:
        (x,) = xs  # check_call has already required exactly one input
        result = forward_fn(tf.stop_gradient(x), **kwargs)
        self.check_outputs(xs, result, op)  # one output of the input's shape
        specs = [input_spec(x)]

        # The reverse-mode gradient is the rule's own dy·d(x) of the live input (as in the compiled op), so that
        # forward-over-reverse (Hessian-vector products) differentiates d, as reverse-over-reverse does; the
        # expression's ops give the JVP d(x)·t. Where custom gradients are ignored (vectorized_map) the expression's
        # own first-order gradient d(x) applies.
        @tf.custom_gradient  # type: ignore[untyped-decorator]
        def rebuilt(x: tf.Tensor) -> tuple[tf.Tensor, Callable[..., Any]]:
            tangent, held = zero_tangent(x)
            if self.surrogate.constant_derivative == 0:
                # zero: keep the derivative a tensor of zeros (never None) without multiplying an infinite dy by 0.
                term = tf.math.multiply_no_nan(tangent, tf.zeros_like(held))
            else:
                (term,) = check_gradients(self.gradients(tangent, [held], specs, kwargs), specs, op)
                assert term is not None
                term = exact_zero(term)

            def grad(dy: tf.Tensor, variables: Sequence[tf.Variable] | None = None) -> Any:
                (dx,) = check_gradients(self.gradients(dy, [x], specs, kwargs), specs, op)
                if variables is None:
                    return dx
                return [dx], [None] * len(variables)  # hyperparameter variables get no gradient, as in the op

            return tf.stop_gradient(result) + tf.cast(term, result.dtype), grad

        return rebuilt(x)

    def parts(self) -> RuleParts:
        return RuleParts("surrogate", self.surrogate, {})

    def reference(self, kwargs: Mapping[str, Any]) -> Reference | None:
        if not isinstance(self.surrogate, HasPrimitive):
            return None
        return Reference(self.surrogate.primitive, f"the autodiff gradient of {self.surrogate!r}'s primitive", True)
