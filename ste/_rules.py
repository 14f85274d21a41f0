"""The three kinds of backward rule, behind one interface used by the compiler (``_compile.py``).

* :class:`SurrogateRule`: a registry entry; the VJP is ``dy * d(x)``.
* :class:`CallableRule`: a user VJP ``rule(dy, *inputs, **hyperparams)``.
* :class:`LikeRule`: ``backward_like(g)``; the VJP of ``g`` at the same inputs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import tensorflow as tf

from ._bitmask import keep_bits, pack_bits, unpack_bits
from ._describe import callable_name, format_params
from ._errors import GradientShapeError, RuleError
from ._gradients import InputSpec
from .registry import Surrogate, get

__all__ = ["CallableRule", "LikeRule", "Rule", "SurrogateRule", "accepted_keywords", "make_rule"]


class Rule(Protocol):
    """What the compiler needs of a backward rule."""

    @property
    def needs_inputs(self) -> bool: ...

    @property
    def public(self) -> Any: ...

    def describe(self) -> str: ...

    def saved_for_backward(self, xs: Sequence[tf.Tensor]) -> Any:
        """What the op keeps for :meth:`gradients` (called only when :attr:`needs_inputs`): the inputs, or less."""
        ...

    def check_call(self, n_inputs: int, multiple_outputs: bool, kwargs: Mapping[str, Any], op: str) -> None: ...

    def gradients(
        self, dy: Any, inputs: Sequence[tf.Tensor] | None, specs: Sequence[InputSpec], kwargs: Mapping[str, Any]
    ) -> Any: ...


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


def _select(kwargs: Mapping[str, Any], accepted: frozenset[str] | None) -> dict[str, Any]:
    if accepted is None:
        return dict(kwargs)
    return {key: value for key, value in kwargs.items() if key in accepted}


class PackedMask(NamedTuple):
    """What a mask-only surrogate keeps for the backward pass: its predicate, 1 bit per element, and the shape."""

    bits: tf.Tensor  # uint8, ceil(size / 8) bytes (ste._bitmask.pack_bits)
    shape: tf.Tensor  # int32 shape of the input


def _keep_inputs(xs: Sequence[tf.Tensor]) -> Sequence[tf.Tensor]:
    return xs


class SurrogateRule:
    """A registry surrogate used as the rule of a one-input op."""

    def __init__(self, surrogate: Surrogate) -> None:
        self.surrogate = surrogate

    @property
    def needs_inputs(self) -> bool:
        return self.surrogate.constant_derivative is None

    @property
    def public(self) -> Surrogate:
        return self.surrogate

    def describe(self) -> str:
        return repr(self.surrogate)

    def saved_for_backward(self, xs: Sequence[tf.Tensor]) -> Any:
        x = xs[0]
        if self.surrogate.mask_only and keep_bits(x):
            shape = tf.constant(x.shape.as_list(), tf.int32) if x.shape.is_fully_defined() else tf.shape(x)
            return PackedMask(pack_bits(self.surrogate.mask(x)), shape)
        return xs

    def check_call(self, n_inputs: int, multiple_outputs: bool, kwargs: Mapping[str, Any], op: str) -> None:
        if n_inputs != 1 or multiple_outputs:
            raise RuleError(
                f"{op}: the surrogate {self.surrogate!r} is the derivative of an elementwise one-input, one-output op; "
                f"this op has {n_inputs} positional input(s){' and several outputs' if multiple_outputs else ''}. "
                f"Fix: write a rule rule(dy, *inputs) that returns one gradient per input, or apply the "
                f"surrogate inside it: surrogate.vjp(dy, x)."
            )

    def gradients(
        self, dy: Any, inputs: Sequence[tf.Tensor] | None, specs: Sequence[InputSpec], kwargs: Mapping[str, Any]
    ) -> Any:
        self.surrogate.check_dtype(specs[0].dtype)  # hyperparameters that overflow this dtype: ParameterError
        constant = self.surrogate.constant_derivative
        if isinstance(inputs, PackedMask):
            # Unpack only once the upstream gradient exists: without the dependency, TensorFlow's executor runs the
            # unpacking (which depends on forward tensors only) during the forward pass and keeps its result alive.
            with tf.control_dependencies(tf.nest.flatten(dy)):
                bits = tf.identity(inputs.bits)
            return self.surrogate.vjp_from_mask(dy, unpack_bits(bits, inputs.shape), specs[0].dtype)
        if constant is None:
            assert inputs is not None
            return self.surrogate.vjp(dy, inputs[0])
        spec = specs[0]
        if constant == 0:
            shape = spec.shape if spec.dynamic_shape is None else spec.dynamic_shape
            return tf.zeros(shape, dtype=spec.dtype)
        grad = tf.cast(dy, spec.dtype)
        return grad if constant == 1 else grad * tf.constant(constant, spec.dtype)


class CallableRule:
    """A user-written VJP ``rule(dy, *inputs, **hyperparams)``."""

    def __init__(self, fn: Callable[..., Any], params: Mapping[str, Any]) -> None:
        if not callable(fn):
            raise RuleError(f"a backward rule must be callable; received {type(fn).__name__} {fn!r}.")
        self.fn = fn
        self.params = dict(params)
        self._accepted = accepted_keywords(fn)

    needs_inputs = True
    saved_for_backward = staticmethod(_keep_inputs)

    @property
    def public(self) -> Callable[..., Any]:
        return self.fn

    def describe(self) -> str:
        extra = format_params(self.params)
        return f"{callable_name(self.fn)}, {extra}" if extra else callable_name(self.fn)

    def _keywords(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        return {**self.params, **_select(kwargs, self._accepted)}

    def check_call(self, n_inputs: int, multiple_outputs: bool, kwargs: Mapping[str, Any], op: str) -> None:
        clash = sorted(set(self.params) & set(kwargs))
        if clash:
            raise RuleError(
                f"{op}: hyperparameter(s) {clash} are bound by .backward(...) and given again at the call; "
                f"give each once."
            )
        try:
            signature = inspect.signature(self.fn)
        except (TypeError, ValueError):
            return
        try:
            signature.bind(*range(n_inputs + 1), **self._keywords(kwargs))
        except TypeError as error:
            shown = ", ".join(
                ["dy", *(f"x{i}" for i in range(n_inputs)), *(f"{k}=..." for k in self._keywords(kwargs))]
            )
            raise RuleError(
                f"{op}: the rule {callable_name(self.fn)}{signature} cannot be called as rule({shown})"
                f" ({error}). A rule takes the upstream gradient first, then every positional input of the forward, "
                f"then the hyperparameters."
            ) from None

    def gradients(
        self, dy: Any, inputs: Sequence[tf.Tensor] | None, specs: Sequence[InputSpec], kwargs: Mapping[str, Any]
    ) -> Any:
        assert inputs is not None
        return self.fn(dy, *inputs, **self._keywords(kwargs))


class LikeRule:
    """``backward_like(g)``: the gradient is the VJP of ``g`` at the forward's inputs."""

    def __init__(self, g: Callable[..., Any]) -> None:
        if not callable(g):
            raise RuleError(f"backward_like(g) needs a callable g; received {type(g).__name__} {g!r}.")
        self.g = g
        self._accepted = accepted_keywords(g)

    needs_inputs = True
    saved_for_backward = staticmethod(_keep_inputs)

    @property
    def public(self) -> Callable[..., Any]:
        return self.g

    def describe(self) -> str:
        return f"like {callable_name(self.g)}"

    def check_call(self, n_inputs: int, multiple_outputs: bool, kwargs: Mapping[str, Any], op: str) -> None:
        return None

    def gradients(
        self, dy: Any, inputs: Sequence[tf.Tensor] | None, specs: Sequence[InputSpec], kwargs: Mapping[str, Any]
    ) -> Any:
        assert inputs is not None
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(inputs)
            reference = self.g(*inputs, **_select(kwargs, self._accepted))
        flat_ref = tf.nest.flatten(reference)
        flat_dy = tf.nest.flatten(dy)
        name = callable_name(self.g)
        if len(flat_ref) != len(flat_dy):
            raise RuleError(
                f"backward_like({name}): g returned {len(flat_ref)} output(s); the forward returns {len(flat_dy)}. "
                f"g must return outputs like the forward's, so that the forward's upstream gradient fits them."
            )
        for index, (ref, upstream) in enumerate(zip(flat_ref, flat_dy)):
            if not isinstance(ref, tf.Tensor):
                raise RuleError(f"backward_like({name}): output {index} of g is a {type(ref).__name__}, not a tensor.")
            if (
                ref.shape.rank is not None
                and upstream.shape.rank is not None
                and not ref.shape.is_compatible_with(upstream.shape)
            ):
                raise GradientShapeError(
                    f"backward_like({name}): output {index} of g has shape {ref.shape}; the forward's output has "
                    f"shape {upstream.shape}. g must map the inputs to outputs of the forward's shape."
                )
        upstream = [tf.cast(u, r.dtype) for u, r in zip(flat_dy, flat_ref)]
        grads = tape.gradient(
            flat_ref, list(inputs), output_gradients=upstream, unconnected_gradients=tf.UnconnectedGradients.ZERO
        )
        return tuple(grads)


def make_rule(rule: Any, params: Mapping[str, Any]) -> Rule:
    """Normalise what ``.backward(rule, **params)`` received."""
    if isinstance(rule, (str, Surrogate, Mapping)) or (isinstance(rule, type) and issubclass(rule, Surrogate)):
        return SurrogateRule(get(rule, **params))
    if callable(rule):
        return CallableRule(rule, params)
    raise RuleError(
        f".backward() takes a registry name or spec string ('straight_through', 'sigmoid_surrogate(beta=4)'), a "
        f"ste.registry.Surrogate, or a function rule(dy, *inputs); received {type(rule).__name__} {rule!r}."
    )
