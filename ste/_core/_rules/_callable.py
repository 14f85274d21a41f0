"""Hand-written VJPs as rules: ``rule(dy, *inputs, **hyperparams)``, with an optional declared JVP."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from ...errors import RuleError
from .._bitmask import (
    CallerHeld,
    held_by_caller,
    keep_bits,
    opaque,
    read_after,
    refuse_higher_order,
)
from .._describe import callable_name, format_params
from .._gradients import InputSpec, check_gradients, input_spec
from .._maskrule import declared_mask
from ._base import (
    Reference,
    Rule,
    RuleParts,
    Situation,
    accepted_keywords,
    check_same_shape,
    exact_zero,
    select_accepted,
    zero_tangent,
)
from ._saved import PackedMask, pack_mask, unpack_mask

# ``builtins`` and ``math`` too: ``.backward(max)`` would compare tensors at gradient time (a raw ValueError).
_VALUE_PACKAGES = frozenset(
    {"tensorflow", "keras", "tf_keras", "numpy", "jax", "scipy", "torch", "builtins", "math", "cmath"}
)

_PACKAGE_LABELS = {"builtins": "Python built-in", "math": "Python math", "cmath": "Python cmath"}


def _defining_package(fn: Any) -> str:
    """The top-level package that defines ``fn`` (``tensorflow`` for ``tf.tanh``, ``numpy`` for ``np.tanh``)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    module = getattr(fn, "__module__", None)
    if not isinstance(module, str):
        module = type(fn).__module__
    return module.split(".")[0]


def _refuse_value_function(fn: Callable[..., Any], params: Mapping[str, Any]) -> None:
    """Refuse, at ``.backward(fn)``, a callable that cannot be a VJP ``rule(dy, *inputs)``."""
    name = callable_name(fn)
    hint = (
        "To use the derivative of a function g as the backward pass, write .backward_like(g), e.g. "
        "ste.forward(tf.sign).backward_like(tf.tanh); for a local derivative use a registry name, e.g. "
        ".backward('tanh_surrogate')."
    )
    package = _defining_package(fn)
    if package in _VALUE_PACKAGES:
        label = _PACKAGE_LABELS.get(package, package)
        raise RuleError(
            f".backward({name}): {name} is a {label} function computing values, but a callable rule is a "
            f"vector-Jacobian product rule(dy, *inputs) returning one gradient per input; {name}(dy, x) would give "
            f"a silently wrong gradient. {hint}"
        )
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        signature.bind_partial(0, 0, **params)
    except TypeError as error:
        raise RuleError(
            f".backward({name}): a callable rule is a vector-Jacobian product rule(dy, *inputs, **hyperparams) "
            f"taking the upstream gradient and at least one input; {name}{signature} cannot be called as "
            f"{name}(dy, x{''.join(f', {k}=...' for k in params)}) ({error}). {hint}"
        ) from None


class CallableRule(Rule):
    """A user-written VJP ``rule(dy, *inputs, **hyperparams)``."""

    def __init__(
        self, fn: Callable[..., Any], params: Mapping[str, Any], jvp: Callable[..., Any] | None = None
    ) -> None:
        if not callable(fn):
            raise RuleError(f"a backward rule must be callable; received {type(fn).__name__} {fn!r}.")
        _refuse_value_function(fn, params)
        if jvp is not None and not callable(jvp):
            raise RuleError(
                f".backward({callable_name(fn)}, jvp=...): jvp must be a function jvp(tangents, *inputs) returning "
                f"the output tangent (the Jacobian-vector product); received {type(jvp).__name__} {jvp!r}."
            )
        self.fn = fn
        self.params = dict(params)
        self.jvp = jvp
        self._accepted = accepted_keywords(fn)
        self._mask = declared_mask(fn)  # ste.mask_rule(predicate): the rule reads its input only through it
        self._mask_accepted = None if self._mask is None else accepted_keywords(self._mask)
        self._jvp_accepted = None if jvp is None else accepted_keywords(jvp)

    needs_inputs = True
    elementwise = False

    def _predicate(self, x: tf.Tensor, kwargs: Mapping[str, Any]) -> tuple[tf.Tensor, tuple[tf.Tensor, ...]]:
        """The declared predicate's mask and kept tensors at ``x`` (a RuleError if the mask is not boolean)."""
        assert self._mask is not None
        out = self._mask(x, **select_accepted({**self.params, **kwargs}, self._mask_accepted))
        mask, *kept = out if isinstance(out, (tuple, list)) else (out,)
        if not isinstance(mask, tf.Tensor) or mask.dtype != tf.bool:
            raise RuleError(
                f"ste.mask_rule({callable_name(self._mask)}) of the rule {callable_name(self.fn)}: the predicate "
                f"must return a boolean tensor (or a tuple whose first element is one); it returned "
                f"{getattr(mask, 'dtype', type(mask).__name__)!r}. Fix: return a comparison such as abs(x) <= 1."
            )
        return mask, tuple(kept)

    def saved_for_backward(self, xs: Sequence[tf.Tensor], kwargs: Mapping[str, Any]) -> Any:
        if self._mask is not None and keep_bits(xs[0]):
            # The mask and the kept tensors are constants of the backward pass: computed from a stopped input, their
            # ops are not recorded on an enclosing eager tape, which would keep their float intermediates (abs(x),
            # α's mean) alive until it is released (MagnitudeAwareSign's eager 50-op chain: 204 -> 155 input sizes).
            return pack_mask(*self._predicate(tf.stop_gradient(xs[0]), kwargs), x=xs[0])
        if self._mask is not None and held_by_caller(xs[0]):
            self._predicate(tf.stop_gradient(xs[0]), kwargs)  # refused while tracing if wrong (see below)
            return CallerHeld(xs)
        if self._mask is not None and not tf.executing_eagerly():
            self._predicate(tf.stop_gradient(xs[0]), kwargs)  # a wrong predicate is refused while tracing (unused
            # ops: pruned from the graph)
        return xs

    @property
    def public(self) -> Callable[..., Any]:
        return self.fn

    def describe(self) -> str:
        extra = format_params(self.params)
        declared = f", jvp={callable_name(self.jvp)}" if self.jvp is not None else ""
        return f"backward({callable_name(self.fn)}{declared}{', ' + extra if extra else ''})"

    def _keywords(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        return {**self.params, **select_accepted(kwargs, self._accepted)}

    def check_call(self, n_inputs: int, kwargs: Mapping[str, Any], op: str) -> None:
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
        if self._mask is not None and n_inputs != 1:
            raise RuleError(
                f"{op}: the rule {callable_name(self.fn)} is declared with ste.mask_rule, which serves an op of one "
                f"positional input; this op has {n_inputs}. Fix: drop the declaration or give the op one input."
            )
        try:
            if self._mask is None:
                signature.bind(*range(n_inputs + 1), **self._keywords(kwargs))
            else:  # rule(dy, mask, *kept, **hyperparams): the number of kept tensors is known once traced
                signature.bind_partial(0, 0, **self._keywords(kwargs))
        except TypeError as error:
            shown = ", ".join(
                ["dy", *(f"x{i}" for i in range(n_inputs)), *(f"{k}=..." for k in self._keywords(kwargs))]
            )
            raise RuleError(
                f"{op}: the rule {callable_name(self.fn)}{signature} cannot be called as rule({shown})"
                f" ({error}). A rule takes the upstream gradient first, then every positional input of the forward, "
                f"then the hyperparameters."
            ) from None

    def check_outputs(self, xs: Sequence[tf.Tensor], result: Any, op: str) -> None:
        return None  # the rule receives dy in the forward's output structure and returns one gradient per input

    def gradients(
        self, dy: Any, inputs: Sequence[tf.Tensor] | None, specs: Sequence[InputSpec], kwargs: Mapping[str, Any]
    ) -> Any:
        assert inputs is not None
        if self._mask is None:
            return self.fn(dy, *inputs, **self._keywords(kwargs))
        if isinstance(inputs, PackedMask):
            # kept tensors come from the stopped input: a gradient through them would miss x, so it raises
            what = f"reads the tensors its predicate {callable_name(self._mask)} keeps, computed from the stopped input"
            kept = tuple(refuse_higher_order(k, inputs.witness, callable_name(self.fn), what) for k in inputs.kept)
            return opaque(self.fn(dy, unpack_mask(dy, inputs), *kept, **self._keywords(kwargs)))
        # bit masks off, an eager tensor too small to pack, or an input the caller holds: the kept input's predicate
        if isinstance(inputs, CallerHeld):
            inputs = read_after(dy, inputs)
        mask, kept = self._predicate(inputs[0], kwargs)
        return self.fn(dy, mask, *kept, **self._keywords(kwargs))

    def rebuild(
        self,
        forward_fn: Callable[..., Any],
        kwargs: Mapping[str, Any],
        xs: Sequence[tf.Tensor],
        op: str,
        situation: Situation,
    ) -> Any:
        jvp = self.jvp
        if jvp is None:
            raise RuleError(
                f"{op}: called {situation.where}. {situation.why}, and the hand-written rule "
                f"{callable_name(self.fn)} is a vector-Jacobian product that cannot be rebuilt from ordinary ops, "
                f"so the result would be silently wrong. Fix: {situation.fix}"
            )
        result = forward_fn(*(tf.stop_gradient(x) for x in xs), **kwargs)
        flat_result = tf.nest.flatten(result)
        specs = [input_spec(x) for x in xs]
        keywords = {**self.params, **select_accepted(kwargs, self._jvp_accepted)}
        name = callable_name(jvp)

        # As for a surrogate: the declared JVP of zero-valued tangents at the held inputs is the term whose forward
        # derivative is jvp(t); the reverse-mode gradient is the VJP rule itself (custom gradient).
        @tf.custom_gradient  # type: ignore[untyped-decorator]
        def rebuilt(*live: tf.Tensor) -> tuple[Any, Callable[..., Any]]:
            tangents = [zero_tangent(x)[0] for x in live]
            held = [tf.stop_gradient(x) for x in live]
            term = jvp(tangents[0] if len(live) == 1 else tuple(tangents), *held, **keywords)
            flat_term = tf.nest.flatten(term)
            if len(flat_term) != len(flat_result):
                raise RuleError(
                    f"{op}: the declared jvp {name} returned {len(flat_term)} tangent(s); the forward returns "
                    f"{len(flat_result)} output(s). A jvp returns one tangent per output, in the forward's structure."
                )
            outputs = []
            for index, (out, tan) in enumerate(zip(flat_result, flat_term)):
                check_same_shape(out, tan, f"output tangent {index} of the declared jvp {name}", op, situation)
                outputs.append(tf.stop_gradient(out) + tf.cast(exact_zero(tan), out.dtype))

            def grad(*upstream: tf.Tensor, variables: Sequence[tf.Variable] | None = None) -> Any:
                dy = tf.nest.pack_sequence_as(result, list(upstream))
                grads = check_gradients(self.gradients(dy, live, specs, kwargs), specs, op)
                if variables is None:
                    return grads
                return grads, [None] * len(variables)  # hyperparameter variables get no gradient, as in the op

            return tf.nest.pack_sequence_as(result, outputs), grad

        return rebuilt(*xs)

    def parts(self) -> RuleParts:
        return RuleParts("function", self.fn, dict(self.params), self.jvp)

    def reference(self, kwargs: Mapping[str, Any]) -> Reference | None:
        return None
