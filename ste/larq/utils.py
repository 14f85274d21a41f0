"""``lq.utils``: ``register_keras_custom_object`` and ``set_precision`` for user-written quantizers."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import keras

from .._keras_lookup import publish_function

__all__ = ["register_keras_custom_object", "set_precision"]

T = TypeVar("T")


def register_keras_custom_object(obj: T) -> T:
    """Make ``obj`` (a class or function) known to Keras by its ``__name__``, as larq does, so a string such as
    ``kernel_quantizer="my_quantizer"`` or ``Activation("my_activation")`` finds it and a saved model loads.
    A name Keras already defines (``"relu"``) keeps its Keras meaning for activations."""
    name: str = obj.__name__  # type: ignore[attr-defined]
    keras.saving.get_custom_objects()[name] = obj
    if callable(obj) and not isinstance(obj, type):
        publish_function(name, obj)  # Keras 3 reads activation strings from its own table only
    return obj


def set_precision(precision: int = 32) -> Callable[[T], T]:
    """Declare a quantizer function's output bit width (``function.precision``), which :func:`ste.summary` reads."""

    def decorator(function: T) -> T:
        function.precision = precision  # type: ignore[attr-defined]
        return function

    return decorator
