"""The name → :class:`Surrogate` registry: :func:`register`, :func:`get`, :func:`names`.

All reads and writes hold one re-entrant lock, so several threads may register and look up at once.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, Union, overload

import tensorflow as tf

from .._common._abstract import check_complete
from .._common._arguments import check_bool
from .._common._names import build
from ..errors import ParameterError, RegistrationError, SpecError
from ._spec import parse_spec
from ._surrogate import HasPrimitive, Surrogate
from ._table import TABLE as _TABLE

__all__ = ["SurrogateLike", "get", "lookup", "names", "register", "registered_class", "unregister"]


T = TypeVar("T")

#: Anything :func:`get` accepts.
SurrogateLike = Union[str, Surrogate, "type[Surrogate]", Mapping[str, Any]]


def names() -> list[str]:
    """The registered surrogate names, sorted."""
    return _TABLE.names()


def lookup(name: str) -> type[Surrogate]:
    """The class registered under ``name`` (raises :class:`ste.errors.UnknownSurrogateError` with suggestions).

    Names are NFKC-normalised as Python normalises identifiers (``"µ"``, micro sign, is ``"μ"``, Greek mu).
    """
    return _TABLE.lookup(name)


def registered_class(name: str) -> type[Surrogate] | None:
    """The class registered under ``name``, or None."""
    return _TABLE.get(name)


def unregister(name: str) -> None:
    """Remove ``name`` from the registry (built-ins included; re-register them with ``replace=True``)."""
    _TABLE.unregister(name)


def _class_from_function(
    name: str, derivative: Callable[..., Any], primitive: Callable[..., Any] | None
) -> type[Surrogate]:
    """Wrap ``derivative(x, **params)`` (and ``primitive(x, **params)``) into a Surrogate subclass."""
    try:
        signature = inspect.signature(derivative)
    except (TypeError, ValueError) as error:
        raise RegistrationError(f"cannot register {name!r}: cannot read the signature of {derivative!r}.") from error
    parameters = list(signature.parameters.values())
    if not parameters or parameters[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise RegistrationError(
            f"cannot register {name!r}: {getattr(derivative, '__qualname__', derivative)} must take the input x as its "
            f"first positional parameter, then hyperparameters: def {name}(x, beta=1.0): ..."
        )
    annotations: dict[str, Any] = {}
    namespace: dict[str, Any] = {}
    for parameter in parameters[1:]:
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise RegistrationError(
                f"cannot register {name!r}: *args/**kwargs are not hyperparameters; name each one with a default."
            )
        annotations[parameter.name] = "Any"
        if parameter.default is not inspect.Parameter.empty:
            namespace[parameter.name] = parameter.default
    namespace["__annotations__"] = annotations
    namespace["__doc__"] = derivative.__doc__
    namespace["__module__"] = getattr(derivative, "__module__", __name__)

    def _derivative(self: Surrogate, x: tf.Tensor) -> tf.Tensor:
        return tf.cast(derivative(x, **self.params), x.dtype)

    namespace["derivative"] = _derivative
    if primitive is not None:

        def _primitive(self: Surrogate, x: tf.Tensor) -> tf.Tensor:
            return tf.cast(primitive(x, **self.params), x.dtype)

        namespace["primitive"] = _primitive
    class_name = "".join(part.capitalize() for part in name.split("_")) or "UserSurrogate"
    bases: tuple[type, ...] = (Surrogate,) if primitive is None else (Surrogate, HasPrimitive)
    return type(class_name, bases, namespace)


@overload
def register(name: str, *, primitive: Callable[..., Any] | None = ..., replace: bool = ...) -> Callable[[T], T]: ...
@overload
def register(name: str, obj: T, *, primitive: Callable[..., Any] | None = ..., replace: bool = ...) -> T: ...
def register(name: str, obj: Any = None, *, primitive: Callable[..., Any] | None = None, replace: bool = False) -> Any:
    """Register a surrogate under ``name``; usable as a decorator or called directly.

    ``obj`` is either a :class:`Surrogate` subclass or a function ``derivative(x, **params)`` returning d(x)
    (hyperparameters are its keyword parameters with defaults; ``primitive(x, **params)`` may accompany it).
    An existing name raises :class:`ste.errors.RegistrationError` unless ``replace=True``. Returns ``obj`` unchanged.
    """
    normal = _TABLE.check_name(name)
    replace = check_bool(f"register surrogate {normal!r}", "replace", replace)

    def decorate(target: T) -> T:
        if isinstance(target, type) and issubclass(target, Surrogate):
            if primitive is not None:
                raise RegistrationError(
                    f"cannot register {normal!r}: give a Surrogate subclass its primitive as a method. Fix: derive "
                    f"{target.__qualname__} from ste.registry.HasPrimitive too and define primitive(self, x)."
                )
            check_complete(target, f"cannot register {normal!r}")
            cls: type[Surrogate] = target
        elif callable(target) and not isinstance(target, type):
            cls = _class_from_function(normal, target, primitive)
        else:
            raise RegistrationError(
                f"cannot register {normal!r}: expected a Surrogate subclass or a function derivative(x, **params); "
                f"received {type(target).__name__}."
            )
        with _TABLE.lock:  # check, name and insert atomically: two threads cannot both claim one class or one name
            if normal in _TABLE and not replace:
                _TABLE.register(normal, cls)  # raises RegistrationError naming the existing entry
            own_name = cls.__dict__.get("name", "")
            if own_name and own_name != normal:  # the class already carries another name: register a copy
                cls = type(cls.__name__, (cls,), {"__doc__": cls.__doc__, "__module__": cls.__module__})
            cls.name = normal
            _TABLE.register(normal, cls, replace=True)
        return target

    if obj is not None:
        return decorate(obj)
    return decorate


def get(spec: SurrogateLike, /, **params: Any) -> Surrogate:
    """Resolve a name, spec string, config dict, class or instance into a :class:`Surrogate` instance.

    ``get("sigmoid_surrogate", beta=4.0)`` and ``get("sigmoid_surrogate(beta=4.0)")`` are the same entry. A parameter
    given both in the spec string and as a keyword raises :class:`ste.errors.SpecError`.
    """
    if isinstance(spec, Surrogate):
        if not params:
            return spec
        return type(spec)(**{**spec.params, **params})
    if isinstance(spec, type) and issubclass(spec, Surrogate):
        return spec(**params)
    if isinstance(spec, Mapping):
        if params:
            raise SpecError("get(config, **params): put the parameters into the config instead.")
        return Surrogate.from_config(spec)
    if isinstance(spec, str):
        name, args, kwargs = parse_spec(spec)
        cls = _TABLE.lookup(name, spec if spec.strip() != name else "")
        clash = sorted(set(kwargs) & set(params))
        if clash:
            raise SpecError(f"parameter(s) {clash} given both in the spec {spec!r} and as keyword arguments.")
        try:
            return build(f"surrogate '{cls.name or name}'", cls, args, {**kwargs, **params})
        except ParameterError as error:
            raise ParameterError(f"{error} (while reading the spec {_shown(spec)})") from None
    raise SpecError(
        f"expected a surrogate name, spec string, config dict, Surrogate class or instance; received "
        f"{type(spec).__name__} {spec!r}."
    )


def _shown(spec: str) -> str:
    return repr(spec) if len(spec) <= 80 else repr(spec[:77] + "...")
