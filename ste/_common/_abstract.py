"""The one way ste declares an extension point: an abstract base class whose abstract methods a subclass implements.

:class:`Extension` is :class:`abc.ABC` with one difference: instantiating a subclass that leaves an abstract
method unimplemented raises :class:`ste.errors.MissingMethodError` (also a ``TypeError``, like Python's own), naming
the class, each missing method with its signature and the base that declares it, and the fix. The check runs at
instantiation, as ``abc``'s does, so an intermediate base may stay abstract.

Optional capabilities are separate small abstract bases (``ste.registry.HasPrimitive``, ``ste.registry.MaskOnly``):
a class declares one by deriving from it, and the code asking for the capability uses ``isinstance``.
"""

from __future__ import annotations

import abc
import inspect
from typing import TYPE_CHECKING, Any

from ..errors import MissingMethodError

__all__ = ["Extension", "check_complete", "missing_methods"]


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


def check_complete(cls: type, action: str) -> None:
    """:class:`ste.errors.MissingMethodError` when ``cls`` leaves an abstract method out, naming ``action`` (``"cannot
    register the neuron 'x'"``), each missing method with its base, and the fix."""
    names = sorted(getattr(cls, "__abstractmethods__", ()))
    if names:
        raise MissingMethodError(
            f"{action}: {cls.__qualname__} does not implement {', '.join(names)}:\n{missing_methods(cls)}\n"
            f"Fix: define {' and '.join(names)} in {cls.__qualname__}."
        )


def _refusal(cls: type) -> MissingMethodError:
    names = sorted(cls.__abstractmethods__)  # type: ignore[attr-defined]
    rule = getattr(cls, "_extension_rule", "")  # an extension point's own rule (a peer library's), one sentence
    return MissingMethodError(
        f"cannot instantiate {cls.__qualname__}: it does not implement the abstract method(s) "
        f"{', '.join(names)} of its base class:\n{missing_methods(cls)}\n"
        + (f"{rule}\n" if rule else "")
        + f"Fix: define {' and '.join(names)} in {cls.__qualname__} (or instantiate a subclass that does)."
    )


class Extension(abc.ABC):  # noqa: B024  # declares no method itself: each extension point declares its own
    """Base of every extension point: :class:`abc.ABC` whose refusal of an incomplete subclass is a
    :class:`ste.errors.MissingMethodError`.

    A Keras layer base lists it after the Keras class (``class Quantizer(keras.layers.Layer, Extension)``): Keras's
    own ``__new__`` then calls this one before it creates the object, and ``inspect.signature`` of every subclass
    shows its ``__init__``.
    """

    __slots__ = ()

    if not TYPE_CHECKING:  # type checkers read each subclass's __init__ (and abc's abstract check) instead

        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            if getattr(cls, "__abstractmethods__", None):
                raise _refusal(cls)
            following = super().__new__
            if following is not object.__new__:  # a class listed after Extension in the MRO creates the object
                return following(cls, *args, **kwargs)
            if (args or kwargs) and cls.__init__ is object.__init__:  # what object.__new__ would refuse
                raise TypeError(f"{cls.__qualname__}() takes no arguments")
            return following(cls)
