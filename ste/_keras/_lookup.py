"""Keras's own string lookups find ste's names: ``keras.activations.get("ste_sign")``, ``Dense(activation="sign")``,
``keras.layers.Activation("ste_sign")``, ``keras.constraints.get("weight_clip")``, ``Dense(kernel_constraint=...)``.

In Keras 3 (checked on 3.15) ``keras.activations.get(name)`` and ``keras.constraints.get(name)`` read a string only
from the module's name table ``ALL_OBJECTS_DICT`` (``keras.src.activations`` / ``keras.src.constraints``); custom
objects registered with ``keras.saving.register_keras_serializable`` are consulted for configs, not for plain
strings. So the quantizer and constraint tables publish their names into those two dicts (through
:class:`ste._common._names.NameTable`'s ``on_change``), never replacing a name Keras defines itself (``"relu"``,
``"max_norm"`` keep their Keras meaning) and removing only names they added.

* A constraint name maps to its class (Keras instantiates it with default arguments, as for ``"max_norm"``).
* A quantizer name maps to a module-level function ``name(x)`` that applies a default instance of the quantizer,
  registered with ``keras.saving.register_keras_serializable(package="ste.activation")`` so that a model using it
  saves and loads with ``safe_mode=True``. Only quantizers without weights are published: a quantizer declaring
  ``has_weights = True`` (a trainable step or clipping level: ``lsq``, ``pact``) is a layer, not an activation
  function. A published quantizer that creates weights all the same is refused when the function first runs
  (:class:`ste.errors.RegistrationError` naming the declaration to add).
* A class registered by ste name only (a quantizer, constraint, neuron or pruning schedule: every table whose entries
  appear in a saved config) is also registered with Keras's serialization, so that a model using it loads again
  (after importing the module that registers it): :func:`publish_serializable` is those tables' ``on_change``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import keras
from keras.src import activations as _keras_activations
from keras.src import constraints as _keras_constraints

from ..errors import RegistrationError

__all__ = [
    "ACTIVATION_PACKAGE",
    "publish_activation",
    "publish_constraint",
    "publish_function",
    "publish_serializable",
]

#: The Keras registration package of the published activation functions (``"ste.activation>ste_sign"``).
ACTIVATION_PACKAGE = "ste.activation"

_LOCK = threading.RLock()
_OURS: dict[int, dict[str, Any]] = {}  # id(Keras table) -> the entries ste put there


def _publish(table: dict[str, Any], name: str, value: Any) -> bool:
    """Put ``value`` in ``table`` under ``name`` (``None``: remove ste's entry); False if the name is Keras's."""
    with _LOCK:
        ours = _OURS.setdefault(id(table), {})
        if name in table and ours.get(name) is not table[name]:
            return False  # a Keras name (or someone else's): it keeps its meaning
        if value is None:
            if name in ours:
                del table[name]
                del ours[name]
            return True
        table[name] = value
        ours[name] = value
        return True


def _make_serializable(package: str, cls: type[Any] | None) -> None:
    """Register ``cls`` with Keras's serialization (``"package>module.QualName"``) unless it already is, so that a
    model using a class registered by ste name only loads again (Keras would save it, then fail at load with
    "Could not locate class"). The key names the class, not the ste name, so that a name later given to another
    class with ``replace=True`` cannot make a saved model load the wrong class. Keras's own classes need nothing."""
    if cls is None or cls.__module__.split(".")[0] == "keras":
        return
    if keras.saving.get_registered_name(cls) == cls.__name__:  # not registered with Keras yet
        keras.saving.register_keras_serializable(package=package, name=f"{cls.__module__}.{cls.__qualname__}")(cls)


def publish_serializable(package: str) -> Callable[[str, Any], None]:
    """A name table's ``on_change`` that registers each class given a name with Keras's serialization under
    ``package`` (``"ste.neuron"``), so that a model holding one loads again; removing a name changes nothing (a file
    saved meanwhile still names the class)."""

    def publish(name: str, cls: Any) -> None:
        _make_serializable(package, cls)

    return publish


def publish_constraint(name: str, cls: type[Any] | None) -> None:
    """Make ``keras.constraints.get(name)`` return ``cls()`` (``None``: remove a name ste published)."""
    _make_serializable("ste.constraint", cls)
    _publish(_keras_constraints.ALL_OBJECTS_DICT, name, cls)


def _activation(name: str, cls: type[Any]) -> Callable[[Any], Any]:
    instances: list[Any] = []

    def activation(x: Any) -> Any:
        if not instances:
            with _LOCK:
                if not instances:
                    instances.append(cls(name=f"{name}_activation"))
        y = instances[0](x)
        if instances[0].weights:
            raise RegistrationError(
                f"the Keras activation {name!r} applies the quantizer {cls.__qualname__}, which created weights "
                f"({', '.join(w.path for w in instances[0].weights)}) that no model would train or save. Fix: "
                f"declare has_weights = True in {cls.__qualname__} and use it as a layer, not as activation={name!r}."
            )
        return y

    activation.__name__ = activation.__qualname__ = name
    activation.__module__ = __name__
    activation.__doc__ = f"The quantizer {cls.__qualname__}() as a Keras activation function (ste name {name!r})."
    keras.saving.register_keras_serializable(package=ACTIVATION_PACKAGE, name=name)(activation)
    return activation


def publish_function(name: str, function: Callable[..., Any]) -> bool:
    """Make ``keras.activations.get(name)`` return ``function``; False (nothing changed) for a name Keras defines."""
    return _publish(_keras_activations.ALL_OBJECTS_DICT, name, function)


def publish_activation(name: str, cls: type[Any] | None, has_weights: bool = False) -> None:
    """Make ``keras.activations.get(name)`` apply a default ``cls`` quantizer (``None``: remove it).

    A quantizer with weights (``has_weights``) is not published, and a name it replaces is removed.
    """
    _make_serializable("ste.quantizer", cls)
    table = _keras_activations.ALL_OBJECTS_DICT
    if cls is None or has_weights:
        _publish(table, name, None)
        return
    _publish(table, name, _activation(name, cls))
