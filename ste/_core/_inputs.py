"""Turning the positional arguments of an ``ste`` op into the floating-point tensors it differentiates."""

from __future__ import annotations

import sys
from typing import Any

import tensorflow as tf

from ..errors import InputError

__all__ = ["to_input_tensor"]

_FLOAT_DTYPES = "float16, bfloat16, float32 or float64"


def _is_keras_tensor(value: Any) -> bool:
    keras = sys.modules.get("keras")
    keras_tensor = getattr(keras, "KerasTensor", None)
    return keras_tensor is not None and isinstance(value, keras_tensor)


def to_input_tensor(value: Any, position: int, op: str) -> tf.Tensor:
    """Convert positional input ``position`` of ``op`` to a floating tensor or raise :class:`ste.errors.InputError`.

    Variables (``tf.Variable`` and Keras 3 ``keras.Variable``) are read here, outside the custom-gradient function,
    so the gradient reaches them through their read op instead of them being captured.
    """
    where = f"{op}: positional input {position}"
    if value is None:
        raise InputError(
            f"{where} is None; expected a floating-point tensor ({_FLOAT_DTYPES}). Positional arguments are the "
            f"differentiable inputs; pass hyperparameters and optional values by keyword."
        )
    if isinstance(value, (tf.RaggedTensor, tf.SparseTensor, tf.IndexedSlices)):
        raise InputError(
            f"{where} is a {type(value).__name__}; expected a dense floating-point tensor. Fix: apply the op to the "
            f"flat values (e.g. ragged.with_flat_values(op(ragged.flat_values))) or densify it first."
        )
    if _is_keras_tensor(value):
        raise InputError(
            f"{where} is a symbolic KerasTensor (functional model building); raw TensorFlow ops cannot take it. "
            f"Fix: apply it through a Keras layer, keras.layers.Activation(op)(x) (saves and loads with the model "
            f"when the op's functions have importable names), or use an ste.quantizers layer."
        )
    if isinstance(value, tf.Tensor):
        tensor = value
    else:
        try:
            tensor = tf.convert_to_tensor(value)
        except (TypeError, ValueError) as error:
            raise InputError(
                f"{where} of type {type(value).__name__} cannot be converted to a tensor ({error}); expected a "
                f"floating-point tensor, array, number or variable."
            ) from None
    if not tensor.dtype.is_floating:
        raise InputError(
            f"{where} has dtype {tensor.dtype.name}; expected {_FLOAT_DTYPES} (only floating inputs have "
            f"gradients). Fix: cast it, e.g. tf.cast(x, tf.float32), or pass it by keyword as a non-differentiable "
            f"hyperparameter."
        )
    return tensor
