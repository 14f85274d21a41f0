"""Old spellings that keep working for one release: top-level names that moved, and private module paths.

* A name that left ``ste``'s top level (``ste.ParameterError``, now ``ste.errors.ParameterError``) is still found by
  ``ste.__getattr__``, which warns once per name with a :class:`DeprecationWarning` naming the new path.
* A private module that moved (``ste._dsl``, now ``ste._core._dsl``) is still importable under its old path, without
  a warning: pickles name the module of each function and class they hold, so a pickle written by an older ste
  loads. ``import ste`` installs the finder that resolves those paths.

``MODULE_MOVES`` is also read (as text) by ``.dev/move_modules.py``, which rewrites references to the old paths.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
import warnings
from types import ModuleType
from typing import Any

__all__ = ["MODULE_MOVES", "MOVED_NAMES", "install_old_module_paths", "moved_name"]

#: Old dotted module path → new dotted module path.
MODULE_MOVES: dict[str, str] = {
    "ste._errors": "ste.errors",
    "ste._arguments": "ste._common._arguments",
    "ste._names": "ste._common._names",
    "ste._requirements": "ste._keras._requirements",
    "ste._keras_versions": "ste._keras._versions",
    "ste._keras_lookup": "ste._keras._lookup",
    "ste._configs": "ste._keras._configs",
    "ste._signatures": "ste._keras._signatures",
    "ste._distribute": "ste._keras._distribute",
    "ste._collective_keys": "ste._keras._collective_keys",
    "ste._xla": "ste._core._xla",
    "ste._gradients": "ste._core._gradients",
    "ste._inputs": "ste._core._inputs",
    "ste._bitmask": "ste._core._bitmask",
    "ste._maskrule": "ste._core._maskrule",
    "ste._forwardmode": "ste._core._forwardmode",
    "ste._vectorized": "ste._core._vectorized",
    "ste._rules": "ste._core._rules",
    "ste._compile": "ste._core._compile",
    "ste._dsl": "ste._core._dsl",
    "ste._describe": "ste._core._describe",
    "ste._serialization": "ste._core._serialization",
    "ste._cli": "ste._tools._cli",
    "ste._cli_catalog": "ste._tools._cli_catalog",
    "ste._plot": "ste._tools._plot",
    "ste._gradcheck": "ste._tools._gradcheck",
    "ste._summary": "ste._tools._summary",
    "ste._export": "ste._tools._export",
    "ste._packing": "ste._tools._packing",
    "ste._catalog": "ste._tools._catalog",
    "ste._targets": "ste._tools._targets",
}

#: A name that left ``ste``'s top level → where it lives now (``module:name``).
MOVED_NAMES: dict[str, str] = {
    "BackupError": "ste.errors:BackupError",
    "CallError": "ste.errors:CallError",
    "ConversionError": "ste.errors:ConversionError",
    "GradientCountError": "ste.errors:GradientCountError",
    "GradientDtypeError": "ste.errors:GradientDtypeError",
    "GradientShapeError": "ste.errors:GradientShapeError",
    "HigherOrderError": "ste.errors:HigherOrderError",
    "InputError": "ste.errors:InputError",
    "MissingBackwardError": "ste.errors:MissingBackwardError",
    "MissingDependencyError": "ste.errors:MissingDependencyError",
    "NotBuiltError": "ste.errors:NotBuiltError",
    "ParameterError": "ste.errors:ParameterError",
    "ParameterTypeError": "ste.errors:ParameterTypeError",
    "RegistrationError": "ste.errors:RegistrationError",
    "RuleError": "ste.errors:RuleError",
    "SerializationError": "ste.errors:SerializationError",
    "SpecError": "ste.errors:SpecError",
    "UnknownConstraintError": "ste.errors:UnknownConstraintError",
    "UnknownQuantizerError": "ste.errors:UnknownQuantizerError",
    "UnknownSurrogateError": "ste.errors:UnknownSurrogateError",
    "UnsupportedLayerError": "ste.errors:UnsupportedLayerError",
    "VariableAssignmentError": "ste.errors:VariableAssignmentError",
    "fix_input_output_range": "ste.qat:fix_input_output_range",
    "quantize_annotate_layer": "ste.qat:quantize_annotate_layer",
    "quantize_annotate_model": "ste.qat:quantize_annotate_model",
    "quantize_apply": "ste.qat:quantize_apply",
    "quantize_scope": "ste.qat:quantize_scope",
    "remove_input_range": "ste.qat:remove_input_range",
}

_warned: set[str] = set()
_lock = threading.Lock()


def moved_name(name: str) -> Any:
    """The object a moved top-level name stands for, with a DeprecationWarning the first time it is asked for."""
    where = MOVED_NAMES.get(name)
    if where is None:
        raise AttributeError(f"module 'ste' has no attribute {name!r}")
    module, attribute = where.split(":")
    with _lock:
        first = name not in _warned
        _warned.add(name)
    if first:
        warnings.warn(
            f"ste.{name} moved to {module}.{attribute}; the old spelling will be removed in the next release. "
            f"Fix: use {module}.{attribute}.",
            DeprecationWarning,
            stacklevel=3,
        )
    return getattr(importlib.import_module(module), attribute)


class _OldModulePaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a moved module's old path as the module itself (one module object, two names in sys.modules)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MODULE_MOVES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def __init__(self) -> None:
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(MODULE_MOVES[spec.name])
        self._specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # the import system has just set the module's __spec__ to the old path's: give it back its own
        module.__spec__ = self._specs[module.__name__]


_finder = _OldModulePaths()


def install_old_module_paths() -> None:
    """Make the old paths of moved modules importable (idempotent)."""
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)  # before any finder that might find a stale file at the old path
