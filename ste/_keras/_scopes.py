"""TFMOT's ``*_scope(*custom_objects)`` calls: a family's classes plus the user's ``{name: class}`` dicts as Keras
custom objects, with the dicts checked before the scope opens."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import keras

from ..errors import ParameterError

__all__ = ["custom_object_scope"]


@contextlib.contextmanager
def custom_object_scope(
    owner: str, base: Mapping[str, Any], custom_objects: tuple[Any, ...], example: str
) -> Iterator[None]:
    """``base`` and every dict of ``custom_objects`` (later names win) as Keras custom objects; a non-dict raises
    :class:`ste.errors.ParameterError` naming ``owner`` and the ``example`` call as the fix."""
    merged = dict(base)
    for objects in custom_objects:
        if not isinstance(objects, Mapping):
            raise ParameterError(
                f"{owner}: expected dicts of {{name: class}}; received {type(objects).__name__} {objects!r}. "
                f"Fix: e.g. {example}."
            )
        merged.update(objects)
    with keras.saving.custom_object_scope(merged):
        yield
