"""Quantization-aware training for any Keras 3 model, deployed as a real int8 TFLite model (TFMOT's API).

>>> import ste, keras
>>> model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(2)])
>>> qat = ste.quantize_model(model)          # train it with compile/fit
>>> flatbuffer = ste.to_tflite(qat)          # int8 FULLY_CONNECTED kernels

A :class:`Scheme` says which layers it covers and how it quantizes them (:class:`Int8Scheme`, ``"int8"``: TFMOT's
default 8-bit scheme with batch norms folded during training; :class:`NBitScheme`: TFMOT's n-bit scheme, e.g. 4-bit
weights with 8-bit activations; :class:`BinaryScheme`, ``"binary"``: larq-style sign inputs and kernels;
:class:`TernaryScheme`, ``"ternary"``: BitNet b1.58; collaborative optimization of a stripped pruned or clustered model,
TFMOT's PQAT, CQAT and PCQAT: :class:`PrunePreserveScheme`, ``"prune_preserve"``, and :class:`ClusterPreserveScheme`,
``"cluster_preserve"`` and ``"prune_cluster_preserve"``, also under TFMOT's names
:data:`Default8BitPrunePreserveQuantizeScheme` and :data:`Default8BitClusterPreserveQuantizeScheme`). A
:class:`QuantizeConfig` subclass quantizes a layer with its own quantizers (TFMOT's :class:`LastValueQuantizer`,
:class:`MovingAverageQuantizer`, :class:`AllValuesQuantizer`, :class:`FixedQuantizer`, or any
``ste.quantizers.Quantizer``) through :class:`QuantizeWrapper`. See docs/qat.md.
"""

from ._api import (
    quantize_annotate_layer,
    quantize_annotate_model,
    quantize_apply,
    quantize_model,
    quantize_scope,
    schemes,
    to_tflite,
)
from ._attention import QuantSoftmax
from ._config import QuantizeConfig
from ._fake_quant import fake_quant, fake_quant_op, nudged_range, symmetric_fake_quant, weight_fake_quant_op
from ._folded import FoldedConv2D, FoldedDepthwiseConv2D
from ._int8 import Int8Scheme, NBitScheme
from ._io_range import fix_input_output_range, remove_input_range
from ._lowbit import BinaryScheme, LowBitScheme, TernaryScheme
from ._preserve import (
    ClusterPreserveScheme,
    Default8BitClusterPreserveQuantizeScheme,
    Default8BitPrunePreserveQuantizeScheme,
    PreservingWeightFakeQuant,
    PrunePreserveScheme,
)
from ._quantizers import ActivationFakeQuant, WeightFakeQuant
from ._scheme import InputFeed, Role, Scheme
from ._scheme_names import register_scheme, unregister_scheme
from ._separable import SplitSeparableConv1D, SplitSeparableConv2D
from ._tfmot_quantizers import AllValuesQuantizer, FixedQuantizer, LastValueQuantizer, MovingAverageQuantizer
from ._transformer import QuantEinsumDense, QuantEmbedding, QuantMultiHeadAttention, QuantReversibleEmbedding
from ._wrapper import QuantizeAwareActivation, QuantizeWrapper

__all__ = [
    "ActivationFakeQuant",
    "AllValuesQuantizer",
    "BinaryScheme",
    "ClusterPreserveScheme",
    "Default8BitClusterPreserveQuantizeScheme",
    "Default8BitPrunePreserveQuantizeScheme",
    "FixedQuantizer",
    "FoldedConv2D",
    "FoldedDepthwiseConv2D",
    "InputFeed",
    "Int8Scheme",
    "LastValueQuantizer",
    "LowBitScheme",
    "MovingAverageQuantizer",
    "NBitScheme",
    "PreservingWeightFakeQuant",
    "PrunePreserveScheme",
    "QuantEinsumDense",
    "QuantEmbedding",
    "QuantMultiHeadAttention",
    "QuantReversibleEmbedding",
    "QuantSoftmax",
    "QuantizeAwareActivation",
    "QuantizeConfig",
    "QuantizeWrapper",
    "Role",
    "Scheme",
    "SplitSeparableConv1D",
    "SplitSeparableConv2D",
    "TernaryScheme",
    "WeightFakeQuant",
    "fake_quant",
    "fake_quant_op",
    "fix_input_output_range",
    "nudged_range",
    "quantize_annotate_layer",
    "quantize_annotate_model",
    "quantize_apply",
    "quantize_model",
    "quantize_scope",
    "register_scheme",
    "remove_input_range",
    "schemes",
    "symmetric_fake_quant",
    "to_tflite",
    "unregister_scheme",
    "weight_fake_quant_op",
]
