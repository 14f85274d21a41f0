"""``backward_like(g)`` as a rule: the VJP of ``g`` at the same inputs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from ...errors import GradientShapeError, RuleError
from .._describe import callable_name
from .._gradients import InputSpec
from ._base import (
    Reference,
    Rule,
    RuleParts,
    Situation,
    accepted_keywords,
    check_same_shape,
    exact_zero,
    select_accepted,
)
from ._saved import keep_inputs


class LikeRule(Rule):
    """``backward_like(g)``: the gradient is the VJP of ``g`` at the forward's inputs."""

    def __init__(self, g: Callable[..., Any]) -> None:
        if not callable(g):
            raise RuleError(f"backward_like(g) needs a callable g; received {type(g).__name__} {g!r}.")
        self.g = g
        self._accepted = accepted_keywords(g)

    needs_inputs = True
    elementwise = False
    saved_for_backward = staticmethod(keep_inputs)

    @property
    def public(self) -> Callable[..., Any]:
        return self.g

    def describe(self) -> str:
        return f"backward_like({callable_name(self.g)})"

    def check_call(self, n_inputs: int, kwargs: Mapping[str, Any], op: str) -> None:
        return None

    def check_outputs(self, xs: Sequence[tf.Tensor], result: Any, op: str) -> None:
        return None  # g's outputs are compared with the forward's where g runs (gradients, rebuild)

    def _call_g(self, xs: Sequence[tf.Tensor], kwargs: Mapping[str, Any], like: Any) -> list[tf.Tensor]:
        """``g(*xs)`` flattened, checked against the forward's flattened outputs ``like``."""
        reference = self.g(*xs, **select_accepted(kwargs, self._accepted))
        flat_ref: list[Any] = tf.nest.flatten(reference)
        flat_like = tf.nest.flatten(like)
        name = callable_name(self.g)
        if len(flat_ref) != len(flat_like):
            raise RuleError(
                f"backward_like({name}): g returned {len(flat_ref)} output(s); the forward returns {len(flat_like)}. "
                f"g must return outputs like the forward's, so that the forward's upstream gradient fits them."
            )
        for index, (ref, out) in enumerate(zip(flat_ref, flat_like)):
            if not isinstance(ref, tf.Tensor):
                raise RuleError(f"backward_like({name}): output {index} of g is a {type(ref).__name__}, not a tensor.")
            if (
                ref.shape.rank is not None
                and out.shape.rank is not None
                and not ref.shape.is_compatible_with(out.shape)
            ):
                raise GradientShapeError(
                    f"backward_like({name}): output {index} of g has shape {ref.shape}; the forward's output has "
                    f"shape {out.shape}. g must map the inputs to outputs of the forward's shape."
                )
        return flat_ref

    def gradients(
        self, dy: Any, inputs: Sequence[tf.Tensor] | None, specs: Sequence[InputSpec], kwargs: Mapping[str, Any]
    ) -> Any:
        assert inputs is not None
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(inputs)
            flat_ref = self._call_g(inputs, kwargs, dy)
        upstream = [tf.cast(u, r.dtype) for u, r in zip(tf.nest.flatten(dy), flat_ref)]
        grads = tape.gradient(
            flat_ref, list(inputs), output_gradients=upstream, unconnected_gradients=tf.UnconnectedGradients.ZERO
        )
        return tuple(grads)

    def rebuild(
        self,
        forward_fn: Callable[..., Any],
        kwargs: Mapping[str, Any],
        xs: Sequence[tf.Tensor],
        op: str,
        situation: Situation,
    ) -> Any:
        result = forward_fn(*(tf.stop_gradient(x) for x in xs), **kwargs)
        flat_result = tf.nest.flatten(result)
        flat_reference = self._call_g(xs, kwargs, result)
        outputs = []
        for index, (out, ref) in enumerate(zip(flat_result, flat_reference)):
            check_same_shape(out, ref, f"output {index} of backward_like g", op, situation)
            term = exact_zero(ref - tf.stop_gradient(ref))
            outputs.append(tf.stop_gradient(out) + tf.cast(term, out.dtype))
        return tf.nest.pack_sequence_as(result, outputs)

    def parts(self) -> RuleParts:
        return RuleParts("like", self.g, {})

    def reference(self, kwargs: Mapping[str, Any]) -> Reference | None:
        g = self.g
        chosen = select_accepted(kwargs, self._accepted)
        return Reference(lambda *xs: g(*xs, **chosen), f"the autodiff gradient of {callable_name(g)}", False)
