"""Separable convolutions whose depthwise output is fake-quantized: :class:`SplitSeparableConv1D`,
:class:`SplitSeparableConv2D`.

TFLite has no separable kernel: the converter runs ``SeparableConv2D`` as a DEPTHWISE_CONV_2D then a 1×1 CONV_2D
(TFMOT's ``SeparableConvQuantize`` transform splits the layer in two for that reason). For both kernels to be int8,
the tensor between them needs a range too. These layers compute ``depthwise_conv`` on the quantized input and the
quantized depthwise kernel, fake-quantize its output with ``intermediate_quantizer`` (an
:class:`ste.qat.ActivationFakeQuant`), then the pointwise convolution with the quantized pointwise kernel, the bias
and the activation: without quantizers, exactly ``keras.ops.separable_conv``.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from .. import quantizers as ste_quantizers
from ..layers import QuantSeparableConv1D, QuantSeparableConv2D
from ..quantizers._sharing import claim

__all__ = ["SplitSeparableConv1D", "SplitSeparableConv2D"]


class _Split:
    """The intermediate quantizer of a quantized separable convolution (mixed into ``QuantSeparableConv*``)."""

    rank: int
    strides: Any
    dilation_rate: Any
    data_format: str
    intermediate_quantizer: Any

    @classmethod
    def options(cls) -> dict[str, tuple[Any, str]]:
        return {**super().options(), "intermediate_quantizer": (None, "QuantizerLike")}  # type: ignore[misc]

    def _apply_options(self, options: dict[str, Any]) -> None:
        self.intermediate_quantizer = ste_quantizers.get(options.pop("intermediate_quantizer"))
        super()._apply_options(options)  # type: ignore[misc]

    def _options_config(self) -> dict[str, Any]:
        config = super()._options_config()  # type: ignore[misc]
        return {**config, "intermediate_quantizer": ste_quantizers.serialize(self.intermediate_quantizer)}

    def _build_quantizers(self, input_shape: Any) -> None:
        super()._build_quantizers(input_shape)  # type: ignore[misc]
        quantizer = self.intermediate_quantizer
        if isinstance(quantizer, keras.layers.Layer) and not quantizer.built:
            quantizer.build(None)
        claim(quantizer, self, "intermediate_quantizer")

    def _convolve(self, x: Any, kernels: list[tf.Tensor], padding: str) -> Any:
        depthwise, pointwise = kernels
        y = keras.ops.depthwise_conv(
            x,
            depthwise,
            strides=self.strides,
            padding=padding,
            dilation_rate=self.dilation_rate,
            data_format=self.data_format,
        )
        if self.intermediate_quantizer is not None:
            y = self.intermediate_quantizer(y)
        return keras.ops.conv(y, pointwise, strides=1, padding="valid", data_format=self.data_format)


@keras.saving.register_keras_serializable(package="ste")
class SplitSeparableConv1D(_Split, QuantSeparableConv1D):
    """``ste.layers.QuantSeparableConv1D`` with ``intermediate_quantizer`` on the depthwise output (see the module
    docstring)."""


@keras.saving.register_keras_serializable(package="ste")
class SplitSeparableConv2D(_Split, QuantSeparableConv2D):
    """``ste.layers.QuantSeparableConv2D`` with ``intermediate_quantizer`` on the depthwise output (see the module
    docstring)."""
