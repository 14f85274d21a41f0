"""ste: compute one function in the forward pass and use another gradient in the backward pass.

>>> import ste, tensorflow as tf
>>> binarize = ste.forward(tf.sign).backward("straight_through", clip=1.0)
>>> relu_as_sigmoid = ste.forward(tf.nn.relu).backward_like(tf.nn.sigmoid)
"""

from ._cli import answer_without_tensorflow as _answer_without_tensorflow

_answer_without_tensorflow()  # `python -m ste --help` (and usage errors) exit here, before TensorFlow is imported

from ._requirements import check_requirements as _check_requirements

_check_requirements()  # no TensorFlow, or one too old: ste.MissingDependencyError with the pip command

from . import (
    activations,
    callbacks,
    clustering,
    constraints,
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
from ._bitmask import bit_masks, set_bit_masks
from ._collective_keys import install as _install_fresh_collective_keys
from ._distribute import install as _install_multi_worker_fixes
from ._dsl import Forward, RuleLike, STEFunction, backward, backward_like, forward
from ._errors import (
    BackupError,
    CallError,
    ConversionError,
    GradientCountError,
    GradientDtypeError,
    GradientShapeError,
    HigherOrderError,
    InputError,
    MissingBackwardError,
    MissingDependencyError,
    NotBuiltError,
    ParameterError,
    ParameterTypeError,
    RegistrationError,
    RuleError,
    SerializationError,
    SpecError,
    STEError,
    UnknownConstraintError,
    UnknownQuantizerError,
    UnknownSurrogateError,
    UnsupportedLayerError,
    VariableAssignmentError,
)
from ._export import export_quantized_weights, unpack_quantized_weights
from ._maskrule import mask_rule
from ._plot import plot
from ._serialization import install_save_check as _install_save_check
from ._summary import LayerSummary, ModelSummary, summary
from ._version import __version__
from .qat import (
    fix_input_output_range,
    quantize_annotate_layer,
    quantize_annotate_model,
    quantize_apply,
    quantize_model,
    quantize_scope,
    remove_input_range,
    to_tflite,
)

_install_save_check()
_install_multi_worker_fixes()  # Keras's fit under MultiWorkerMirroredStrategy (docs/distributed.md)
_install_fresh_collective_keys()  # a second MirroredStrategy in one process (docs/distributed.md)

__all__ = [
    "BackupError",
    "CallError",
    "ConversionError",
    "Forward",
    "GradientCountError",
    "GradientDtypeError",
    "GradientShapeError",
    "HigherOrderError",
    "InputError",
    "LayerSummary",
    "MissingBackwardError",
    "MissingDependencyError",
    "ModelSummary",
    "NotBuiltError",
    "ParameterError",
    "ParameterTypeError",
    "RegistrationError",
    "RuleError",
    "RuleLike",
    "STEError",
    "STEFunction",
    "SerializationError",
    "SpecError",
    "UnknownConstraintError",
    "UnknownQuantizerError",
    "UnknownSurrogateError",
    "UnsupportedLayerError",
    "VariableAssignmentError",
    "__version__",
    "activations",
    "backward",
    "backward_like",
    "bit_masks",
    "callbacks",
    "clustering",
    "constraints",
    "export_quantized_weights",
    "fix_input_output_range",
    "forward",
    "larq",
    "layers",
    "mask_rule",
    "metrics",
    "optimizers",
    "plot",
    "qat",
    "quantize_annotate_layer",
    "quantize_annotate_model",
    "quantize_apply",
    "quantize_model",
    "quantize_scope",
    "quantizers",
    "registry",
    "remove_input_range",
    "set_bit_masks",
    "sparsity",
    "spiking",
    "summary",
    "testing",
    "to_tflite",
    "unpack_quantized_weights",
]
