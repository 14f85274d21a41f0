"""Activations of binarized networks for Keras 3: :func:`hard_tanh` and :func:`leaky_tanh` (larq's formulas).

Plain differentiable functions (their gradients are TensorFlow's autodiff of these formulas, as in larq); use them
as ``activation=ste.activations.hard_tanh`` or in ``keras.layers.Activation``. Both are registered with Keras
(package ``ste``), so a model using them saves and loads. ``keras.activations.get("leaky_tanh")`` finds this
:func:`leaky_tanh`; the name ``"hard_tanh"`` stays Keras's own (same values and gradient) everywhere but in
``ste.larq.layers``, where it means this one, as in larq.

>>> import ste
>>> ste.activations.leaky_tanh([-3.0, 0.5, 2.0]).numpy().tolist()
[-1.399999976158142, 0.5, 1.2000000476837158]
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from ._common._arguments import check_number
from ._keras._lookup import publish_function

__all__ = ["hard_tanh", "leaky_tanh"]


def _float_tensor(x: Any) -> tf.Tensor:
    x = x if isinstance(x, (tf.Tensor, tf.Variable)) else tf.convert_to_tensor(x)
    return x if x.dtype.is_floating else tf.cast(x, keras.config.floatx())


def hard_tanh(x: Any) -> tf.Tensor:
    """clip(x, −1, 1); gradient 1 on [−1, 1] (both ends included), 0 outside. larq's ``hard_tanh``."""
    x = _float_tensor(x)
    one = tf.constant(1, x.dtype)
    return tf.clip_by_value(x, -one, one)


def leaky_tanh(x: Any, alpha: float = 0.2) -> tf.Tensor:
    """clip(x, −1, 1) + α·(max(x, 1) − 1) + α·(min(x, −1) + 1): hard tanh with slope ``alpha`` outside [−1, 1].

    Gradient 1 inside (−1, 1), ``alpha`` outside; at x = ±1 TensorFlow's subgradients of clip, max and min add up
    to 1 + α (as in larq). larq's ``leaky_tanh``.
    """
    alpha = check_number("leaky_tanh", "alpha", alpha)
    x = _float_tensor(x)
    one = tf.constant(1, x.dtype)
    a = tf.constant(alpha, x.dtype)
    return tf.clip_by_value(x, -one, one) + a * (tf.maximum(x, one) - one) + a * (tf.minimum(x, -one) + one)


for _activation in (hard_tanh, leaky_tanh):
    keras.saving.register_keras_serializable(package="ste")(_activation)

# keras.activations.get("leaky_tanh") finds this one (Keras 3 has none); "hard_tanh" stays Keras's own (the same
# values and gradient).
publish_function("leaky_tanh", leaky_tanh)
