"""`Surrogate`: a named local derivative d(x), optionally with the smooth primitive P it is the derivative of.

A backward rule built from a surrogate returns ``dy * d(x)`` (the vector-Jacobian product of an elementwise op
whose derivative is d). Subclasses declare their hyperparameters as annotated class attributes with defaults, the
way a dataclass does::

    class SigmoidSurrogate(Surrogate):
        beta: float = 1.0

        def validate(self) -> None:
            self.require_positive("beta")

        def derivative(self, x):
            z = self.param("beta", x.dtype) * x
            return self.param("beta", x.dtype) * tf.sigmoid(z) * tf.sigmoid(-z)
"""

from __future__ import annotations

import abc
import copy
import importlib
import inspect
import math
import numbers
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar, dataclass_transform

import numpy as np
import tensorflow as tf

from .._common._abstract import Extension
from .._common._arguments import short_repr
from ..errors import ParameterError, RegistrationError, SpecError
from ._numerics import smallest_normal
from ._table import TABLE

__all__ = ["HasPrimitive", "MaskOnly", "Surrogate"]

_NO_DEFAULT = inspect.Parameter.empty


def _is_classvar(annotation: Any) -> bool:
    text = annotation if isinstance(annotation, str) else repr(annotation)
    return "ClassVar" in text


def _importable(cls: type) -> bool:
    """Whether pickle can find ``cls`` by its module and qualified name."""
    try:
        found: Any = importlib.import_module(cls.__module__)
        for part in cls.__qualname__.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return False
    return found is cls


def _restore(reference: type[Surrogate] | str, params: dict[str, Any]) -> Surrogate:
    """Unpickle: rebuild from a class or a registry name and the parameters."""
    if isinstance(reference, str):
        reference = TABLE.lookup(reference)
    return reference(**params)


def _cast(number: float, dtype: tf.DType) -> float:
    """``number`` rounded to ``dtype`` (inf when out of range), as a Python float."""
    if dtype == tf.float64:
        return number
    with tf.init_scope():
        return float(tf.cast(tf.constant(number, tf.float64), dtype).numpy())


def _probe_points(dtype: tf.DType, scales: list[float]) -> np.ndarray:
    """Inputs where a derivative is largest or most fragile: 0, ±1, ±tiny, ±max, and around each parameter scale."""
    largest = float(dtype.max)
    values = {0.0, 1.0, smallest_normal(dtype), largest, 0.5}
    for scale in scales:
        for candidate in (scale, scale / 2, 1 / scale, 0.5 / scale, 2.4 / scale):
            if math.isfinite(candidate):
                values.add(min(abs(candidate), largest))
    ordered = sorted(values)
    return np.asarray([-v for v in reversed(ordered) if v] + ordered, dtype=np.float64)


def _as_tensor(points: np.ndarray, dtype: tf.DType) -> tf.Tensor:
    return tf.cast(tf.constant(points, tf.float64), dtype)


def _scalar_value(value: Any) -> float | None:
    """The Python value of a number or an eager scalar tensor; None for a symbolic tensor."""
    if isinstance(value, (tf.Tensor, tf.Variable)):
        try:
            if isinstance(value, tf.Variable):
                with tf.init_scope():  # a variable's current value, also while a tf.function is being traced
                    return float(np.asarray(value.numpy()))
            return float(np.asarray(value.numpy()))
        except (AttributeError, TypeError, ValueError, NotImplementedError):  # a symbolic tensor has no value
            return None
    return float(value)


@dataclass_transform(frozen_default=True)
class Surrogate(Extension):
    """A local derivative ``d(x)`` used as the backward pass of an elementwise op: the VJP is ``dy * d(x)``.

    Hyperparameters are declared on subclasses as annotated class attributes with defaults and are passed to the
    constructor by keyword (or positionally, in declaration order). They are Python numbers (or ``None`` where an
    entry documents it) or scalar tensors, and are read back as attributes (``surrogate.beta``) or through
    :attr:`params`; type checkers see them as the constructor's typed parameters
    (``typing.dataclass_transform``). Instances are immutable and compare equal by class and parameters
    (a scalar tensor by its value, a ``tf.Variable`` by identity, since its value may change). They copy, deep-copy
    and pickle (a class defined at module level by reference, one made by :func:`ste.registry.register` from a
    function by its registry name).

    A subclass implements :meth:`derivative`. Two optional capabilities are declared by also deriving from a small
    abstract base: :class:`HasPrimitive` (a function :meth:`~HasPrimitive.primitive` whose derivative is d, the
    reference ``ste.testing.check_gradient`` compares with) and :class:`MaskOnly` (the derivative is a function of
    one boolean predicate of ``x``, so an op keeps one bit per element for the backward pass).

    Class attributes a subclass may set:

    * ``name``: the registry name; set by :func:`ste.registry.register` (a subclass does not inherit it: an
      unregistered subclass has no name and :meth:`get_config` refuses it, so that it is never saved under its
      parent's name).
    * ``reference``: where the formula comes from.
    * ``formula``: the derivative in plain text, for documentation and ``repr``-free displays.
    """

    name: ClassVar[str] = ""
    reference: ClassVar[str] = ""
    formula: ClassVar[str] = ""
    _fields: ClassVar[tuple[str, ...]] = ()
    _defaults: ClassVar[Mapping[str, Any]] = MappingProxyType({})
    _nullable: ClassVar[frozenset[str]] = frozenset()

    _params: Mapping[str, Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = ""  # a registry name belongs to one class; register() sets it
        fields: dict[str, Any] = {}
        nullable: set[str] = set()
        for klass in reversed(cls.__mro__):
            if klass is object or not issubclass(klass, Surrogate) or klass is Surrogate:
                continue
            for field, annotation in inspect.get_annotations(klass).items():
                if field.startswith("_") or _is_classvar(annotation):
                    continue
                fields[field] = klass.__dict__.get(field, _NO_DEFAULT)
                text = annotation if isinstance(annotation, str) else repr(annotation)
                if fields[field] is None or "None" in text or "Optional" in text:
                    nullable.add(field)
        cls._fields = tuple(fields)
        cls._nullable = frozenset(nullable)
        cls._defaults = MappingProxyType(fields)

    def __init__(self, *args: Any, **params: Any) -> None:
        label = self.name or type(self).__name__
        if len(args) > len(self._fields):
            raise ParameterError(
                f"surrogate '{label}' takes at most {len(self._fields)} positional parameter(s) "
                f"{list(self._fields)}; received {len(args)}: {args!r}."
            )
        given = dict(zip(self._fields, args))
        for key, value in params.items():
            if key in given:
                raise ParameterError(f"surrogate '{label}': parameter '{key}' given twice (by position and keyword).")
            given[key] = value
        unknown = sorted(set(given) - set(self._fields))
        if unknown:
            raise ParameterError(
                f"surrogate '{label}' has no parameter(s) {unknown}; its parameters are {self._signature_text()}."
            )
        values: dict[str, Any] = {}
        for field in self._fields:
            if field in given:
                values[field] = self._coerce(field, given[field])
            elif self._defaults[field] is _NO_DEFAULT:
                raise ParameterError(
                    f"surrogate '{label}' needs parameter '{field}'; its parameters are {self._signature_text()}."
                )
            else:
                values[field] = self._defaults[field]
        object.__setattr__(self, "_params", MappingProxyType(values))
        for field, value in values.items():
            object.__setattr__(self, field, value)
        self.validate()

    # -- parameters -----------------------------------------------------------------------------------------

    def _coerce(self, field: str, value: Any) -> Any:
        label = self.name or type(self).__name__
        default = self._defaults[field]
        if value is None:
            if field in self._nullable:
                return None
            raise ParameterError(
                f"surrogate '{label}': parameter '{field}' may not be None; expected a number (default {default!r})."
            )
        if isinstance(value, (tf.Tensor, tf.Variable)):
            if value.shape.rank != 0:
                raise ParameterError(
                    f"surrogate '{label}': parameter '{field}' must be a scalar; received a tensor of shape "
                    f"{value.shape}."
                )
            if not (value.dtype.is_floating or value.dtype.is_integer):
                raise ParameterError(
                    f"surrogate '{label}': parameter '{field}' must be a real number; received dtype "
                    f"{value.dtype.name}."
                )
            return value
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ParameterError(
                f"surrogate '{label}': parameter '{field}' must be a real number or a scalar tensor; received "
                f"{type(value).__name__} {value!r}."
            )
        try:
            number = float(value)
        except OverflowError:
            raise ParameterError(
                f"surrogate '{label}': parameter '{field}' = {short_repr(value)} is too large for a float. Fix: pass a "
                f"finite number, e.g. {label}({field}={default!r})."
            ) from None
        if isinstance(default, float) and not isinstance(value, float):
            return number
        if isinstance(value, np.generic):
            return value.item()
        return value

    @property
    def params(self) -> Mapping[str, Any]:
        """The hyperparameters, in declaration order (read-only)."""
        return self._params

    def param(self, field: str, dtype: tf.DType) -> tf.Tensor:
        """Hyperparameter ``field`` as a tensor of ``dtype`` (for use inside :meth:`derivative`)."""
        value = self._params[field]
        if isinstance(value, (tf.Tensor, tf.Variable)):
            return tf.cast(value, dtype)
        return tf.constant(value, dtype=dtype)

    def require_positive(self, *fields: str, allow_none: bool = False) -> None:
        """Raise :class:`ste.errors.ParameterError` unless each named parameter is a finite number > 0."""
        label = self.name or type(self).__name__
        for field in fields:
            value = self._params[field]
            if value is None and allow_none:
                continue
            number = _scalar_value(value)
            if number is None:  # symbolic tensor: cannot be checked before it runs
                continue
            if not math.isfinite(number) or number <= 0:
                raise ParameterError(
                    f"surrogate '{label}': parameter '{field}' must be a finite number > 0; received {value!r}. "
                    f"Fix: pass a positive value, e.g. {label}({field}={self._defaults[field]!r})."
                )

    def validate(self) -> None:
        """Check the hyperparameters; subclasses override this and raise :class:`ste.errors.ParameterError`."""

    # -- the math -------------------------------------------------------------------------------------------

    @property
    def constant_derivative(self) -> float | None:
        """The derivative's value when it does not depend on ``x`` (then the forward's input need not be kept)."""
        return None

    @abc.abstractmethod
    def derivative(self, x: tf.Tensor) -> tf.Tensor:
        """The local derivative d(x), elementwise, in ``x``'s dtype."""

    @property
    def has_primitive(self) -> bool:
        """Whether the surrogate declares a primitive (derives from :class:`HasPrimitive`)."""
        return isinstance(self, HasPrimitive)

    def vjp(self, dy: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
        """The vector-Jacobian product ``dy * d(x)`` in ``x``'s dtype (:class:`ste.errors.ParameterError` if the
        hyperparameters do not fit that dtype, see :meth:`check_dtype`)."""
        if not isinstance(x, tf.Tensor):
            x = tf.convert_to_tensor(x)
        self.check_dtype(x.dtype)  # also inside a hand-written rule: never a silent NaN
        if not (isinstance(dy, tf.Tensor) and dy.dtype is x.dtype):  # a same-dtype tf.cast costs µs eagerly
            dy = tf.cast(dy, x.dtype)
        return tf.math.multiply(dy, self.derivative(x))  # the `*` operator adds µs of dispatch per eager call

    @property
    def mask_only(self) -> bool:
        """Whether the derivative is a function of one predicate of ``x`` (the surrogate derives from
        :class:`MaskOnly`)."""
        return isinstance(self, MaskOnly)

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        """Evaluate the derivative: ``surrogate(x) == surrogate.derivative(x)``."""
        return self.derivative(tf.convert_to_tensor(x))

    # -- identity, display and serialization -----------------------------------------------------------------

    def _signature_text(self) -> str:
        parts = [f if self._defaults[f] is _NO_DEFAULT else f"{f}={self._defaults[f]!r}" for f in self._fields]
        return "(" + ", ".join(parts) + ")"

    def _key(self) -> tuple[Any, ...]:
        items: list[tuple[str, Any]] = []
        for field, value in self._params.items():
            if isinstance(value, tf.Variable):  # mutable: identity, so that the hash never changes
                items.append((field, ("variable", id(value))))
            elif isinstance(value, tf.Tensor):
                number = _scalar_value(value)
                items.append((field, ("tensor", id(value)) if number is None else number))
            else:
                items.append((field, value))
        return (type(self), tuple(items))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Surrogate):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable; build a new one with get('{self.name}', ...)")

    def __copy__(self) -> Surrogate:
        return self  # immutable

    def __deepcopy__(self, memo: dict[int, Any]) -> Surrogate:
        return type(self)(**copy.deepcopy(dict(self._params), memo))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle, copy and deep-copy by class reference (or registry name) and parameters."""
        cls = type(self)
        reference: Any = cls if _importable(cls) else self.name
        if not reference:
            raise RegistrationError(
                f"cannot pickle surrogate {self!r}: its class {cls.__qualname__} is neither defined at module level "
                f"nor registered. Fix: define it at module level or register it with @ste.registry.register('name')."
            )
        return (_restore, (reference, dict(self._params)))

    # -- computation dtype ------------------------------------------------------------------------------------

    def compute_dtype(self, dtype: tf.DType) -> tf.DType:
        """The dtype :meth:`derivative` computes in for inputs of ``dtype`` (float32 for half-precision inputs of
        entries decorated with :func:`ste.registry._numerics.elementwise`)."""
        dtype = tf.as_dtype(dtype)
        if dtype in (tf.float16, tf.bfloat16) and getattr(type(self).derivative, "widens_half", False):
            return tf.float32
        return dtype

    def check_dtype(self, dtype: tf.DType, op: str = "") -> None:
        """Raise :class:`ste.errors.ParameterError` if the hyperparameters do not fit inputs of ``dtype``.

        A parameter that becomes inf, 0 or subnormal in the computation dtype (``beta=1e39`` in float32,
        ``sigma=1e-300``), or a derivative that is not finite for some input of ``dtype`` (``gaussian(sigma=1e-6)``
        on float16, whose peak 4e5 exceeds float16's largest number), is refused, naming the entry, the parameter and
        the dtype. Called when an op using this surrogate is traced; checked once per dtype and instance.
        """
        checked: set[tf.DType] | None = self.__dict__.get("_checked_dtypes")
        if checked is not None and dtype in checked:  # every call after the first (an op checks on every call)
            return
        dtype = tf.as_dtype(dtype)
        if not dtype.is_floating:
            return
        checked = self.__dict__.setdefault("_checked_dtypes", set())
        if dtype in checked:
            return
        values = {field: _scalar_value(value) for field, value in self._params.items() if value is not None}
        if any(v is None for v in values.values()):
            return  # a symbolic tensor parameter: nothing to check before it runs
        where = f"{op}: " if op else ""
        compute = self.compute_dtype(dtype)
        tiny, largest = smallest_normal(compute), float(compute.max)
        for field, number in values.items():
            assert number is not None
            if not math.isfinite(number):
                continue  # validate() decides about inf and NaN
            cast = _cast(number, compute)
            if not math.isfinite(cast) or (number != 0 and abs(cast) < tiny):
                raise ParameterError(
                    f"{where}surrogate {self!r}: parameter '{field}' = {number!r} is not representable in "
                    f"{compute.name}, the dtype it is computed in for {dtype.name} inputs (it becomes {cast!r}; "
                    f"normal {compute.name} numbers have magnitudes from {tiny:.3g} to {largest:.3g}), so the gradient "
                    f"would be NaN or inf. Fix: choose {field} in that range, or compute in float64."
                )
        points = _probe_points(dtype, [abs(v) for v in values.values() if v])
        try:
            with tf.init_scope():  # eagerly, outside any graph being traced
                derivative = np.asarray(self.derivative(_as_tensor(points, dtype)))
        except (tf.errors.OpError, TypeError, ValueError, NotImplementedError):
            return  # a derivative that cannot run on this probe fails (or not) in the op itself, as before
        bad = ~np.isfinite(derivative.astype(np.float64))
        if bad.any():
            index = int(np.argmax(bad))
            shown = ", ".join(f"'{f}' = {v!r}" for f, v in values.items())
            raise ParameterError(
                f"{where}surrogate {self!r}: with parameter(s) {shown} the derivative is {derivative.flat[index]} at "
                f"x = {points[index]:.6g} in {dtype.name} (its values exceed what {dtype.name} can hold), so the "
                f"gradient would be NaN or inf. Fix: choose parameter values whose derivative fits {dtype.name}, or "
                f"compute in a wider dtype."
            )
        if not any(isinstance(v, tf.Variable) for v in self._params.values()):
            checked.add(dtype)

    def __repr__(self) -> str:
        parts = []
        for field, value in self._params.items():
            if isinstance(value, (tf.Tensor, tf.Variable)):
                number = _scalar_value(value)
                value = number if number is not None else "<symbolic tensor>"
            parts.append(f"{field}={value!r}")
        return f"{self.name or type(self).__name__}({', '.join(parts)})"

    def get_config(self) -> dict[str, Any]:
        """A JSON-serializable description: ``{"name": ..., "params": {...}}``; scalar tensors become numbers.

        Raises :class:`ste.errors.RegistrationError` when the class is not the one registered under its name (an
        unregistered subclass, or a name since replaced): such a config could not rebuild this surrogate.
        """
        registered = TABLE.get(self.name) if self.name else None
        if registered is not type(self):
            why = (
                ""
                if not self.name
                else f" (the name '{self.name}' "
                + ("is no longer registered)" if registered is None else "now means another class)")
            )
            raise RegistrationError(
                f"cannot save surrogate {self!r}: its class {type(self).__qualname__} is not registered"
                + why
                + ", so a saved model could not rebuild it. Fix: register it under its own name with "
                f"@ste.registry.register('my_name') on the class (or ste.registry.register('my_name', "
                f"{type(self).__name__}))."
            )
        params: dict[str, Any] = {}
        for field, value in self._params.items():
            if isinstance(value, (tf.Tensor, tf.Variable)):
                number = _scalar_value(value)
                if number is None:
                    raise ParameterError(
                        f"surrogate '{self.name}': parameter '{field}' is a symbolic tensor and cannot be serialized; "
                        f"call get_config() outside tf.function."
                    )
                value = number
            params[field] = value
        return {"name": self.name, "params": params}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Surrogate:
        """Rebuild a surrogate from :meth:`get_config`'s output (on ``Surrogate`` itself, looked up by name)."""
        if not isinstance(config, Mapping) or "params" not in config or not isinstance(config["params"], Mapping):
            raise SpecError(
                f"a surrogate config must be a mapping {{'name': str, 'params': dict}}; received {config!r}."
            )
        if cls is Surrogate or cls.name != config.get("name", cls.name):
            target = TABLE.lookup(str(config.get("name")))
        else:
            target = cls
        return target(**dict(config["params"]))


class HasPrimitive(Extension):
    """Capability of a :class:`Surrogate`: a smooth (or piecewise smooth) function P with P' = d.

    Derive from it beside :class:`Surrogate` (``class Box(Surrogate, HasPrimitive)``) and implement
    :meth:`primitive`; ``surrogate.has_primitive`` is then true, and ``ste.testing.check_gradient`` compares an op
    using the surrogate with the autodiff gradient of P.
    """

    __slots__ = ()

    @abc.abstractmethod
    def primitive(self, x: tf.Tensor) -> tf.Tensor:
        """P(x), elementwise, in ``x``'s dtype, with P' = d."""


class MaskOnly(Extension):
    """Capability of a :class:`Surrogate` whose derivative is a function of one boolean predicate of ``x``.

    An op using it keeps a bit-packed :meth:`mask` (1 bit per element) for the backward pass instead of ``x``, and
    computes the gradient with :meth:`vjp_from_mask`. ``derivative(x)`` must equal
    ``derivative_from_mask(mask(x), x.dtype)`` exactly.

    Class attributes:

    * ``indicator``: True declares that :meth:`derivative_from_mask` is the indicator of the mask (1 where true,
      0 elsewhere, the default below), so that an op multiplies ``dy`` by the kept bits directly. Leave it False
      when :meth:`derivative_from_mask` is overridden.
    """

    __slots__ = ()

    indicator: ClassVar[bool] = False

    @abc.abstractmethod
    def mask(self, x: tf.Tensor) -> tf.Tensor:
        """The boolean predicate of ``x`` the derivative depends on (``straight_through``: ``abs(x) <= clip``)."""

    def derivative_from_mask(self, mask: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        """The derivative in ``dtype`` from the predicate :meth:`mask` computed (default: 1 where true, else 0)."""
        return tf.cast(mask, dtype)

    def vjp_from_mask(self, dy: tf.Tensor, mask: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        """``dy * derivative_from_mask(mask, dtype)``: the same value as ``vjp`` for a mask-only entry."""
        return tf.cast(dy, dtype) * self.derivative_from_mask(mask, dtype)
