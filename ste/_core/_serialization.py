"""Saving ``ste`` ops: Keras configs (``.keras`` files, ``to_json``, ``clone_model``), copies and pickles.

An op is saved by *naming* its parts, never by storing their code (Keras's default ``safe_mode`` refuses code):

* a function (forward, rule or ``g`` of ``backward_like``) is named by its public TensorFlow/Keras path
  (``"tf.math.sigmoid"``, ``"keras.activations.relu"``), its Keras registration name (``"package>name"``, from
  ``@keras.saving.register_keras_serializable()``), or its module and qualified name (a module-level ``def``); a
  Keras-serializable object (another op, a quantizer) by its Keras config;
* a registry surrogate by its config (:meth:`ste.registry.Surrogate.get_config`);
* the hyperparameters bound to a function rule by their Keras serialization.

Loading only looks names up: a module-level function is found in a module that is already imported (as a Keras
registration needs its module imported) and is never one of the standard library; public names come from a short
list of TensorFlow/Keras namespaces of tensor functions. A function without such a name (a lambda, a local function, a
closure) makes saving raise :class:`ste.errors.SerializationError`.

Keras opens the ``.keras`` file before it serializes the model; :mod:`ste._patches` makes its savers serialize the
config first, so ste's errors come before any file is touched.
"""

from __future__ import annotations

import importlib
import pickle
import sys
import threading
import types
from collections.abc import Callable, Mapping
from typing import Any

import keras
import tensorflow as tf

from ..errors import SerializationError
from ..registry import Surrogate
from ._describe import callable_name
from ._rules import RuleParts

__all__ = ["OpParts", "op_config", "op_parts", "op_parts_from_config"]

#: An op's parts: its forward function, the rule's kind (``"surrogate"``, ``"like"``, ``"function"``), the rule, the
#: hyperparameters bound to a function rule, the declared JVP (or None).
OpParts = tuple[Any, str, Any, Mapping[str, Any], Any]

#: Namespaces whose public functions are saved by their path, in order of preference.
_PUBLIC_NAMESPACES = ("tf.math", "tf.nn", "keras.activations", "keras.ops", "tf")
#: Public functions that run Python code or touch files: never looked up from a saved file.
_NOT_LOADABLE = frozenset({"py_function", "numpy_function", "print", "load_library", "load_op_library", "function"})
_FIXES = (
    "Fix: define it with a module-level `def` in an importable module (and import that module before loading), or "
    "register it with @keras.saving.register_keras_serializable(); TensorFlow/Keras functions such as tf.sigmoid or "
    "tf.nn.relu and registry rules such as 'straight_through' save as they are."
)

_public_lock = threading.Lock()
_public_paths: dict[int, str] = {}


def _namespace(path: str) -> Any:
    root, _, rest = path.partition(".")
    module: Any = {"tf": tf, "keras": keras}[root]
    for part in rest.split(".") if rest else ():
        module = getattr(module, part)
    return module


def _is_function_like(obj: Any) -> bool:
    return callable(obj) and not isinstance(obj, (type, types.ModuleType))


def _public_path(fn: Any) -> str | None:
    """``"tf.math.sigmoid"`` for ``tf.sigmoid``: fn's path in the first public namespace holding it."""
    with _public_lock:
        if not _public_paths:
            for prefix in _PUBLIC_NAMESPACES:
                for name, obj in vars(_namespace(prefix)).items():
                    if not name.startswith("_") and name not in _NOT_LOADABLE and _is_function_like(obj):
                        _public_paths.setdefault(id(obj), f"{prefix}.{name}")
        path = _public_paths.get(id(fn))
    return path if path is not None and _resolve_public(path) is fn else None


def _resolve_public(path: str) -> Any:
    prefix, _, name = path.rpartition(".")
    if prefix in _PUBLIC_NAMESPACES and not name.startswith("_") and name not in _NOT_LOADABLE:
        obj = getattr(_namespace(prefix), name, None)
        if _is_function_like(obj):
            return obj
    raise SerializationError(
        f"a saved ste op names the function {path!r}, which is not a public tensor function of "
        f"{', '.join(_PUBLIC_NAMESPACES)} in this TensorFlow/Keras version."
    )


def _registered_name(fn: Any) -> str | None:
    try:
        name = keras.saving.get_registered_name(fn)
    except (AttributeError, TypeError):  # an object without __name__, or unhashable: not registered
        return None
    return name if keras.saving.get_registered_object(name) is fn else None


def _is_keras_object(obj: Any) -> bool:
    """A Keras-serializable object: registered (ste ops and quantizers are) or a public Keras class."""
    cls = type(obj)
    if isinstance(obj, (types.FunctionType, type)) or not hasattr(obj, "get_config"):
        return False
    return _registered_name(cls) is not None or cls.__module__.split(".")[0] == "keras"


def _walk(module: Any, qualname: str) -> Any:
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return obj


#: Packages whose functions a saved file may not name by module: the standard library (os.system, ...), and
#: TensorFlow/Keras internals (their public functions are named by public path; private paths move between versions).
_NOT_BY_MODULE = frozenset({"builtins", "tensorflow", "keras", "tf_keras"}) | frozenset(sys.stdlib_module_names)


def _not_loadable_module(module_name: str) -> bool:
    return module_name.split(".")[0] in _NOT_BY_MODULE


def _why_unnamed(fn: Any) -> str:
    """Why ``fn`` has no name a loader could find, or '' when it has one (module + qualified name)."""
    module_name = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(module_name, str) or not isinstance(qualname, str):
        return f"it is a {type(fn).__name__} object with no module-level name"
    if "<lambda>" in qualname:
        return "it is a lambda"
    if "<locals>" in qualname:
        outer = qualname.split(".<locals>")[0]
        return f"it is a local function or closure (defined inside {outer}())"
    if _walk(sys.modules.get(module_name), qualname) is not fn:
        return f"{module_name}.{qualname} does not name it (it was redefined or renamed)"
    return ""


def function_config(fn: Any, role: str, op: Any) -> dict[str, Any]:
    """A JSON-serializable name for ``fn`` (the op's ``role``), or :class:`ste.errors.SerializationError`."""
    public = _public_path(fn)
    if public is not None:
        return {"public": public}
    if _is_keras_object(fn):
        return {"object": keras.saving.serialize_keras_object(fn)}
    registered = _registered_name(fn)
    if registered is not None:
        return {"registered": registered}
    why = _why_unnamed(fn)
    if not why and _not_loadable_module(fn.__module__):
        why = (
            f"it is {fn.__module__}.{fn.__qualname__}, which is not among the public tensor functions of "
            f"{', '.join(_PUBLIC_NAMESPACES)}; a saved file names no other standard-library or TensorFlow/Keras "
            f"function. Wrap it in a function of your own"
        )
    if why:
        raise SerializationError(
            f"ste op {op!r} cannot be saved: its {role} {callable_name(fn)} has no name that a saved model could "
            f"be loaded with ({why}). {_FIXES}"
        )
    return {"module": fn.__module__, "qualname": fn.__qualname__}


def _unsafe_deserialization_allowed() -> bool:
    from keras.src.saving import serialization_lib  # the safe_mode of the load in progress (no public accessor)

    in_safe_mode: Callable[[], bool | None] | None = getattr(serialization_lib, "in_safe_mode", None)
    return in_safe_mode is not None and in_safe_mode() is False


def function_from_config(config: Any, role: str) -> Any:
    """The function that :func:`function_config` named."""
    if isinstance(config, Mapping):
        if isinstance(config.get("public"), str):
            return _resolve_public(config["public"])
        if isinstance(config.get("object"), Mapping):
            return keras.saving.deserialize_keras_object(dict(config["object"]))
        if isinstance(config.get("registered"), str):
            found = keras.saving.get_registered_object(config["registered"])
            if found is None:
                raise SerializationError(
                    f"a saved ste op's {role} is the registered Keras object {config['registered']!r}, which is not "
                    f"registered now. Fix: import the module that registers it (with "
                    f"@keras.saving.register_keras_serializable()) before loading."
                )
            return found
        module_name, qualname = config.get("module"), config.get("qualname")
        if isinstance(module_name, str) and isinstance(qualname, str):
            return _module_function(module_name, qualname, role)
    raise SerializationError(
        f"a saved ste op's {role} is described by {config!r}; expected {{'public': ...}}, {{'registered': ...}}, "
        f"{{'object': ...}} or {{'module': ..., 'qualname': ...}} (as ste.STEFunction.get_config writes)."
    )


def _module_function(module_name: str, qualname: str, role: str) -> Any:
    where = f"{module_name}.{qualname}"
    if _not_loadable_module(module_name) or "<" in qualname:
        raise SerializationError(f"a saved ste op names the {role} {where!r}, which a saved file may not name.")
    module = sys.modules.get(module_name)
    if module is None and _unsafe_deserialization_allowed():
        module = importlib.import_module(module_name)
    if module is None:
        raise SerializationError(
            f"a saved ste op's {role} is {where}, but module {module_name!r} is not imported. Fix: import it before "
            f"loading (a file loaded with safe_mode=True imports no module), or register the function with "
            f"@keras.saving.register_keras_serializable()."
        )
    fn = _walk(module, qualname)
    if fn is None or getattr(fn, "__module__", None) != module_name or getattr(fn, "__qualname__", None) != qualname:
        raise SerializationError(f"a saved ste op's {role} is {where}, which no longer exists under that name.")
    return fn


# -- ops ---------------------------------------------------------------------------------------------------------


def _rule_parts(op: Any) -> tuple[str, Any, dict[str, Any]]:
    """(kind, rule object, bound hyperparameters): kind is 'surrogate', 'like' or 'function'."""
    parts: RuleParts = op._rule.parts()
    return parts.kind, parts.rule, parts.params


def _declared_jvp(op: Any) -> Any:
    """The JVP declared with ``.backward(fn, jvp=...)``, or None."""
    parts: RuleParts = op._rule.parts()
    return parts.jvp


def op_config(op: Any) -> dict[str, Any]:
    """``STEFunction.get_config``: names of the forward function and the rule, JSON-serializable."""
    kind, rule, params = _rule_parts(op)
    rule_config: dict[str, Any]
    if kind == "surrogate":
        rule_config = {"surrogate": rule.get_config()}
    elif kind == "like":
        rule_config = {"like": function_config(rule, "function g of backward_like(g)", op)}
    else:
        rule_config = {
            "function": function_config(rule, "backward rule", op),
            "params": keras.saving.serialize_keras_object(params),
        }
        if _declared_jvp(op) is not None:
            rule_config["jvp"] = function_config(_declared_jvp(op), "declared jvp", op)
    return {"forward": function_config(op.forward_fn, "forward function", op), "rule": rule_config}


def op_parts_from_config(config: Any) -> OpParts:
    """``STEFunction.from_config``'s parts: ``(forward_fn, kind, rule, params, jvp)``, which
    ``ste._core._dsl.rebuild_op`` makes an op of."""
    rule_config = config.get("rule") if isinstance(config, Mapping) else None
    if not isinstance(rule_config, Mapping) or "forward" not in config:
        raise SerializationError(
            f"an ste op config must be {{'forward': ..., 'rule': ...}} (as ste.STEFunction.get_config writes); "
            f"received {config!r}."
        )
    fn = function_from_config(config["forward"], "forward function")
    if "surrogate" in rule_config:
        return (fn, "surrogate", Surrogate.from_config(rule_config["surrogate"]), {}, None)
    if "like" in rule_config:
        return (fn, "like", function_from_config(rule_config["like"], "function g"), {}, None)
    if "function" in rule_config:
        params = keras.saving.deserialize_keras_object(rule_config.get("params") or {})
        declared = rule_config.get("jvp")
        jvp = None if declared is None else function_from_config(declared, "declared jvp")
        return (fn, "function", function_from_config(rule_config["function"], "backward rule"), params, jvp)
    raise SerializationError(
        f"an ste op config's rule must hold 'surrogate', 'like' or 'function'; received {rule_config!r}."
    )


def _check_picklable(obj: Any, role: str, op: Any) -> None:
    """Raise :class:`ste.errors.SerializationError` saying why pickle would fail on ``obj`` (a part of ``op``).

    Pickle stores a function by module and qualified name; any other object is tried (they are rare and small).
    """
    if isinstance(obj, types.FunctionType):
        why = _why_unnamed(obj)
        if why:
            why += "; pickle stores a function by its module and name"
    else:
        try:
            pickle.dumps(obj)
            return
        except Exception as error:  # pickle raises many types; the message says which
            why = f"{type(error).__name__}: {error}"
    if why:
        raise SerializationError(
            f"ste op {op!r} cannot be pickled: its {role} {callable_name(obj)} cannot be pickled ({why}). Fix: "
            f"define it with a module-level `def` in an importable module."
        )


def op_parts(op: Any) -> OpParts:
    """``STEFunction.__reduce__``'s arguments (``ste._core._dsl.rebuild_op`` rebuilds the op from them): its forward
    function, rule, bound hyperparameters and declared JVP, each checked to pickle."""
    kind, rule, params = _rule_parts(op)
    _check_picklable(op.forward_fn, "forward function", op)
    if kind != "surrogate":  # a Surrogate pickles itself (by class or registry name)
        _check_picklable(rule, "backward rule" if kind == "function" else "function g", op)
    if params:
        _check_picklable(params, "bound hyperparameters", op)
    jvp = _declared_jvp(op)
    if jvp is not None:
        _check_picklable(jvp, "declared jvp", op)
    return (op.forward_fn, kind, rule, params, jvp)
