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

import inspect
import math
import numbers
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np
import tensorflow as tf

from .._errors import ParameterError, SpecError

__all__ = ["Surrogate"]

_NO_DEFAULT = inspect.Parameter.empty


def _is_classvar(annotation: Any) -> bool:
    text = annotation if isinstance(annotation, str) else repr(annotation)
    return "ClassVar" in text


def _scalar_value(value: Any) -> float | None:
    """The Python value of a number or an eager scalar tensor; None for a symbolic tensor."""
    if isinstance(value, (tf.Tensor, tf.Variable)):
        try:
            return float(np.asarray(value.numpy()))
        except (AttributeError, TypeError, ValueError):
            return None
    return float(value)


class Surrogate:
    """A local derivative ``d(x)`` used as the backward pass of an elementwise op: the VJP is ``dy * d(x)``.

    Hyperparameters are declared on subclasses as annotated class attributes with defaults and are passed to the
    constructor by keyword (or positionally, in declaration order). They are Python numbers (or ``None`` where an
    entry documents it) or scalar tensors, and are read back as attributes (``surrogate.beta``) or through
    :attr:`params`. Instances are immutable and compare equal by name and parameters (a scalar tensor by its value,
    a ``tf.Variable`` by identity, since its value may change).

    Class attributes a subclass may set:

    * ``name``: the registry name; set by :func:`ste.registry.register`.
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
        if isinstance(default, float) and not isinstance(value, float):
            return float(value)
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
        """Raise :class:`ste.ParameterError` unless each named parameter is a finite number > 0."""
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
        """Check the hyperparameters; subclasses override this and raise :class:`ste.ParameterError`."""

    # -- the math -------------------------------------------------------------------------------------------

    @property
    def constant_derivative(self) -> float | None:
        """The derivative's value when it does not depend on ``x`` (then the forward's input need not be kept)."""
        return None

    def derivative(self, x: tf.Tensor) -> tf.Tensor:
        """The local derivative d(x), elementwise, in ``x``'s dtype."""
        raise NotImplementedError(f"surrogate '{self.name or type(self).__name__}' does not define derivative()")

    def primitive(self, x: tf.Tensor) -> tf.Tensor:
        """A smooth (or piecewise smooth) function P with P' = d; raises NotImplementedError where there is none."""
        raise NotImplementedError(f"surrogate '{self.name or type(self).__name__}' has no primitive")

    @property
    def has_primitive(self) -> bool:
        """Whether :meth:`primitive` is defined."""
        return type(self).primitive is not Surrogate.primitive

    def vjp(self, dy: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
        """The vector-Jacobian product ``dy * d(x)`` in ``x``'s dtype."""
        return tf.cast(dy, x.dtype) * self.derivative(x)

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
        return (self.name or type(self).__qualname__, tuple(items))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Surrogate):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable; build a new one with get('{self.name}', ...)")

    def __repr__(self) -> str:
        parts = []
        for field, value in self._params.items():
            if isinstance(value, (tf.Tensor, tf.Variable)):
                number = _scalar_value(value)
                value = number if number is not None else "<symbolic tensor>"
            parts.append(f"{field}={value!r}")
        return f"{self.name or type(self).__name__}({', '.join(parts)})"

    def get_config(self) -> dict[str, Any]:
        """A JSON-serializable description: ``{"name": ..., "params": {...}}``; scalar tensors become numbers."""
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
            from ._registry import lookup

            target = lookup(str(config.get("name")))
        else:
            target = cls
        return target(**dict(config["params"]))
