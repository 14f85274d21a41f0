"""The DSL: ``ste.forward(fn).backward(rule)``, ``.backward_like(g)`` and the decorator forms.

``Forward`` holds a forward function waiting for its rule; ``STEFunction`` is the finished, immutable op.
"""

from __future__ import annotations

import inspect
import numbers as numbers_
import struct
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, NoReturn, ParamSpec, TypeVar, Union

import keras
import numpy as np
import tensorflow as tf

from .._patches import apply as apply_patches
from ..errors import CallError, MissingBackwardError, RuleError
from ..registry import Surrogate
from ._compile import compile_op
from ._describe import callable_name
from ._inputs import to_input_tensor
from ._rules import LikeRule, Rule, make_rule
from ._serialization import op_config, op_parts, op_parts_from_config

__all__ = ["Forward", "RuleLike", "STEFunction", "backward", "backward_like", "forward", "rebuild_op", "rule_of"]

P = ParamSpec("P")
R = TypeVar("R")

#: What ``.backward(...)`` accepts: a registry name or spec string, a Surrogate (instance, class or config dict),
#: or a function ``rule(dy, *inputs, **hyperparams)`` returning one gradient per positional input.
RuleLike = Union[str, Surrogate, "type[Surrogate]", Mapping[str, Any], Callable[..., Any]]

_CACHE_LIMIT = 64
F = TypeVar("F", bound=Callable[..., Any])
_do_not_convert: Callable[[F], F] = tf.autograph.experimental.do_not_convert


def _value_key(value: Any) -> Any:
    """A cache key for one hyperparameter: its type and its exact bits, recursively for tuples and frozensets.

    Python's equality would merge keys that compile differently: ``0.0 == -0.0`` (copysign differs), ``1 == True``
    and ``(1,) == (True,)`` (a forward may branch on the type), ``1 == 1.0``. A NaN's key equals itself.
    """
    kind = type(value)
    if kind is tuple:
        return (kind, tuple(_value_key(item) for item in value))
    if kind is frozenset:
        return (kind, frozenset(_value_key(item) for item in value))
    if isinstance(value, float):
        return (kind, struct.pack("<d", value))
    if isinstance(value, complex):
        return (kind, struct.pack("<dd", value.real, value.imag))
    if isinstance(value, np.generic):
        return (kind, value.tobytes())
    hash(value)  # unhashable values (tensors, lists) raise TypeError: compile without caching
    return (kind, value)


def _cache_key(n_inputs: int, kwargs: Mapping[str, Any]) -> Any:
    try:
        return (n_inputs, tuple((k, _value_key(v)) for k, v in sorted(kwargs.items())))
    except TypeError:
        return None


def _copy_metadata(target: object, fn: Callable[..., Any]) -> None:
    for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
        try:
            object.__setattr__(target, attribute, getattr(fn, attribute))
        except AttributeError:
            pass
    # No ``__wrapped__``: tf.function traces an argument that has one as the object it wraps, so an op passed to a
    # tf.function (``f(x, op)``, ``lambda x, op=op: op(x)``) would silently run its bare forward with the forward's
    # own gradient. The signature is copied explicitly instead (``__signature__``).


def _check_forward(fn: Any, where: str) -> None:
    if not callable(fn):
        raise CallError(f"{where} needs a callable forward function; received {type(fn).__name__} {fn!r}.")
    if isinstance(fn, (Forward, STEFunction)):
        raise CallError(
            f"{where} received {fn!r}, which is already an ste op; attach rules with its .backward(...) instead."
        )


class Forward(Generic[P, R]):
    """A forward function waiting for its backward rule: ``ste.forward(fn)``.

    Attach a rule with :meth:`backward` or :meth:`backward_like` (both also work as decorators). Calling a
    ``Forward`` itself raises :class:`ste.errors.MissingBackwardError`.
    """

    def __init__(self, fn: Callable[P, R]) -> None:
        _check_forward(fn, "ste.forward()")
        object.__setattr__(self, "_fn", fn)
        _copy_metadata(self, fn)

    @property
    def forward_fn(self) -> Callable[P, R]:
        """The forward function."""
        fn: Callable[P, R] = self._fn  # type: ignore[attr-defined]
        return fn

    def backward(self, rule: RuleLike, /, *, jvp: Callable[..., Any] | None = None, **params: Any) -> STEFunction[P, R]:
        """Attach a backward rule; returns a new :class:`STEFunction`.

        ``rule`` is a registry name or spec string (``"straight_through"``, ``"sigmoid_surrogate(beta=4)"``), a
        :class:`ste.registry.Surrogate`, or a VJP function ``rule(dy, *inputs, **hyperparams)``. ``params`` are
        bound to the rule (a surrogate's hyperparameters, or extra keywords for a function). Works as a decorator.
        ``jvp`` (a VJP function only) declares the same derivative for forward mode: ``jvp(t, *inputs,
        **hyperparams)`` (``t`` a tuple of one tangent per input when there are several) returns the output tangent;
        without it forward-mode autodiff raises :class:`ste.errors.RuleError`.
        """
        made = STEFunction(self.forward_fn, make_rule(rule, params, jvp))
        if inspect.isfunction(rule):  # perhaps decorated: remember its name for the MissingBackwardError
            object.__setattr__(self, "_attached", callable_name(rule))
        return made

    def backward_like(self, g: Callable[..., Any], /) -> STEFunction[P, R]:
        """Use the gradient of ``g`` at the same inputs as the backward pass; returns a new :class:`STEFunction`."""
        return STEFunction(self.forward_fn, LikeRule(g))

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> NoReturn:
        name = callable_name(self.forward_fn)
        attached: str | None = getattr(self, "_attached", None)
        if attached is not None and attached != name:
            # @op.backward on `def other_name(dy, x)` binds the finished op to `other_name`; `name` stays a Forward.
            raise MissingBackwardError(
                f"ste.forward({name}) has no backward rule: @{name}.backward was applied to the rule function "
                f"'{attached}', so the finished op was bound to the name '{attached}' and '{name}' is still the "
                f"forward without a rule. As with property.setter, a decorated rule replaces the name it is "
                f"defined under. Fix: name the rule like the forward (@{name}.backward followed by "
                f"def {name}(dy, x): ...), or call '{attached}' instead."
            )
        raise MissingBackwardError(
            f"ste.forward({name}) has no backward rule yet, so it cannot be called. Fix: attach one, e.g. "
            f"ste.forward({name}).backward('straight_through'), .backward_like(tf.tanh), or decorate a rule "
            f"def {name}(dy, x): ... with @{name}.backward (under the same name, as with property.setter)."
        )

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("ste.Forward is immutable")

    def __repr__(self) -> str:
        return f"ste.forward({callable_name(self.forward_fn)})"


@keras.saving.register_keras_serializable(package="ste")
class STEFunction(Generic[P, R]):
    """An op that computes ``forward_fn`` in the forward pass and uses ``rule`` in the backward pass.

    Call it as ``op(*tensors, **hyperparams)``: positional arguments are the differentiable inputs (floating
    tensors, arrays, numbers or variables); keyword arguments are non-differentiable hyperparameters passed to the
    forward function and to a function rule (or ``g``) that accepts them. Immutable: :meth:`backward` and
    :meth:`backward_like` return new ops. It carries the forward's name, docstring and signature.

    Keras-serializable (``Dense(activation=op)``, ``keras.layers.Activation(op)``, ``.keras`` files) and picklable
    when its functions have importable names; ``copy.copy`` and ``copy.deepcopy`` return the op itself, as for a
    function. See the "Saving and loading" page.
    """

    def __init__(self, fn: Callable[P, R], rule: Rule) -> None:
        _check_forward(fn, "STEFunction()")
        object.__setattr__(self, "_fn", fn)
        object.__setattr__(self, "_rule", rule)
        object.__setattr__(self, "_cache", {})
        object.__setattr__(self, "_lock", threading.Lock())
        _copy_metadata(self, fn)
        try:
            object.__setattr__(self, "__signature__", inspect.signature(fn))
        except (TypeError, ValueError):
            pass

    # -- introspection --------------------------------------------------------------------------------------

    @property
    def forward_fn(self) -> Callable[P, R]:
        """The forward function."""
        fn: Callable[P, R] = self._fn  # type: ignore[attr-defined]
        return fn

    @property
    def rule(self) -> Any:
        """The backward rule: a :class:`ste.registry.Surrogate`, the rule function, or ``g`` of ``backward_like``."""
        return self._rule.public  # type: ignore[attr-defined]

    def backward(self, rule: RuleLike, /, *, jvp: Callable[..., Any] | None = None, **params: Any) -> STEFunction[P, R]:
        """A new op with the same forward and another rule (see :meth:`Forward.backward`)."""
        return STEFunction(self.forward_fn, make_rule(rule, params, jvp))

    def backward_like(self, g: Callable[..., Any], /) -> STEFunction[P, R]:
        """A new op with the same forward whose gradient is that of ``g`` (see :meth:`Forward.backward_like`)."""
        return STEFunction(self.forward_fn, LikeRule(g))

    def __repr__(self) -> str:
        rule: Rule = self._rule  # type: ignore[attr-defined]
        return f"ste.forward({callable_name(self.forward_fn)}).{rule.describe()}"

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("ste.STEFunction is immutable; .backward(...) returns a new one")

    # -- saving and copying (ste/_core/_serialization.py) ----------------------------------------------------------

    def get_config(self) -> dict[str, Any]:
        """The Keras config: the names of the forward function and of the rule (see :mod:`ste._core._serialization`).

        Raises :class:`ste.errors.SerializationError` when a function has no importable name (a lambda, a closure).
        """
        return op_config(self)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> STEFunction[..., Any]:
        """Rebuild an op from :meth:`get_config`'s output."""
        op: STEFunction[..., Any] = rebuild_op(*op_parts_from_config(config))
        return op

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return rebuild_op, op_parts(self)

    def __copy__(self) -> STEFunction[P, R]:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> STEFunction[P, R]:
        return self

    # -- calling --------------------------------------------------------------------------------------------

    def _label(self) -> str:
        return f"ste op '{callable_name(self.forward_fn)}' [{self!r}]"

    def _compiled(self, n_inputs: int, kwargs: dict[str, Any], numbers: Sequence[int] = ()) -> Callable[..., Any]:
        key = _cache_key(n_inputs, kwargs) if kwargs else n_inputs  # without keywords: the number of inputs
        cache: dict[Any, Callable[..., Any]] = self._cache  # type: ignore[attr-defined]
        found = cache.get(key)
        if found is not None:
            return found
        rule: Rule = self._rule  # type: ignore[attr-defined]
        label = self._label()
        self._check_signature(n_inputs, kwargs, label, numbers)
        compiled = compile_op(self.forward_fn, rule, kwargs, callable_name(self.forward_fn), label)
        if key is not None:
            with self._lock:  # type: ignore[attr-defined]
                if len(cache) >= _CACHE_LIMIT:
                    cache.clear()
                cache[key] = compiled
        return compiled

    def _check_signature(self, n_inputs: int, kwargs: dict[str, Any], label: str, numbers: Sequence[int]) -> None:
        # A Python number given positionally becomes a differentiable input; say so when the call does not fit.
        hint = (
            f" Positional input(s) {list(numbers)} are Python numbers: positional arguments are the differentiable "
            f"tensors, so a hyperparameter must be passed by keyword, e.g. op(x, name=3.0)."
            if numbers
            else ""
        )
        try:
            signature = inspect.signature(self.forward_fn)
        except (TypeError, ValueError):
            signature = None
        if signature is not None:
            try:
                signature.bind(*range(n_inputs), **kwargs)
            except TypeError as error:
                raise CallError(
                    f"{label}: the forward function {callable_name(self.forward_fn)}{signature} cannot be called "
                    f"with {n_inputs} positional input(s) and keyword(s) {sorted(kwargs)} ({error}).{hint}"
                ) from None
        rule: Rule = self._rule  # type: ignore[attr-defined]
        try:
            rule.check_call(n_inputs, kwargs, label)
        except RuleError as error:
            if not hint:
                raise
            raise RuleError(f"{error}{hint}") from None

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        # AutoGraph must not convert the library's own code (plain Python around TensorFlow ops). While a function
        # is traced the call goes through tf.autograph.experimental.do_not_convert; eagerly there is nothing to
        # convert, and that wrapper's context switch would cost more than this test.
        # once per process: the Keras and TensorFlow patches ste needs (ste/_patches.py); an op makes no variables
        apply_patches(fresh_keys=False)
        if tf.executing_eagerly():
            return self._call(args, kwargs)
        return self._traced_call(args, kwargs)

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        tensors: Sequence[Any] = args
        numbers: list[int] = []
        for value in args:
            if not (isinstance(value, tf.Tensor) and value.dtype.is_floating):  # else: already what the op takes
                tensors, numbers = self._input_tensors(args)
                break
        if not tensors:
            raise CallError(
                f"{self._label()}: called with no positional input. Positional arguments are the differentiable "
                f"tensors; keyword arguments are hyperparameters."
            )
        compiled = self._compiled(len(tensors), kwargs, numbers)
        result: R = compiled(*tensors)
        return result

    _traced_call = _do_not_convert(_call)

    def _input_tensors(self, args: Sequence[Any]) -> tuple[list[tf.Tensor], list[int]]:
        """The positional inputs as floating tensors, and the positions of Python numbers after the first."""
        label = self._label()
        tensors = []
        numbers = []
        for position, value in enumerate(args):
            if isinstance(value, tf.Tensor) and value.dtype.is_floating:
                tensors.append(value)
                continue
            if isinstance(value, numbers_.Number) and position > 0:
                numbers.append(position)
            tensors.append(to_input_tensor(value, position, label))
        return tensors, numbers


def forward(fn: Callable[P, R], /) -> Forward[P, R]:
    """Start an op from its forward function: ``ste.forward(tf.sign).backward("straight_through")``.

    Also a decorator; attach the rule with ``@op.backward`` on a function ``rule(dy, *inputs)``.
    """
    return Forward(fn)


def backward(
    rule: RuleLike, /, *, jvp: Callable[..., Any] | None = None, **params: Any
) -> Callable[[Callable[P, R]], STEFunction[P, R]]:
    """Decorator: ``@ste.backward("straight_through")`` turns a plain forward function into an op with that rule."""
    made = make_rule(rule, params, jvp)

    def decorate(fn: Callable[P, R]) -> STEFunction[P, R]:
        return STEFunction(fn, made)

    return decorate


def backward_like(g: Callable[..., Any], /) -> Callable[[Callable[P, R]], STEFunction[P, R]]:
    """Decorator: ``@ste.backward_like(tf.tanh)`` gives a forward function the gradient of ``g``."""
    made = LikeRule(g)

    def decorate(fn: Callable[P, R]) -> STEFunction[P, R]:
        return STEFunction(fn, made)

    return decorate


def rebuild_op(
    fn: Callable[..., Any], kind: str, rule: Any, params: Mapping[str, Any], jvp: Callable[..., Any] | None = None
) -> STEFunction[..., Any]:
    """The op ``forward(fn)`` with the rule of ``kind`` (``"surrogate"``, ``"like"`` or ``"function"``): what a
    pickle and a Keras config hold (``ste._core._serialization.op_parts``, ``op_parts_from_config``) made an op
    again."""
    if kind == "like":
        return forward(fn).backward_like(rule)
    return forward(fn).backward(rule, jvp=jvp, **params)


def rule_of(op: STEFunction[..., Any]) -> Rule:
    """The :class:`ste._core._rules.Rule` behind an op (for ``ste.testing``; users see :attr:`STEFunction.rule`)."""
    rule: Rule = op._rule  # type: ignore[attr-defined]
    return rule
