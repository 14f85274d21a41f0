"""ste: compute one function in the forward pass and use another gradient in the backward pass.

>>> import ste, tensorflow as tf
>>> binarize = ste.forward(tf.sign).backward("straight_through", clip=1.0)
>>> relu_as_sigmoid = ste.forward(tf.nn.relu).backward_like(tf.nn.sigmoid)

``import ste`` imports TensorFlow, Keras and every family of ste, and so registers ste's classes with Keras, as every
Keras plugin does: a process that has run ``import ste`` loads a ``.keras`` file of ste's layers, ops and wrappers
without ``custom_objects`` (docs/saving.md). That is its one effect outside ste: it applies no patch to Keras or
TensorFlow (``ste._patches`` lists them, each applied where it is needed), reads no command line and installs no
import hook.

Without TensorFlow (or with a TensorFlow or Keras older than ste supports), ``import ste`` still succeeds, so that
``python -m ste list`` and ``show NAME`` answer from the catalog of the built-in registry; ``ste.__version__`` and
``ste.errors`` are there, and every other name of ste raises :class:`ste.errors.MissingDependencyError` with the
install command.
"""

from __future__ import annotations

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


_MISSING = _missing_requirement()

if _MISSING is None:
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
