"""``NoOp``: the identity, declaring a precision (larq's ``NoOp``).

It marks a kernel as ``precision``-bit without changing its values: :func:`ste.summary` counts it at that width, and
:meth:`ste.optimizers.Bop.is_binary_variable` treats a kernel whose quantizer has precision 1 as binary (Bop keeps
such a kernel at ±1 itself, so it needs no quantizer that changes the values).
"""

from __future__ import annotations

import numbers
from typing import Any

import keras
import tensorflow as tf

from ..errors import ParameterError
from ._base import Quantizer, as_tensor

__all__ = ["NoOp"]


@keras.saving.register_keras_serializable(package="ste")
class NoOp(Quantizer):
    """Identity quantizer with a declared ``precision`` (bits, 1–32): output = input, gradient = dy.

    ``NoOp(precision=1)`` on a kernel trained by :class:`ste.optimizers.Bop` marks it binary. It has no spec name
    (a name must build with no arguments, and ``precision`` has no default, as in larq): pass the object.
    """

    def __init__(self, precision: int, **kwargs: Any) -> None:
        if isinstance(precision, bool) or not isinstance(precision, numbers.Integral) or not 1 <= precision <= 32:
            raise ParameterError(
                f"NoOp: precision must be an integer number of bits from 1 to 32; received {precision!r}. "
                f"Fix: e.g. NoOp(precision=1) to mark a binary kernel."
            )
        self.precision = int(precision)
        super().__init__(**kwargs)

    def call(self, inputs: Any) -> tf.Tensor:
        return tf.identity(as_tensor(inputs, self))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "precision": self.precision}
