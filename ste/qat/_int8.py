"""The ``"int8"`` scheme: TFMOT's default 8-bit scheme (``default_8bit``), with batch norms folded during training.

Weights: symmetric, narrow-range int8 ([−127, 127]) on ±max|w|, per output channel for convolutions and depthwise
convolutions, per tensor for Dense (:class:`ste.qat.WeightFakeQuant`). Activations: asymmetric int8 per tensor
with moving-average ranges (:class:`ste.qat.ActivationFakeQuant`). Conv2D/DepthwiseConv2D + BatchNormalization are
folded (:class:`ste.qat.FoldedConv2D`); ReLU/ReLU6 run inside the layer before its output quantizer.
"""

from __future__ import annotations

from typing import Any

import keras

from .. import layers as ste_layers
from .._keras_versions import complete_config, renormalizes
from ..quantizers import Quantizer
from ._folded import FoldedConv2D, FoldedDepthwiseConv2D
from ._quantizers import ActivationFakeQuant, WeightFakeQuant
from ._scheme import Role, Scheme
from ._separable import SplitSeparableConv1D, SplitSeparableConv2D
from ._transformer import QuantEinsumDense, QuantEmbedding, QuantMultiHeadAttention

__all__ = ["Int8Scheme"]

L = keras.layers

#: Keras layer (exact class) → (quantized class, {kernel quantizer argument: channel_axes}).
_COMPUTE: dict[type, tuple[type, dict[str, int]]] = {
    L.Dense: (ste_layers.QuantDense, {"kernel_quantizer": 0}),
    L.Conv1D: (ste_layers.QuantConv1D, {"kernel_quantizer": 0}),  # per tensor: TFLite reshapes it to 2-D
    L.Conv2D: (ste_layers.QuantConv2D, {"kernel_quantizer": 1}),
    L.DepthwiseConv2D: (ste_layers.QuantDepthwiseConv2D, {"kernel_quantizer": 2}),
    # TFLite runs a separable convolution as DEPTHWISE_CONV_2D then CONV_2D: the tensor between them is quantized too
    L.SeparableConv1D: (SplitSeparableConv1D, {"depthwise_quantizer": 0, "pointwise_quantizer": 0}),  # as Conv1D
    L.SeparableConv2D: (SplitSeparableConv2D, {"depthwise_quantizer": 2, "pointwise_quantizer": 1}),
    L.EinsumDense: (QuantEinsumDense, {"kernel_quantizer": 0}),  # per tensor, as Dense
    L.Embedding: (QuantEmbedding, {"embeddings_quantizer": 0}),  # per tensor: TFLite's GATHER keeps one scale
    L.MultiHeadAttention: (QuantMultiHeadAttention, {"kernel_quantizer": 0}),
    # kernel (h, w, out, in): per tensor (WeightFakeQuant's channel is the last axis), as TFMOT quantizes it
    L.Conv2DTranspose: (ste_layers.QuantConv2DTranspose, {"kernel_quantizer": 0}),
}
#: A ReLU fused into these is left out of TFLite's int8 kernel when the bias is zero (the converter then runs the
#: transposed convolution and the ReLU in float): the ReLU runs after the output quantizer instead.
_UNFUSED = (L.Conv2DTranspose,)
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
    """TFMOT's default 8-bit scheme (see the module docstring)."""

    name = "int8"

    def role(self, layer: keras.layers.Layer) -> Role | None:
        kind = type(layer)
        if kind in _COMPUTE:
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

    def quantize(
        self, layer: keras.layers.Layer, batch_norm: keras.layers.Layer | None, activation: Any
    ) -> keras.layers.Layer:
        cls, slots = _COMPUTE[type(layer)]
        config = complete_config(layer, layer.get_config())
        if "activation" in config:
            config["activation"] = keras.activations.serialize(activation)
        quantizers: dict[str, Any] = {name: WeightFakeQuant(bits=8, channel_axes=axes) for name, axes in slots.items()}
        if issubclass(cls, (SplitSeparableConv1D, SplitSeparableConv2D)):
            quantizers["intermediate_quantizer"] = ActivationFakeQuant(bits=8)
        if cls is QuantMultiHeadAttention:
            quantizers["activation_quantizer"] = ActivationFakeQuant(bits=8)
            low, high = _FIXED_RANGES[keras.activations.softmax]
            quantizers["probability_quantizer"] = ActivationFakeQuant(8, 1.0, low, high)
        if batch_norm is None:
            return cls(**config, **quantizers)
        bn = {key: batch_norm.get_config()[key] for key in ("momentum", "epsilon", "center", "scale")}
        return _FOLDED[type(layer)](**config, **quantizers, batch_norm=bn)

    def copy_weights(
        self, new: keras.layers.Layer, layer: keras.layers.Layer, batch_norm: keras.layers.Layer | None
    ) -> None:
        mine = {_relative_path(variable, new): variable for variable in new.weights}
        for variable in layer.weights:  # kernel(s) and bias by path: depthwise_kernel, query/kernel, ...
            mine[_relative_path(variable, layer)].assign(variable)
        if batch_norm is not None:
            for name in ("gamma", "beta", "moving_mean", "moving_variance"):
                source = getattr(batch_norm, name, None)
                if source is not None:
                    getattr(new, name).assign(source)

    def activation_quantizer(self, name: str, after: Any = None) -> Quantizer:
        fixed = _FIXED_RANGES.get(after)
        if fixed is not None:  # TFLite's int8 kernel has this output range: training quantizes on it too
            return ActivationFakeQuant(bits=8, initial_min=fixed[0], initial_max=fixed[1], ema_decay=1.0, name=name)
        return ActivationFakeQuant(bits=8, name=name)
