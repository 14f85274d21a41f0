"""The ``"int8"`` scheme: TFMOT's default 8-bit scheme (``default_8bit``), with batch norms folded during training;
and :class:`NBitScheme`, TFMOT's ``default_n_bit``: the same scheme with other numbers of bits for weights and
activations.

Weights: symmetric, narrow-range int8 ([−127, 127]) on ±max|w|, per output channel for convolutions, depthwise
convolutions, Dense and EinsumDense (TFMOT quantizes Dense per tensor: ``Int8Scheme(per_output_channel=False)``; so
does the default under TensorFlow before 2.20, whose TFLite converter cannot take a per-channel Dense kernel),
per tensor for embedding tables (TFLite's GATHER keeps one scale) (:class:`ste.qat.WeightFakeQuant`). Activations:
asymmetric int8 per tensor with moving-average ranges (:class:`ste.qat.ActivationFakeQuant`).
Conv2D/DepthwiseConv2D + BatchNormalization are folded (:class:`ste.qat.FoldedConv2D`); ReLU/ReLU6 run inside the
layer before its output quantizer.

:class:`NBitScheme` quantizes weights to ``num_bits_weight`` bits (symmetric, narrow range: [−(2^(b−1) − 1),
2^(b−1) − 1]) and activations to ``num_bits_activation`` bits (asymmetric, [0, 2^b − 1]), as TFMOT's n-bit scheme;
``disable_per_axis=True`` quantizes every kernel per tensor.
"""

from __future__ import annotations

from typing import Any

import keras

from .. import layers as ste_layers
from .._common._arguments import check_bool
from .._keras._rewrite import is_weight, sublayers
from .._keras._versions import PER_CHANNEL_MATMULS, complete_config, renormalizes
from ..quantizers import Quantizer
from ..quantizers._base import check_bits
from ._attention import IN_PLACE, is_attention, quantize_attention
from ._folded import FoldedConv2D, FoldedDepthwiseConv2D
from ._quantizers import ActivationFakeQuant, WeightFakeQuant
from ._scheme import Role, Scheme
from ._separable import SplitSeparableConv1D, SplitSeparableConv2D
from ._transformer import (
    QuantEinsumDense,
    QuantEmbedding,
    QuantMultiHeadAttention,
    QuantReversibleEmbedding,
    output_channel_axes,
)

__all__ = ["Int8Scheme", "NBitScheme"]

L = keras.layers

#: Per output channel: the number of trailing kernel axes that index it, found from the layer (EinsumDense: its
#: equation's output axes, see ste.qat.QuantEinsumDense).
PER_OUTPUT_CHANNEL = -1

#: Keras layer (exact class, or a subclass that overrides neither call nor build) → (quantized class, {kernel
#: quantizer argument: channel_axes, or PER_OUTPUT_CHANNEL}).
_COMPUTE: dict[type, tuple[type, dict[str, int]]] = {
    # per output channel: TFLite's FULLY_CONNECTED takes a per-channel int8 kernel (quantized dimension 0)
    L.Dense: (ste_layers.QuantDense, {"kernel_quantizer": PER_OUTPUT_CHANNEL}),
    L.Conv1D: (ste_layers.QuantConv1D, {"kernel_quantizer": 0}),  # per tensor: TFLite reshapes it to 2-D
    L.Conv2D: (ste_layers.QuantConv2D, {"kernel_quantizer": 1}),
    L.DepthwiseConv2D: (ste_layers.QuantDepthwiseConv2D, {"kernel_quantizer": 2}),
    # TFLite runs a separable convolution as DEPTHWISE_CONV_2D then CONV_2D: the tensor between them is quantized too
    L.SeparableConv1D: (SplitSeparableConv1D, {"depthwise_quantizer": 0, "pointwise_quantizer": 0}),  # as Conv1D
    L.SeparableConv2D: (SplitSeparableConv2D, {"depthwise_quantizer": 2, "pointwise_quantizer": 1}),
    L.EinsumDense: (QuantEinsumDense, {"kernel_quantizer": PER_OUTPUT_CHANNEL}),  # as Dense (one FULLY_CONNECTED)
    L.Embedding: (QuantEmbedding, {"embeddings_quantizer": 0}),  # per tensor: TFLite's GATHER keeps one scale
    L.MultiHeadAttention: (QuantMultiHeadAttention, {"kernel_quantizer": PER_OUTPUT_CHANNEL}),
    # kernel (h, w, out, in): per tensor (WeightFakeQuant's channel is the last axis), as TFMOT quantizes it
    L.Conv2DTranspose: (ste_layers.QuantConv2DTranspose, {"kernel_quantizer": 0}),
}
#: A ReLU fused into these is left out of TFLite's int8 kernel when the bias is zero (the converter then runs the
#: transposed convolution and the ReLU in float): the ReLU runs after the output quantizer instead.
_UNFUSED = (L.Conv2DTranspose,)
if QuantReversibleEmbedding is not None:  # a tied table is one per-tensor GATHER table; an untied reverse one an FC
    _COMPUTE[L.ReversibleEmbedding] = (
        QuantReversibleEmbedding,
        {"embeddings_quantizer": 0, "reverse_embeddings_quantizer": PER_OUTPUT_CHANNEL},
    )
_FOLDED: dict[type, type] = {L.Conv2D: FoldedConv2D, L.DepthwiseConv2D: FoldedDepthwiseConv2D}
_BATCH_NORMS = (L.BatchNormalization, ste_layers.BatchNormalization)

_OUTPUT = (
    L.Add,
    L.AveragePooling1D,
    L.AveragePooling2D,
    L.GlobalAveragePooling1D,
    L.GlobalAveragePooling2D,
    L.UpSampling2D,
    L.ReLU,
    L.Softmax,
    L.Activation,
)
_SHARED = (L.Concatenate,)
_PASSTHROUGH = (
    L.InputLayer,
    L.MaxPooling1D,
    L.MaxPooling2D,
    L.GlobalMaxPooling1D,
    L.GlobalMaxPooling2D,
    L.Flatten,
    L.Reshape,
    L.Permute,
    L.Dropout,
    L.SpatialDropout1D,
    L.SpatialDropout2D,
    L.ZeroPadding1D,
    L.ZeroPadding2D,
    L.Cropping1D,
    L.Cropping2D,
    L.ActivityRegularization,
    L.Identity,
)
#: The output ranges of TFLite's int8 kernels for these activations (scale 1/256 or 1/128).
_FIXED_RANGES: dict[Any, tuple[float, float]] = {
    keras.activations.softmax: (0.0, 255 / 256),
    keras.activations.sigmoid: (0.0, 255 / 256),
    keras.activations.tanh: (-1.0, 127 / 128),
}
_FUSED = (keras.activations.relu, keras.activations.relu6, keras.activations.linear)


def _relative_path(variable: Any, layer: keras.layers.Layer) -> str:
    """``variable``'s path inside ``layer`` (``"kernel"``, ``"query/kernel"``)."""
    prefix = f"{layer.name}/"
    path = str(variable.path)
    return path[path.rindex(prefix) + len(prefix) :] if prefix in path else path


class Int8Scheme(Scheme):
    """TFMOT's default 8-bit scheme (see the module docstring), with Dense and EinsumDense kernels per output
    channel (``per_output_channel=False``: per tensor, as TFMOT). The default, ``None``, is per output channel where
    TensorFlow's TFLite converter takes such a kernel (TensorFlow 2.20 or later), per tensor before; ``True`` under an
    older TensorFlow trains per channel, and :func:`ste.to_tflite` refuses the model."""

    name = "int8"
    weight_bits: int = 8
    activation_bits: int | None = 8
    per_axis: bool = True
    per_output_channel: bool = PER_CHANNEL_MATMULS

    def __init__(self, per_output_channel: bool | None = None) -> None:
        if per_output_channel is not None:
            self.per_output_channel = check_bool("ste.qat.Int8Scheme", "per_output_channel", per_output_channel)

    def compute_class(self, layer: Any) -> type | None:
        """The Keras class of :data:`_COMPUTE` that ``layer`` is: its own class, or the nearest one it subclasses
        without overriding ``call`` or ``build`` (KerasHub's ``ReversibleEmbedding``); ``None`` for any other
        layer."""
        for kind in type(layer).__mro__:
            if kind in _COMPUTE:
                return kind
            if any(name in vars(kind) for name in ("__init__", "build", "call", "get_config")):
                return None
        return None

    def quantizes_in_place(self, layer: keras.layers.Layer) -> bool:
        return self.in_place(layer)

    def in_place(self, layer: Any) -> bool:
        """Whether ``layer`` is an attention layer quantized inside, keeping its class and its call (a subclass of
        Keras's attention that overrides them, or another layer that computes attention: see
        :mod:`ste.qat._attention`)."""
        return self.compute_class(layer) is None and is_attention(layer)

    def computed_weights(self, layer: keras.layers.Layer) -> list[Any]:
        if self.in_place(layer):  # the kernels of the projections it quantizes
            covered = [child for child in sublayers(layer) if self.compute_class(child) in (L.Dense, L.EinsumDense)]
            return [variable for child in covered for variable in child.weights if is_weight(variable)]
        return super().computed_weights(layer)

    def role(self, layer: keras.layers.Layer) -> Role | None:
        kind = type(layer)
        if self.compute_class(layer) is not None or self.in_place(layer):
            return "compute"
        if kind in _OUTPUT:
            return "output"
        if kind in _SHARED:
            return "shared"
        if kind in _PASSTHROUGH:
            return "passthrough"
        return None

    def folds(self, layer: keras.layers.Layer, batch_norm: keras.layers.Layer) -> bool:
        if type(layer) not in _FOLDED or type(batch_norm) not in _BATCH_NORMS:
            return False
        axis = batch_norm.axis if isinstance(batch_norm.axis, int) else list(batch_norm.axis)
        last = axis in (-1, 3) or axis == [3]
        plain = not (renormalizes(batch_norm) or batch_norm.synchronized)
        return bool(last and plain and layer.data_format == "channels_last" and layer.activation in _FUSED[2:])

    def fuses(self, activation: Any) -> bool:
        return activation in _FUSED

    def fuses_into(self, layer: keras.layers.Layer, activation: Any) -> bool:
        if type(layer) in _UNFUSED or not hasattr(layer, "activation"):  # Embedding, attention: nothing to fuse into
            return activation is keras.activations.linear
        return self.fuses(activation)

    def channel_axes(self, layer: keras.layers.Layer, axes: int) -> int:
        """The ``channel_axes`` of a kernel quantizer of ``layer`` whose slot says ``axes`` (see :data:`_COMPUTE`)."""
        if not self.per_axis:
            return 0
        if axes == PER_OUTPUT_CHANNEL:
            return output_channel_axes(layer) if self.per_output_channel else 0
        return axes

    def quantize_projection(self, layer: keras.layers.Layer) -> keras.layers.Layer:
        """The quantized layer, built and holding ``layer``'s weights, for a projection inside an attention layer
        (its activation runs inside it: no graph edge holds it)."""
        new = self.quantize(layer, None, getattr(layer, "activation", None) or keras.activations.linear)
        new.name = layer.name
        config = layer.get_build_config()
        if config:
            new.build_from_config(config)
        self.copy_weights(new, layer, None)
        return new

    def quantize(
        self, layer: keras.layers.Layer, batch_norm: keras.layers.Layer | None, activation: Any
    ) -> keras.layers.Layer:
        if self.in_place(layer):
            return quantize_attention(
                layer,
                "ste.quantize_model",
                self.quantize_projection,
                lambda child: self.compute_class(child) in (L.Dense, L.EinsumDense),
                self.activation_quantizer,
            )
        cls, slots = _COMPUTE[self.compute_class(layer)]  # type: ignore[index]
        config = complete_config(layer, layer.get_config())
        if "activation" in config:
            config["activation"] = keras.activations.serialize(activation)
        quantizers: dict[str, Any] = {
            name: self.weight_quantizer(layer, name, self.channel_axes(layer, axes)) for name, axes in slots.items()
        }
        if issubclass(cls, (SplitSeparableConv1D, SplitSeparableConv2D)):
            quantizers["intermediate_quantizer"] = self.activation_quantizer(f"{layer.name}_intermediate_quant")
        if cls is QuantMultiHeadAttention:
            quantizers["activation_quantizer"] = self.activation_quantizer("activation_quant")
            quantizers["probability_quantizer"] = self.activation_quantizer(
                "probability_quant", keras.activations.softmax
            )
        if batch_norm is None:
            return cls(**config, **quantizers)
        bn = {key: batch_norm.get_config()[key] for key in ("momentum", "epsilon", "center", "scale")}
        return _FOLDED[type(layer)](**config, **quantizers, batch_norm=bn)

    def weight_quantizer(self, layer: keras.layers.Layer, argument: str, channel_axes: int) -> Quantizer:
        """The quantizer of one kernel of ``layer``: ``argument`` is the quantized layer's constructor argument
        (``"kernel_quantizer"``, ``"depthwise_quantizer"``, ...), ``channel_axes`` as
        :class:`ste.qat.WeightFakeQuant`'s. The default: :class:`ste.qat.WeightFakeQuant` on the scheme's bits."""
        del layer, argument
        return WeightFakeQuant(bits=self.weight_bits, channel_axes=channel_axes)

    def copy_weights(
        self, new: keras.layers.Layer, layer: keras.layers.Layer, batch_norm: keras.layers.Layer | None
    ) -> None:
        if getattr(new, IN_PLACE, False):
            return  # a copy quantized in place holds its weights
        mine = {_relative_path(variable, new): variable for variable in new.weights}
        for variable in layer.weights:  # kernel(s) and bias by path: depthwise_kernel, query/kernel, ...
            mine[_relative_path(variable, layer)].assign(variable)
        if batch_norm is not None:
            for name in ("gamma", "beta", "moving_mean", "moving_variance"):
                source = getattr(batch_norm, name, None)
                if source is not None:
                    getattr(new, name).assign(source)

    def activation_quantizer(self, name: str, after: Any = None) -> Quantizer | None:
        if self.activation_bits is None:  # weight-only
            return None
        fixed = _FIXED_RANGES.get(after)
        if fixed is not None:  # TFLite's int8 kernel has this output range: training quantizes on it too
            low, high = fixed
            return ActivationFakeQuant(self.activation_bits, 1.0, low, high, name=name)
        return ActivationFakeQuant(bits=self.activation_bits, name=name)


class NBitScheme(Int8Scheme):
    """TFMOT's ``DefaultNBitQuantizeScheme``: the int8 scheme with ``num_bits_weight``-bit weights and
    ``num_bits_activation``-bit activations (2 to 8 each), e.g. ``NBitScheme(num_bits_weight=4)`` for 4-bit weights
    and 8-bit activations; ``disable_per_axis=True`` quantizes every kernel per tensor. The fixed ranges after
    softmax, sigmoid and tanh are kept, on ``num_bits_activation`` bits.

    ``num_bits_activation=None`` is weight-only QAT, the standard for language models: the kernels of Dense,
    EinsumDense (attention projections included), Embedding and the convolutions are fake-quantized (Dense and
    EinsumDense per output channel, embedding tables per tensor), every activation stays float, e.g.
    ``NBitScheme(num_bits_weight=4, num_bits_activation=None)`` for int4 weight-only.

    TFLite runs the model in int8: b-bit weights are int8 kernels that take 2^b − 1 values. It has no kernels for
    activations below 8 bits, so :func:`ste.to_tflite` refuses such a model (train with them, deploy elsewhere)."""

    name = "n_bit"

    def __init__(
        self, disable_per_axis: bool = False, num_bits_weight: int = 8, num_bits_activation: int | None = 8
    ) -> None:
        owner = "ste.qat.NBitScheme"
        self.per_axis = not check_bool(owner, "disable_per_axis", disable_per_axis)
        self.weight_bits = check_bits(owner, num_bits_weight, low=2, high=8, name="num_bits_weight")
        self.activation_bits = (
            None
            if num_bits_activation is None
            else check_bits(owner, num_bits_activation, low=2, high=8, name="num_bits_activation")
        )

    def __repr__(self) -> str:
        return (
            f"NBitScheme(disable_per_axis={not self.per_axis}, num_bits_weight={self.weight_bits}, "
            f"num_bits_activation={self.activation_bits})"
        )
