"""Quantized convolutions: ``QuantConv1D``, ``QuantConv2D``, ``QuantDepthwiseConv2D``, ``QuantSeparableConv2D``."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from .._errors import ParameterError
from ._base import KernelSlot, QuantLayerMixin

__all__ = ["QuantConv1D", "QuantConv2D", "QuantDepthwiseConv2D", "QuantSeparableConv2D"]

_KERNEL = KernelSlot("kernel_quantizer", "kernel", "kernel_constraint")


class _QuantConv(QuantLayerMixin):
    """``convolution_op(input_quantizer(x), kernel_quantizer(kernel))`` + bias, then the activation."""

    slots = (_KERNEL,)
    rank: int
    filters: int

    def __init__(self, *args: Any, input_quantizer: Any = None, kernel_quantizer: Any = None, **kwargs: Any) -> None:
        self._resolve_constraints(kwargs)
        super().__init__(*args, **kwargs)
        self._set_quantizers(input_quantizer, {"kernel_quantizer": kernel_quantizer})

    def call(self, inputs: Any) -> Any:
        outputs = self.convolution_op(self.quantize_inputs(inputs), self.quantize_kernel(_KERNEL))  # type: ignore[attr-defined]
        return self._bias_and_activation(outputs, self.filters, self.rank)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), **self._quantizer_config()}  # type: ignore[misc]


@keras.saving.register_keras_serializable(package="ste")
class QuantConv1D(_QuantConv, keras.layers.Conv1D):  # type: ignore[misc]
    """``keras.layers.Conv1D`` with ``input_quantizer`` and ``kernel_quantizer`` (see :class:`QuantDense`)."""

    def call(self, inputs: Any) -> Any:
        if self.padding != "causal":
            return super().call(inputs)
        # Causal: quantize, then left-pad with zeros and run a "valid" convolution, as keras.layers.Conv1D does.
        inputs = self.quantize_inputs(inputs)
        left = self.dilation_rate[0] * (self.kernel_size[0] - 1)
        time_axis = 1 if self.data_format == "channels_last" else 2
        pads = [[0, 0], [0, 0], [0, 0]]
        pads[time_axis] = [left, 0]
        outputs = keras.ops.conv(
            keras.ops.pad(inputs, pads),
            self.quantize_kernel(_KERNEL),
            strides=list(self.strides),
            padding="valid",
            dilation_rate=self.dilation_rate,
            data_format=self.data_format,
        )
        return self._bias_and_activation(outputs, self.filters, self.rank)


@keras.saving.register_keras_serializable(package="ste")
class QuantConv2D(_QuantConv, keras.layers.Conv2D):  # type: ignore[misc]
    """``keras.layers.Conv2D`` with ``input_quantizer`` and ``kernel_quantizer`` (see :class:`QuantDense`)."""


@keras.saving.register_keras_serializable(package="ste")
class QuantDepthwiseConv2D(QuantLayerMixin, keras.layers.DepthwiseConv2D):  # type: ignore[misc]
    """``keras.layers.DepthwiseConv2D`` with ``input_quantizer`` and ``kernel_quantizer`` (larq's name
    ``depthwise_quantizer`` is accepted too); the kernel's constraint is ``depthwise_constraint``."""

    slots = (KernelSlot("kernel_quantizer", "kernel", "depthwise_constraint"),)

    def __init__(
        self,
        *args: Any,
        input_quantizer: Any = None,
        kernel_quantizer: Any = None,
        depthwise_quantizer: Any = None,
        **kwargs: Any,
    ) -> None:
        if depthwise_quantizer is not None:
            if kernel_quantizer is not None:
                raise ParameterError(
                    "QuantDepthwiseConv2D: give kernel_quantizer= or larq's depthwise_quantizer=, not both."
                )
            kernel_quantizer = depthwise_quantizer
        self._resolve_constraints(kwargs)
        super().__init__(*args, **kwargs)
        self._set_quantizers(input_quantizer, {"kernel_quantizer": kernel_quantizer})

    def call(self, inputs: Any) -> Any:
        channels = self._get_input_channel(inputs.shape) * self.depth_multiplier
        outputs = keras.ops.depthwise_conv(
            self.quantize_inputs(inputs),
            self.quantize_kernel(self.slots[0]),
            strides=self.strides,
            padding=self.padding,
            dilation_rate=self.dilation_rate,
            data_format=self.data_format,
        )
        return self._bias_and_activation(outputs, channels, self.rank)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), **self._quantizer_config()}


@keras.saving.register_keras_serializable(package="ste")
class QuantSeparableConv2D(QuantLayerMixin, keras.layers.SeparableConv2D):  # type: ignore[misc]
    """``keras.layers.SeparableConv2D`` with ``input_quantizer``, ``depthwise_quantizer`` and
    ``pointwise_quantizer`` (constraints ``depthwise_constraint`` and ``pointwise_constraint``)."""

    slots = (
        KernelSlot("depthwise_quantizer", "depthwise_kernel", "depthwise_constraint"),
        KernelSlot("pointwise_quantizer", "pointwise_kernel", "pointwise_constraint"),
    )

    def __init__(
        self,
        *args: Any,
        input_quantizer: Any = None,
        depthwise_quantizer: Any = None,
        pointwise_quantizer: Any = None,
        **kwargs: Any,
    ) -> None:
        self._resolve_constraints(kwargs)
        super().__init__(*args, **kwargs)
        self._set_quantizers(
            input_quantizer, {"depthwise_quantizer": depthwise_quantizer, "pointwise_quantizer": pointwise_quantizer}
        )

    @property
    def quantized_depthwise_kernel(self) -> tf.Tensor:
        """``depthwise_quantizer(depthwise_kernel)``."""
        return self.quantized_kernels["depthwise_kernel"]

    @property
    def quantized_pointwise_kernel(self) -> tf.Tensor:
        """``pointwise_quantizer(pointwise_kernel)``."""
        return self.quantized_kernels["pointwise_kernel"]

    def call(self, inputs: Any) -> Any:
        outputs = keras.ops.separable_conv(
            self.quantize_inputs(inputs),
            self.quantize_kernel(self.slots[0]),
            self.quantize_kernel(self.slots[1]),
            strides=self.strides,
            padding=self.padding,
            dilation_rate=self.dilation_rate,
            data_format=self.data_format,
        )
        return self._bias_and_activation(outputs, self.filters, self.rank)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), **self._quantizer_config()}
