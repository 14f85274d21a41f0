"""ste: compute one function in the forward pass and use another gradient in the backward pass.

>>> import ste, tensorflow as tf
>>> binarize = ste.forward(tf.sign).backward("straight_through", clip=1.0)
>>> relu_as_sigmoid = ste.forward(tf.nn.relu).backward_like(tf.nn.sigmoid)

``import ste`` imports TensorFlow, Keras and every family of ste, and so registers ste's classes with Keras, as every
Keras plugin does: a process that has run ``import ste`` loads a ``.keras`` file of ste's layers, ops and wrappers
without ``custom_objects`` (docs/saving.md). That is its one effect outside ste: it applies no patch to Keras or
TensorFlow (``ste._patches`` lists them, each applied where it is needed), reads no command line and installs no
import hook.

Without TensorFlow (or with a TensorFlow or Keras older than ste supports), ``import ste`` still succeeds;
``ste.__version__`` and ``ste.errors`` are there, and every other name of ste raises
:class:`ste.errors.MissingDependencyError` with the install command.

``python -m ste`` imports this package before it runs ``ste.__main__``; while Python's ``runpy`` imports it for that
(``runpy._run_module_as_main`` with the module ``ste`` on the call stack), the families are left out, so that
``list`` and ``show NAME`` of a built-in name answer from the catalog (package data) without importing TensorFlow.
Every other command finishes the import first (:func:`_load`).
"""

from __future__ import annotations

import importlib as _importlib
import sys as _sys
from typing import NoReturn

from ._keras._requirements import check_requirements as _check_requirements
from ._version import __version__
from .errors import MissingDependencyError as _MissingDependencyError


def _missing_requirement() -> _MissingDependencyError | None:
    """Why ste cannot load here (TensorFlow or Keras missing, broken or too old), or None."""
    try:
        _check_requirements()
    except _MissingDependencyError as error:
        return error
    return None


def _run_as_command_line() -> bool:
    """Whether Python's ``runpy`` is importing this package to run ``python -m ste`` (read from the call stack)."""
    run = getattr(_sys.modules.get("runpy"), "_run_module_as_main", None)
    frame = _sys._getframe(1) if run is not None else None
    while frame is not None:
        if frame.f_code is run.__code__:  # type: ignore[union-attr]
            return frame.f_locals.get("mod_name") in ("ste", "ste.__main__")
        frame = frame.f_back
    return False


# False once _load has run; the first import under ``python -m ste`` defers the families
_DEFERRED: bool = globals().get("_DEFERRED") is not False and _run_as_command_line()
_MISSING = None if _DEFERRED else _missing_requirement()


def _load() -> None:
    """Finish an import that ``python -m ste`` deferred (a command that needs the live registry): what ``import ste``
    does in every other process."""
    global _DEFERRED
    if _DEFERRED:
        _DEFERRED = False
        _importlib.reload(_sys.modules[__name__])


if _MISSING is None and not _DEFERRED:
    from . import (
        activations,
        callbacks,
        clustering,
        constraints,
        errors,
        larq,
        layers,
        metrics,
        optimizers,
        qat,
        quantizers,
        registry,
        sparsity,
        spiking,
        testing,
    )
    from ._core._bitmask import bit_masks, set_bit_masks
    from ._core._dsl import Forward, RuleLike, STEFunction, backward, backward_like, forward
    from ._core._maskrule import mask_rule
    from ._tools._export import export_quantized_weights, unpack_quantized_weights
    from ._tools._plot import plot
    from ._tools._summary import LayerSummary, ModelSummary, summary
    from .errors import STEError
    from .qat import quantize_model, to_tflite

__all__ = [
    "Forward",
    "LayerSummary",
    "ModelSummary",
    "RuleLike",
    "STEError",
    "STEFunction",
    "__version__",
    "activations",
    "backward",
    "backward_like",
    "bit_masks",
    "callbacks",
    "clustering",
    "constraints",
    "errors",
    "export_quantized_weights",
    "forward",
    "larq",
    "layers",
    "mask_rule",
    "metrics",
    "optimizers",
    "plot",
    "qat",
    "quantize_model",
    "quantizers",
    "registry",
    "set_bit_masks",
    "sparsity",
    "spiking",
    "summary",
    "testing",
    "to_tflite",
    "unpack_quantized_weights",
]


def __getattr__(name: str) -> NoReturn:
    """A name of ste asked for where ste could not load (no TensorFlow): the reason and the install command."""
    if _MISSING is not None and name in __all__:
        raise _MissingDependencyError(f"ste.{name} is not available: {_MISSING}") from _MISSING
    raise AttributeError(f"module 'ste' has no attribute {name!r}")
