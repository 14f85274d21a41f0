"""Schedule names: ``ste.sparsity.register_schedule(name)(MySchedule)`` and the built-in schedules under theirs.

:data:`SCHEDULES` is a :class:`ste._common._names.NameTable` of :class:`PruningSchedule` subclasses, as the
surrogate registry's. A saved schedule config, Keras's serialization or TFMOT's ``{"class_name":
"ConstantSparsity", "config": {...}}``, finds its class here by the registered name or by the class's own name
(:func:`deserialize_schedule`), so a registered schedule loads without ``custom_objects``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import keras

from .._common._abstract import check_complete
from .._common._names import NameTable
from .._keras._lookup import publish_serializable
from ..errors import ParameterError, RegistrationError
from ._schedule import ConstantSparsity, PolynomialDecay, PruningSchedule

__all__ = ["SCHEDULES", "deserialize_schedule", "register_schedule", "schedules", "unregister_schedule"]

S = TypeVar("S", bound=type[PruningSchedule])

#: A registered schedule is registered with Keras's serialization too, so that a model holding one loads again.
SCHEDULES: NameTable[type[PruningSchedule]] = NameTable(
    "schedule", ParameterError, on_change=publish_serializable("ste.schedule")
)


def register_schedule(name: str, *, replace: bool = False) -> Callable[[S], S]:
    """A class decorator registering a :class:`PruningSchedule` subclass under ``name``.

    Args:
        name: a Python identifier that is not a keyword (``"constant_sparsity"``).
        replace: overwrite an existing name (a built-in included); otherwise
            :class:`ste.errors.RegistrationError`.
    """
    return SCHEDULES.decorator(
        name, replace=replace, check=_check_schedule, owner=f"ste.sparsity.register_schedule({name!r})"
    )


def _check_schedule(name: str, cls: Any) -> None:
    """A complete :class:`PruningSchedule` subclass, or the error naming what is wrong and the fix."""
    if not (isinstance(cls, type) and issubclass(cls, PruningSchedule)):
        raise RegistrationError(
            f"cannot register the schedule {name!r}: expected a ste.sparsity.PruningSchedule subclass; received "
            f"{type(cls).__name__} {cls!r}. Fix: derive it from ste.sparsity.PruningSchedule."
        )
    check_complete(cls, f"cannot register the schedule {name!r}")


def unregister_schedule(name: str) -> type[PruningSchedule]:
    """Remove the schedule ``name`` and return its class.

    Args:
        name: a registered schedule name.
    """
    return SCHEDULES.unregister(name)


def schedules() -> list[str]:
    """The registered schedule names, sorted."""
    return SCHEDULES.names()


def _by_class_name(name: str) -> type[PruningSchedule] | None:
    found = SCHEDULES.get(name)
    if found is not None:
        return found
    for _, cls in SCHEDULES.items():
        if cls.__name__ == name:
            return cls
    return None


def deserialize_schedule(config: dict[str, Any]) -> PruningSchedule:
    """The schedule saved as ``config``.

    Args:
        config: Keras's serialization of a schedule, or TFMOT's ``{"class_name": "ConstantSparsity", "config":
            {...}}`` (no module: the class is found among the registered schedules, by name or class name).
    """
    name = str(config.get("class_name", "")).split(">")[-1]
    cls = _by_class_name(name) if "module" not in config and "registered_name" not in config else None
    if cls is not None:
        return cls.from_config(config)
    schedule: PruningSchedule = keras.saving.deserialize_keras_object(config)
    return schedule


SCHEDULES.register("constant_sparsity", ConstantSparsity)
SCHEDULES.register("polynomial_decay", PolynomialDecay)
