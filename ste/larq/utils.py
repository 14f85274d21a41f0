"""``lq.utils``: ``register_keras_custom_object`` and ``set_precision`` for user-written quantizers, and
``memory_as_readable_str``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import keras

from .. import activations
from ..errors import RegistrationError

__all__ = ["memory_as_readable_str", "register_keras_custom_object", "set_precision"]

T = TypeVar("T")


def register_keras_custom_object(obj: T) -> T:
    """Make ``obj`` (a class or function) known to Keras by its ``__name__``, as larq does, so a string such as
    ``kernel_quantizer="my_quantizer"`` or ``Activation("my_activation")`` finds it and a saved model loads.
    A name Keras already defines (``"relu"``) keeps its Keras meaning for activations."""
    name: str = obj.__name__  # type: ignore[attr-defined]
    keras.saving.get_custom_objects()[name] = obj
    if callable(obj) and not isinstance(obj, type) and name.isidentifier():
        try:
            activations.register(name, obj)  # Keras 3 reads activation strings from its own table only
        except RegistrationError:
            pass  # a Keras name keeps its Keras meaning
    return obj


def set_precision(precision: int = 32) -> Callable[[T], T]:
    """Declare a quantizer function's output bit width (``function.precision``), which :func:`ste.summary` reads."""

    def decorator(function: T) -> T:
        function.precision = precision  # type: ignore[attr-defined]
        return function

    return decorator


def memory_as_readable_str(num_bits: int) -> str:
    """``num_bits`` as bytes with binary prefixes and two decimals, as larq prints sizes (``"1.00 KiB"``)."""
    value = num_bits / 8
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{value:,.2f} {unit}"
        value /= 1024
    return f"{value:,.2f} GiB"
