"""ste: compute one function in the forward pass and use another gradient in the backward pass.

>>> import ste, tensorflow as tf
>>> binarize = ste.forward(tf.sign).backward("straight_through", clip=1.0)
>>> relu_as_sigmoid = ste.forward(tf.nn.relu).backward_like(tf.nn.sigmoid)

``import ste`` imports neither TensorFlow nor Keras and changes nothing outside ste, so ``python -m ste list`` answers
at once. The first name used (``ste.forward``, ``ste.layers``, ...) loads TensorFlow, Keras and every family of ste,
which registers ste's classes with Keras: a program that only loads a ``.keras`` file imports the family it holds
(``import ste.qat``) or uses any name of ste first.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
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

#: The families, each a package or module of ste, loaded in this order at the first use of a name of ste.
_FAMILIES = (
    "errors",
    "registry",
    "activations",
    "constraints",
    "quantizers",
    "layers",
    "metrics",
    "optimizers",
    "callbacks",
    "qat",
    "sparsity",
    "clustering",
    "spiking",
    "testing",
    "larq",
)

#: The top-level names that are not families → the module that defines each.
_NAMES = {
    "Forward": "._core._dsl",
    "RuleLike": "._core._dsl",
    "STEFunction": "._core._dsl",
    "backward": "._core._dsl",
    "backward_like": "._core._dsl",
    "forward": "._core._dsl",
    "bit_masks": "._core._bitmask",
    "set_bit_masks": "._core._bitmask",
    "mask_rule": "._core._maskrule",
    "export_quantized_weights": "._tools._export",
    "unpack_quantized_weights": "._tools._export",
    "plot": "._tools._plot",
    "LayerSummary": "._tools._summary",
    "ModelSummary": "._tools._summary",
    "summary": "._tools._summary",
    "STEError": ".errors",
    "quantize_model": ".qat",
    "to_tflite": ".qat",
}

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


def _load() -> None:
    """Check TensorFlow and Keras, import every family (registering ste's Keras classes) and bind the top level."""
    from ._keras._requirements import check_requirements

    check_requirements()  # no TensorFlow, or one too old: ste.errors.MissingDependencyError with the pip command
    namespace = globals()
    for family in _FAMILIES:
        namespace[family] = importlib.import_module(f".{family}", __name__)
    for name, module in _NAMES.items():
        namespace[name] = getattr(importlib.import_module(module, __name__), name)


def __getattr__(name: str) -> Any:
    """A name of ``__all__`` used for the first time: load ste (see the module docstring)."""
    if name in _NAMES or name in _FAMILIES:
        _load()
        return globals()[name]
    raise AttributeError(f"module 'ste' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
