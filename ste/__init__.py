"""ste: compute one function in the forward pass and use another gradient in the backward pass.

>>> import ste, tensorflow as tf
>>> binarize = ste.forward(tf.sign).backward("straight_through", clip=1.0)
>>> relu_as_sigmoid = ste.forward(tf.nn.relu).backward_like(tf.nn.sigmoid)
"""

from ._tools._cli import answer_without_tensorflow as _answer_without_tensorflow

_answer_without_tensorflow()  # `python -m ste --help` (and usage errors) exit here, before TensorFlow is imported

from ._deprecated import install_old_module_paths as _install_old_module_paths
from ._deprecated import moved_name as _moved_name
from ._keras._requirements import check_requirements as _check_requirements

_check_requirements()  # no TensorFlow, or one too old: ste.errors.MissingDependencyError with the pip command

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
from ._core._serialization import install_save_check as _install_save_check
from ._keras._collective_keys import install as _install_fresh_collective_keys
from ._keras._distribute import install as _install_multi_worker_fixes
from ._tools._export import export_quantized_weights, unpack_quantized_weights
from ._tools._plot import plot
from ._tools._summary import LayerSummary, ModelSummary, summary
from ._version import __version__
from .errors import STEError
from .qat import quantize_model, to_tflite

_install_old_module_paths()  # pickles written before a private module moved name its old path
_install_save_check()
_install_multi_worker_fixes()  # Keras's fit under MultiWorkerMirroredStrategy (docs/distributed.md)
_install_fresh_collective_keys()  # a second MirroredStrategy in one process (docs/distributed.md)

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


def __getattr__(name: str) -> object:
    """A name that moved elsewhere (``ste.errors.ParameterError`` → ``ste.errors.ParameterError``), with a warning."""
    return _moved_name(name)
