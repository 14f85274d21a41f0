"""Activations of binarized networks for Keras 3: :func:`hard_tanh` and :func:`leaky_tanh` (larq's formulas).

Plain differentiable functions (their gradients are TensorFlow's autodiff of these formulas, as in larq); use them
as ``activation=ste.activations.hard_tanh`` or in ``keras.layers.Activation``; :func:`register` gives a function of
one's own a string name for Keras. Both are registered with Keras
(package ``ste``), so a model using them saves and loads. ``keras.activations.get("leaky_tanh")`` finds this
:func:`leaky_tanh`; the name ``"hard_tanh"`` stays Keras's own (same values and gradient) everywhere but in
``ste.larq.layers``, where it means this one, as in larq.

>>> import ste
>>> ste.activations.leaky_tanh([-3.0, 0.5, 2.0]).numpy().tolist()
[-1.399999976158142, 0.5, 1.2000000476837158]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import keras
import tensorflow as tf

from ._common._arguments import check_number
from ._keras._lookup import publish_function
from .errors import ParameterTypeError, RegistrationError

__all__ = ["hard_tanh", "leaky_tanh", "register"]

F = TypeVar("F", bound=Callable[..., Any])


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


def register(name: str, function: F) -> F:
    """Make the string ``name`` mean ``function`` as a Keras activation: ``keras.activations.get(name)``,
    ``keras.layers.Dense(..., activation=name)`` and ``keras.layers.Activation(name)`` find it. Returns ``function``.

    Keras 3 reads an activation string from its own name table only (custom objects are consulted for configs, not
    for plain strings), so this is the way to give a function a string name. Registering a name again replaces the
    function. A name Keras defines itself (``"relu"``) raises :class:`ste.errors.RegistrationError` and keeps its
    Keras meaning. For a model using the function to load again, also register it with Keras's serialization
    (``keras.saving.register_keras_serializable()``).

    >>> import keras, ste
    >>> def halve(x):
    ...     return x / 2
    >>> _ = ste.activations.register("halve", halve)
    >>> keras.activations.get("halve") is halve
    True
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ParameterTypeError(
            f"ste.activations.register(name, function): name must be a Python identifier (str); received "
            f"{type(name).__name__} {name!r}. Fix: pass the string the layers will use, e.g. 'my_activation'."
        )
    if not callable(function) or isinstance(function, type):
        raise ParameterTypeError(
            f"ste.activations.register({name!r}, function): function must be a function; received "
            f"{type(function).__name__}. Fix: pass a function of one tensor, e.g. lambda x: x / 2."
        )
    if not publish_function(name, function):
        raise RegistrationError(
            f"ste.activations.register({name!r}, ...): {name!r} is Keras's own activation name (or another "
            f"library's), and keras.activations.get({name!r}) keeps returning that one. Fix: register the function "
            f"under another name."
        )
    return function


for _activation in (hard_tanh, leaky_tanh):
    keras.saving.register_keras_serializable(package="ste")(_activation)

# keras.activations.get("leaky_tanh") finds this one (Keras 3 has none); "hard_tanh" stays Keras's own (the same
# values and gradient).
publish_function("leaky_tanh", leaky_tanh)
