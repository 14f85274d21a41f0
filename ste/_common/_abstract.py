"""The one way ste declares an extension point: an abstract base class whose abstract methods a subclass implements.

:class:`ExtensionMeta` is :class:`abc.ABCMeta` with one difference: instantiating a subclass that leaves an abstract
method unimplemented raises :class:`ste.errors.MissingMethodError` (also a ``TypeError``, like Python's own), naming
the class, each missing method with its signature and the base that declares it, and the fix. The check runs at
instantiation, as ``abc``'s does, so an intermediate base may stay abstract.

Optional capabilities are separate small abstract bases (``ste.registry.HasPrimitive``, ``ste.registry.MaskOnly``):
a class declares one by deriving from it, and the code asking for the capability uses ``isinstance``.
"""

from __future__ import annotations

import abc
import inspect
from typing import Any

from ..errors import MissingMethodError

__all__ = ["Extension", "ExtensionMeta", "missing_methods"]


def _declared_by(cls: type, name: str) -> tuple[type, Any]:
    """The class of ``cls``'s MRO that declares the abstract ``name``, and that declaration."""
    for klass in cls.__mro__:
        member = vars(klass).get(name)
        if member is not None and getattr(member, "__isabstractmethod__", False):
            return klass, member
    return cls, None


def _signature(name: str, member: Any) -> str:
    if isinstance(member, property):
        return f"@property {name}"
    try:
        return f"{name}{inspect.signature(member)}"
    except (TypeError, ValueError):
        return f"{name}(...)"


def _summary(member: Any) -> str:
    function = member.fget if isinstance(member, property) else member
    doc = inspect.getdoc(function) or ""
    return doc.split("\n\n")[0].replace("\n", " ").strip()


def missing_methods(cls: type) -> str:
    """The missing abstract methods of ``cls``, one per line with the base declaring each ("" when complete)."""
    lines = []
    for name in sorted(getattr(cls, "__abstractmethods__", ())):
        base, member = _declared_by(cls, name)
        summary = _summary(member)
        lines.append(
            f"  def {_signature(name, member)} (from {base.__module__}.{base.__qualname__})"
            + (f": {summary}" if summary else "")
        )
    return "\n".join(lines)


class ExtensionMeta(abc.ABCMeta):
    """``abc.ABCMeta`` whose refusal of an incomplete subclass is a :class:`ste.errors.MissingMethodError`."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if getattr(cls, "__abstractmethods__", None):
            names = sorted(cls.__abstractmethods__)
            raise MissingMethodError(
                f"cannot instantiate {cls.__qualname__}: it does not implement the abstract method(s) "
                f"{', '.join(names)} of its base class:\n{missing_methods(cls)}\n"
                f"Fix: define {' and '.join(names)} in {cls.__qualname__} (or instantiate a subclass that does)."
            )
        return super().__call__(*args, **kwargs)


class Extension(metaclass=ExtensionMeta):
    """Base of a plain (non-Keras) extension point; a Keras layer base uses ``metaclass=ExtensionMeta`` itself."""

    __slots__ = ()
