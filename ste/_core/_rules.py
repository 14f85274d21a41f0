"""The three kinds of backward rule, behind the one :class:`Rule` interface the rest of the package uses.

* :class:`SurrogateRule`: a registry entry; the VJP is ``dy * d(x)``.
* :class:`CallableRule`: a user VJP ``rule(dy, *inputs, **hyperparams)``.
* :class:`LikeRule`: ``backward_like(g)``; the VJP of ``g`` at the same inputs.

Nothing outside this module branches on these classes: the compiler (``_compile.py``), the ``tf.vectorized_map`` and
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

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import tensorflow as tf

from ..errors import GradientShapeError, RuleError
from ..registry import Surrogate, get
from ._bitmask import (
    CallerHeld,
    held_by_caller,
    higher_order_witness,
    keep_bits,
    opaque,
    pack_bits,
    read_after,
    refuse_higher_order,
    times_mask,
    unpack_bits,
)
from ._describe import callable_name, format_params
from ._gradients import InputSpec, check_gradients, input_spec
from ._maskrule import declared_mask

__all__ = [
    "CallableRule",
    "LikeRule",
    "Reference",
    "Rule",
    "RuleParts",
    "Situation",
    "SurrogateRule",
    "accepted_keywords",
    "after_kept",
    "make_rule",
]


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


class Rule(Protocol):
    """Everything the package needs of a backward rule."""

    @property
    def needs_inputs(self) -> bool:
        """Whether :meth:`gradients` reads the forward's inputs (else only their shapes are kept)."""
        ...

    @property
    def public(self) -> Any:
        """What ``STEFunction.rule`` shows: the Surrogate, the rule function, or ``g``."""
        ...

    @property
    def elementwise(self) -> bool:
        """Whether the op must be elementwise (one input, one output of the input's shape)."""
        ...

    def describe(self) -> str:
        """How the rule was attached: ``backward(sigmoid_surrogate(beta=1.0))``, ``backward_like(tanh)``."""
        ...

    def saved_for_backward(self, xs: Sequence[tf.Tensor], kwargs: Mapping[str, Any]) -> Any:
        """What the op keeps for :meth:`gradients` (called only when :attr:`needs_inputs`): the inputs, or less
        (a mask-only surrogate or a :func:`ste.mask_rule` rule: a :class:`PackedMask`)."""
        ...

    def check_call(self, n_inputs: int, kwargs: Mapping[str, Any], op: str) -> None:
        """Before tracing: can the rule serve ``n_inputs`` positional inputs and these keyword hyperparameters?"""
        ...

    def check_outputs(self, xs: Sequence[tf.Tensor], result: Any, op: str) -> None:
        """While tracing, once the forward has run: can the rule serve these outputs?"""
        ...

    def gradients(
        self, dy: Any, inputs: Sequence[tf.Tensor] | None, specs: Sequence[InputSpec], kwargs: Mapping[str, Any]
    ) -> Any:
        """One gradient per positional input (``inputs`` is None unless :attr:`needs_inputs`)."""
        ...

    def rebuild(
        self,
        forward_fn: Callable[..., Any],
        kwargs: Mapping[str, Any],
        xs: Sequence[tf.Tensor],
        op: str,
        situation: Situation,
    ) -> Any:
        """The op made of ordinary differentiable ops (no custom gradient), or :class:`ste.errors.RuleError`."""
        ...

    def reference(self, kwargs: Mapping[str, Any]) -> Reference | None:
        """The differentiable function the rule's gradient should equal; None for a hand-written VJP."""
        ...

    def parts(self) -> RuleParts:
        """What saving the op records: the kind, the public object and the hyperparameters bound to it."""
        ...


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


# -- rebuilding from ordinary ops -----------------------------------------------------------------------------


def _zero_tangent(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """``(x − stop_gradient(x), stop_gradient(x))`` with non-finite elements replaced by 0 (value exactly 0)."""
    held = tf.stop_gradient(x)
    finite = tf.math.is_finite(held)
    zeros = tf.zeros_like(held)
    return tf.where(finite, x - held, zeros), tf.where(finite, held, zeros)


def _exact_zero(term: tf.Tensor) -> tf.Tensor:
    """``term`` where its value is finite, else 0: the added term never changes the forward value."""
    return tf.where(tf.math.is_finite(tf.stop_gradient(term)), term, tf.zeros_like(term))


def _check_same_shape(out: tf.Tensor, ref: tf.Tensor, what: str, op: str, situation: Situation) -> None:
    if out.shape.rank is not None and ref.shape.rank is not None and not out.shape.is_compatible_with(ref.shape):
        raise GradientShapeError(
            f"{op}: {situation.where} the output of the forward function has shape {out.shape} but {what} has shape "
            f"{ref.shape}; ste builds the derivative there elementwise, so they must be equal. Fix: make the forward "
            f"elementwise."
        )


# -- registry surrogates ------------------------------------------------------------------------------------


class PackedMask(NamedTuple):
    """What a mask-only rule keeps for the backward pass: its predicate, 1 bit per element, and the shape."""

    bits: tf.Tensor  # uint8, ceil(size / 8) bytes (ste._core._bitmask.pack_bits)
    shape: tf.Tensor  # int32 shape of the mask
    kept: tuple[tf.Tensor, ...] = ()  # other tensors a ste.mask_rule predicate returned, kept as they are
    witness: tf.Tensor | None = (
        None  # with kept tensors: ties them to the input (ste._core._bitmask.refuse_higher_order)
    )


def _packed(mask: tf.Tensor, kept: tuple[tf.Tensor, ...] = (), x: tf.Tensor | None = None) -> PackedMask:
    shape = tf.constant(mask.shape.as_list(), tf.int32) if mask.shape.is_fully_defined() else tf.shape(mask)
    witness = higher_order_witness(x) if kept and x is not None else None
    return PackedMask(pack_bits(mask), shape, kept, witness)


def _after(dy: Any, packed: PackedMask) -> tf.Tensor:
    """The packed bits, read only once the upstream gradient exists: without the dependency, TensorFlow's executor
    runs the unpacking (which depends on forward tensors only) during the forward pass and keeps its result alive."""
    with tf.control_dependencies(tf.nest.flatten(dy)):
        return tf.identity(packed.bits)


def _unpacked(dy: Any, packed: PackedMask) -> tf.Tensor:
    """The boolean mask, unpacked once the upstream gradient exists."""
    return unpack_bits(_after(dy, packed), packed.shape)


def _casts_the_mask(surrogate: Surrogate) -> bool:
    """Whether ``surrogate``'s VJP from a mask is ``dy · tf.cast(mask, dtype)`` (the base class's), so that the
    mask can be unpacked straight into ``dtype``: the same 0s and 1s, multiplied the same way."""
    cls = type(surrogate)
    return cls.vjp_from_mask is Surrogate.vjp_from_mask and cls.derivative_from_mask is Surrogate.derivative_from_mask


def after_kept(xs: Sequence[tf.Tensor], saved: Any) -> Sequence[tf.Tensor]:
    """The op's inputs as its forward function should read them: in a graph, once ``saved`` holds a packed mask,
    through identities that wait for the packing (no copy).

    TensorFlow's executor runs independent ops in any order, so without the wait a chain of ops can run its forward
    functions ahead of their masks' packing and hold every input still waiting to be packed (a 50-op chain peaked
    anywhere between 6 and 27 input sizes). With it each op computes its mask, then its forward, and an input is
    released as soon as both have read it.
    """
    if not isinstance(saved, PackedMask) or tf.executing_eagerly():
        return xs
    with tf.control_dependencies([saved.bits]):
        return [tf.identity(x) for x in xs]


def _keep_inputs(xs: Sequence[tf.Tensor], kwargs: Mapping[str, Any]) -> Sequence[tf.Tensor]:
    return xs


class SurrogateRule:
    """A registry surrogate used as the rule of an elementwise one-input, one-output op."""

    def __init__(self, surrogate: Surrogate) -> None:
        self.surrogate = surrogate
        # Properties of an immutable surrogate: read once, not on every call.
        self._mask_only = surrogate.mask_only
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
        if self._mask_only and keep_bits(x):
            return _packed(self.surrogate.mask(tf.stop_gradient(x)))  # see CallableRule.saved_for_backward
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
            dtype = specs[0].dtype
            if _casts_the_mask(self.surrogate):
                return times_mask(tf.cast(dy, dtype), _after(dy, inputs), inputs.shape)
            return opaque(self.surrogate.vjp_from_mask(dy, _unpacked(dy, inputs), dtype))
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
            tangent, held = _zero_tangent(x)
            if self.surrogate.constant_derivative == 0:
                # zero: keep the derivative a tensor of zeros (never None) without multiplying an infinite dy by 0.
                term = tf.math.multiply_no_nan(tangent, tf.zeros_like(held))
            else:
                (term,) = check_gradients(self.gradients(tangent, [held], specs, kwargs), specs, op)
                assert term is not None
                term = _exact_zero(term)

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
        if not self.surrogate.has_primitive:
            return None
        return Reference(self.surrogate.primitive, f"the autodiff gradient of {self.surrogate!r}'s primitive", True)


# -- hand-written VJPs --------------------------------------------------------------------------------------

# Functions of these packages compute values, not VJPs: ``.backward(tf.tanh)`` would compute tanh(dy).
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


class CallableRule:
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
        out = self._mask(x, **_select({**self.params, **kwargs}, self._mask_accepted))
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
            return _packed(*self._predicate(tf.stop_gradient(xs[0]), kwargs), x=xs[0])
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
        return {**self.params, **_select(kwargs, self._accepted)}

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
            return opaque(self.fn(dy, _unpacked(dy, inputs), *kept, **self._keywords(kwargs)))
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
        keywords = {**self.params, **_select(kwargs, self._jvp_accepted)}
        name = callable_name(jvp)

        # As for a surrogate: the declared JVP of zero-valued tangents at the held inputs is the term whose forward
        # derivative is jvp(t); the reverse-mode gradient is the VJP rule itself (custom gradient).
        @tf.custom_gradient  # type: ignore[untyped-decorator]
        def rebuilt(*live: tf.Tensor) -> tuple[Any, Callable[..., Any]]:
            tangents = [_zero_tangent(x)[0] for x in live]
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
                _check_same_shape(out, tan, f"output tangent {index} of the declared jvp {name}", op, situation)
                outputs.append(tf.stop_gradient(out) + tf.cast(_exact_zero(tan), out.dtype))

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


# -- backward_like(g) ---------------------------------------------------------------------------------------


class LikeRule:
    """``backward_like(g)``: the gradient is the VJP of ``g`` at the forward's inputs."""

    def __init__(self, g: Callable[..., Any]) -> None:
        if not callable(g):
            raise RuleError(f"backward_like(g) needs a callable g; received {type(g).__name__} {g!r}.")
        self.g = g
        self._accepted = accepted_keywords(g)

    needs_inputs = True
    elementwise = False
    saved_for_backward = staticmethod(_keep_inputs)

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
        reference = self.g(*xs, **_select(kwargs, self._accepted))
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
            _check_same_shape(out, ref, f"output {index} of backward_like g", op, situation)
            term = _exact_zero(ref - tf.stop_gradient(ref))
            outputs.append(tf.stop_gradient(out) + tf.cast(term, out.dtype))
        return tf.nest.pack_sequence_as(result, outputs)

    def parts(self) -> RuleParts:
        return RuleParts("like", self.g, {})

    def reference(self, kwargs: Mapping[str, Any]) -> Reference | None:
        g = self.g
        chosen = _select(kwargs, self._accepted)
        return Reference(lambda *xs: g(*xs, **chosen), f"the autodiff gradient of {callable_name(g)}", False)


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
