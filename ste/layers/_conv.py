"""Quantized convolutions: ``QuantConv1D/2D/3D``, ``QuantConv1D/2D/3DTranspose``, ``QuantDepthwiseConv2D``,
``QuantSeparableConv1D/2D``.

Each computes its Keras parent's convolution on ``input_quantizer(x)`` and the quantized kernel(s), then the bias
and the activation, as Keras does. ``pad_values`` (larq's argument): with ``padding="same"``, the quantized input is
padded with that constant instead of zeros (so that a binary convolution sees only ±1) and convolved ``"valid"``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any, ClassVar

import keras
import tensorflow as tf

from .._keras._versions import complete_config
from ..errors import ParameterError
from ._base import KernelSlot, QuantLayerMixin

__all__ = [
    "QuantConv1D",
    "QuantConv1DTranspose",
    "QuantConv2D",
    "QuantConv2DTranspose",
    "QuantConv3D",
    "QuantConv3DTranspose",
    "QuantDepthwiseConv2D",
    "QuantSeparableConv1D",
    "QuantSeparableConv2D",
]

_KERNEL = KernelSlot("kernel_quantizer", "kernel", "kernel_constraint")
_SEPARABLE = (
    KernelSlot("depthwise_quantizer", "depthwise_kernel", "depthwise_constraint"),
    KernelSlot("pointwise_quantizer", "pointwise_kernel", "pointwise_constraint"),
)


def _same_padding(size: Any, kernel: int, stride: int, dilation: int) -> list[Any]:
    """[before, after] of TensorFlow's "same" padding along one axis (``size`` an int, or a scalar tensor)."""
    effective = (kernel - 1) * dilation + 1
    if isinstance(size, int):
        total = max(0, (math.ceil(size / stride) - 1) * stride + effective - size)
    else:  # a size known only at run time
        total = tf.maximum(0, ((size + stride - 1) // stride - 1) * stride + effective - size)
    return [total // 2, total - total // 2]


class _QuantConv(QuantLayerMixin):
    """What every quantized convolution shares: ``pad_values``, the padding it implies, the bias and activation."""

    rank: int
    padding: str
    data_format: str
    kernel_size: tuple[int, ...]
    strides: tuple[int, ...]
    dilation_rate: tuple[int, ...]
    pad_values: float
    slots: ClassVar[tuple[KernelSlot, ...]] = (_KERNEL,)
    op: ClassVar[Callable[..., Any]] = staticmethod(keras.ops.conv)  # what the Keras parent's call computes
    pads_input = True  # False for transposed convolutions, whose "same" crops the output instead

    @classmethod
    def options(cls) -> dict[str, tuple[Any, str]]:
        return {**super().options(), "pad_values": (0.0, "float")}

    def _apply_options(self, options: dict[str, Any]) -> None:
        value = options["pad_values"]
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
            raise ParameterError(f"{type(self).__name__}: pad_values must be a finite number; received {value!r}.")
        if float(value) != 0.0 and not self.pads_input:
            raise ParameterError(
                f"{type(self).__name__}: a transposed convolution does not pad its input (padding='same' crops its "
                f"output), so pad_values must be 0; received pad_values={value!r}."
            )
        if float(value) != 0.0 and self.padding != "same":
            raise ParameterError(
                f"{type(self).__name__}: pad_values={value!r} only applies with padding='same' (larq's rule); "
                f"received padding={self.padding!r}. Fix: padding='same', or pad_values=0.0."
            )
        self.pad_values = float(value)
        super()._apply_options(options)

    def _options_config(self) -> dict[str, Any]:
        return {**super()._options_config(), "pad_values": self.pad_values}

    def _padded(self, x: Any) -> tuple[Any, str]:
        """The quantized input, padded here when the padding is "causal" or "same" with non-zero ``pad_values``,
        and the padding left for the convolution op."""
        if not (self.padding == "causal" or (self.padding == "same" and self.pad_values != 0.0)):
            return x, self.padding
        first = 1 if self.data_format == "channels_last" else 2
        pads: list[Any] = [[0, 0] for _ in range(self.rank + 2)]
        for i in range(self.rank):
            axis = first + i
            if self.padding == "causal":  # Conv1D's causal: zeros before, as keras.layers.Conv1D does
                pads[axis] = [self.dilation_rate[i] * (self.kernel_size[i] - 1), 0]
            else:
                size = x.shape[axis] if x.shape[axis] is not None else tf.shape(x)[axis]
                pads[axis] = _same_padding(size, self.kernel_size[i], self.strides[i], self.dilation_rate[i])
        value = 0.0 if self.padding == "causal" else self.pad_values
        return tf.pad(x, pads, constant_values=tf.constant(value, x.dtype)), "valid"

    def call(self, inputs: Any) -> Any:
        def convolve(x: Any, *kernels: tf.Tensor) -> Any:
            padded, padding = self._padded(x)
            return self._convolve(padded, list(kernels), padding)

        kernels = [self.quantize_kernel(slot) for slot in self.slots]
        outputs = self.apply_to_quantized_input(convolve, self.quantize_inputs(inputs), kernels)
        if getattr(self, "use_bias", False):
            channels = self.bias.shape[0]  # type: ignore[attr-defined]
            shape = (1,) * (self.rank + 1) + (channels,)
            if self.data_format != "channels_last":
                shape = (1, channels) + (1,) * self.rank
            outputs = keras.ops.add(outputs, keras.ops.reshape(self.bias, shape))  # type: ignore[attr-defined]
        activation = getattr(self, "activation", None)
        return outputs if activation is None else activation(outputs)

    def _convolve(self, x: Any, kernels: list[tf.Tensor], padding: str) -> Any:
        """The parent's convolution op (``op``) on the prepared input and the quantized kernels."""
        return type(self).op(
            x,
            *kernels,
            strides=self.strides,
            padding=padding,
            dilation_rate=self.dilation_rate,
            data_format=self.data_format,
            **self._op_arguments(),
        )

    def _op_arguments(self) -> dict[str, Any]:
        """Arguments of ``op`` beyond those every convolution op takes."""
        return {}


class _QuantConvTranspose(_QuantConv):
    """``keras.ops.conv_transpose``, as ``keras.layers.ConvNDTranspose`` computes it."""

    pads_input = False
    output_padding: Any
    op = staticmethod(keras.ops.conv_transpose)

    def _op_arguments(self) -> dict[str, Any]:
        return {"output_padding": self.output_padding}

    def get_config(self) -> dict[str, Any]:
        """The quantized layer's config, ``output_padding`` included on every Keras release."""
        return complete_config(self, super().get_config())


class _QuantSeparableConv(_QuantConv):
    """``keras.ops.separable_conv`` with ``depthwise_quantizer`` and ``pointwise_quantizer``."""

    slots: ClassVar[tuple[KernelSlot, ...]] = _SEPARABLE
    op = staticmethod(keras.ops.separable_conv)

    @property
    def quantized_depthwise_kernel(self) -> tf.Tensor:
        """``depthwise_quantizer(depthwise_kernel)``."""
        return self.quantized_kernels["depthwise_kernel"]

    @property
    def quantized_pointwise_kernel(self) -> tf.Tensor:
        """``pointwise_quantizer(pointwise_kernel)``."""
        return self.quantized_kernels["pointwise_kernel"]


@keras.saving.register_keras_serializable(package="ste")
class QuantConv1D(_QuantConv, keras.layers.Conv1D):  # type: ignore[misc]
    """``keras.layers.Conv1D`` with ``input_quantizer``, ``kernel_quantizer`` and ``pad_values``
    (see :class:`QuantDense` and the module docstring)."""


@keras.saving.register_keras_serializable(package="ste")
class QuantConv2D(_QuantConv, keras.layers.Conv2D):  # type: ignore[misc]
    """``keras.layers.Conv2D`` with ``input_quantizer``, ``kernel_quantizer`` and ``pad_values``
    (see :class:`QuantDense` and the module docstring)."""


@keras.saving.register_keras_serializable(package="ste")
class QuantConv3D(_QuantConv, keras.layers.Conv3D):  # type: ignore[misc]
    """``keras.layers.Conv3D`` with ``input_quantizer``, ``kernel_quantizer`` and ``pad_values``
    (see :class:`QuantDense` and the module docstring)."""


@keras.saving.register_keras_serializable(package="ste")
class QuantConv1DTranspose(_QuantConvTranspose, keras.layers.Conv1DTranspose):  # type: ignore[misc]
    """``keras.layers.Conv1DTranspose`` with ``input_quantizer`` and ``kernel_quantizer`` (see :class:`QuantDense`);
    ``pad_values`` must be 0: a transposed convolution does not pad its input."""


@keras.saving.register_keras_serializable(package="ste")
class QuantConv2DTranspose(_QuantConvTranspose, keras.layers.Conv2DTranspose):  # type: ignore[misc]
    """``keras.layers.Conv2DTranspose`` with ``input_quantizer`` and ``kernel_quantizer`` (see :class:`QuantDense`);
    ``pad_values`` must be 0: a transposed convolution does not pad its input."""


@keras.saving.register_keras_serializable(package="ste")
class QuantConv3DTranspose(_QuantConvTranspose, keras.layers.Conv3DTranspose):  # type: ignore[misc]
    """``keras.layers.Conv3DTranspose`` with ``input_quantizer`` and ``kernel_quantizer`` (see :class:`QuantDense`);
    ``pad_values`` must be 0: a transposed convolution does not pad its input."""


@keras.saving.register_keras_serializable(package="ste")
class QuantDepthwiseConv2D(_QuantConv, keras.layers.DepthwiseConv2D):  # type: ignore[misc]
    """``keras.layers.DepthwiseConv2D`` with ``input_quantizer``, ``kernel_quantizer`` and ``pad_values``; the
    kernel's constraint is ``depthwise_constraint`` (``ste.larq.layers.QuantDepthwiseConv2D`` also takes larq's
    ``depthwise_quantizer``)."""

    slots = (KernelSlot("kernel_quantizer", "kernel", "depthwise_constraint"),)
    op = staticmethod(keras.ops.depthwise_conv)


@keras.saving.register_keras_serializable(package="ste")
class QuantSeparableConv1D(_QuantSeparableConv, keras.layers.SeparableConv1D):  # type: ignore[misc]
    """``keras.layers.SeparableConv1D`` with ``input_quantizer``, ``depthwise_quantizer``, ``pointwise_quantizer``
    (constraints ``depthwise_constraint`` and ``pointwise_constraint``) and ``pad_values``."""


@keras.saving.register_keras_serializable(package="ste")
class QuantSeparableConv2D(_QuantSeparableConv, keras.layers.SeparableConv2D):  # type: ignore[misc]
    """``keras.layers.SeparableConv2D`` with ``input_quantizer``, ``depthwise_quantizer``, ``pointwise_quantizer``
    (constraints ``depthwise_constraint`` and ``pointwise_constraint``) and ``pad_values``."""
