"""What every quantized layer shares: resolving quantizers, building them, quantizing kernels in ``call``.

A quantized layer subclasses its Keras parent and declares its kernel slots: which quantizer argument quantizes
which kernel attribute, and which constraint argument clips it. The kernel is quantized explicitly inside ``call``
(no private Keras hooks), so what the layer computes is exactly ``parent(quantized inputs, quantized kernel)``.
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any, ClassVar, NamedTuple

import keras
import tensorflow as tf

from .. import constraints as ste_constraints
from .. import metrics as ste_metrics
from .. import quantizers as ste_quantizers
from .._errors import NotBuiltError

__all__ = ["KernelSlot", "QuantLayerMixin", "kernel_precision"]


class KernelSlot(NamedTuple):
    """One quantized kernel of a layer."""

    quantizer: str  # constructor argument and attribute holding the quantizer, e.g. "kernel_quantizer"
    kernel: str  # attribute holding the latent (float) kernel, e.g. "kernel"
    constraint: str  # constructor argument and attribute holding its constraint, e.g. "kernel_constraint"


def _precision(quantizer: Any) -> int | None:
    precision = getattr(quantizer, "precision", None)
    return precision if isinstance(precision, int) else None


_KERNEL_TAG = "_ste_quantized_kernel_of"


def kernel_precision(variable: Any) -> int | None:
    """The bit width a quantized layer's quantizer gives ``variable`` (e.g. 1 for a kernel quantized by ``"sign"`` or
    ``NoOp(precision=1)``), read from the layer when asked, so a quantizer replaced after building counts.

    ``None`` for a variable that is not the kernel of a built ``ste`` quantized layer (or whose quantizer has no fixed
    precision); a variable carrying larq's ``precision`` attribute reports that instead.
    """
    owner = getattr(variable, _KERNEL_TAG, None)
    if owner is not None:
        layer, attribute = owner[0](), owner[1]
        if layer is not None and getattr(layer, attribute, None) is variable:
            return layer.kernel_precisions.get(attribute)  # type: ignore[no-any-return]
    return _precision(variable)


class QuantLayerMixin:
    """Mixin for quantized Keras layers; see the module docstring."""

    slots: ClassVar[tuple[KernelSlot, ...]] = ()
    input_quantizer: Any

    def __init__(self, *args: Any, metrics: Any = None, **kwargs: Any) -> None:
        """``metrics``: larq's per-layer training metrics, e.g. ``["flip_ratio"]`` (see :mod:`ste.metrics`)."""
        ste_metrics.check_metric_names(type(self).__name__, metrics)  # before Keras builds anything
        super().__init__(*args, **kwargs)
        self._set_metrics(metrics)

    def _set_metrics(self, metrics: Any) -> None:
        """Keep the validated metric names; the metrics themselves are created with the kernels, in ``build``."""
        self._metric_names = ste_metrics.check_metric_names(type(self).__name__, metrics)
        self._flip_ratios: dict[str, ste_metrics.FlipRatio] = {}

    def _build_metrics(self) -> None:
        """One :class:`ste.metrics.FlipRatio` per kernel when ``"flip_ratio"`` was asked for."""
        if "flip_ratio" not in self._metric_names or self._flip_ratios:
            return
        name = f"flip_ratio/{getattr(self, 'name', '')}"
        for slot in self.slots:
            kernel = getattr(self, slot.kernel)
            metric = ste_metrics.FlipRatio(name=name if len(self.slots) == 1 else f"{name}/{slot.kernel}")
            metric.build_for(tuple(kernel.shape), kernel.dtype)
            self._flip_ratios[slot.kernel] = metric

    def _metrics_config(self) -> dict[str, Any]:
        return {"metrics": list(self._metric_names)} if self._metric_names else {}

    @classmethod
    def _resolve_constraints(cls, kwargs: dict[str, Any]) -> None:
        """Let constraint arguments also be ste names such as ``"weight_clip"`` (before Keras sees them)."""
        for slot in cls.slots:
            value = kwargs.get(slot.constraint)
            if isinstance(value, str):
                kwargs[slot.constraint] = ste_constraints.get(value)

    def _set_quantizers(self, input_quantizer: Any, kernel_quantizers: dict[str, Any]) -> None:
        self.input_quantizer = ste_quantizers.get(input_quantizer)
        for slot in self.slots:
            setattr(self, slot.quantizer, ste_quantizers.get(kernel_quantizers.get(slot.quantizer)))
            quantizer = getattr(self, slot.quantizer)
            if isinstance(quantizer, ste_quantizers.LSQ):
                quantizer.sharded = False  # a kernel is the same on every replica (its gradient scale uses its own N)
            if _precision(quantizer) == 1 and getattr(self, slot.constraint, None) is None:
                warnings.warn(
                    f"{type(self).__name__} '{getattr(self, 'name', '')}' has a binary {slot.quantizer} and no "
                    f"{slot.constraint}: its latent weights can drift out of the range where the quantizer's gradient "
                    f"is non-zero and stop learning. Fix: pass {slot.constraint}='weight_clip' "
                    f"(ste.constraints.WeightClip(1.0)).",
                    UserWarning,
                    stacklevel=3,
                )

    def build(self, input_shape: Any) -> None:
        """Build the Keras parent, then the quantizer layers (on the input and kernel shapes)."""
        super().build(input_shape)  # type: ignore[misc]
        self._build_quantizers(input_shape)

    @property
    def quantized_kernel(self) -> tf.Tensor:
        """``kernel_quantizer(kernel)`` (the kernel itself without a quantizer); layers with several kernels
        (``QuantSeparableConv2D``) have ``quantized_kernels`` instead."""
        kernels = self.quantized_kernels
        if "kernel" not in kernels:
            raise AttributeError(
                f"{type(self).__name__} has kernels {sorted(kernels)}, not one 'kernel'; read quantized_kernels."
            )
        return kernels["kernel"]

    def _build_quantizers(self, input_shape: Any) -> None:
        if isinstance(self.input_quantizer, keras.layers.Layer) and not self.input_quantizer.built:
            self.input_quantizer.build(input_shape)
        for slot in self.slots:
            quantizer = getattr(self, slot.quantizer)
            if isinstance(quantizer, keras.layers.Layer) and not quantizer.built:
                quantizer.build(tuple(getattr(self, slot.kernel).shape))
            setattr(getattr(self, slot.kernel), _KERNEL_TAG, (weakref.ref(self), slot.kernel))  # kernel_precision
        self._build_metrics()

    def quantize_inputs(self, inputs: Any) -> Any:
        """The layer's input after its ``input_quantizer`` (unchanged without one)."""
        return inputs if self.input_quantizer is None else self.input_quantizer(inputs)

    def quantize_kernel(self, slot: KernelSlot) -> tf.Tensor:
        """The kernel of ``slot`` after its quantizer (read in the current autocast scope, as Keras reads it)."""
        kernel = getattr(self, slot.kernel)
        if isinstance(kernel, keras.Variable):
            kernel = kernel.value  # read here, in this layer's autocast scope (a quantizer layer clears it)
        quantizer = getattr(self, slot.quantizer)
        quantized = kernel if quantizer is None else quantizer(kernel)
        if self._flip_ratios and ste_metrics.in_training():
            self._flip_ratios[slot.kernel].update_state(quantized)
        return quantized

    @property
    def quantized_kernels(self) -> dict[str, tf.Tensor]:
        """Every kernel after its quantizer, by attribute name (``{"kernel": ...}``); the layer must be built."""
        if not getattr(self, "built", False):
            raise NotBuiltError(
                f"{type(self).__name__} '{getattr(self, 'name', '')}' is not built, so it has no kernel yet. Fix: "
                f"call it on a batch (or build the model) before reading its quantized kernels."
            )
        return {slot.kernel: self.quantize_kernel(slot) for slot in self.slots}

    @property
    def kernel_precisions(self) -> dict[str, int | None]:
        """The bit width of each quantized kernel (``None`` for a float kernel), by attribute name."""
        return {slot.kernel: _precision(getattr(self, slot.quantizer)) for slot in self.slots}

    @property
    def input_precision(self) -> int | None:
        """The bit width of the quantized input (``None`` for a float input)."""
        return _precision(self.input_quantizer)

    def _quantizer_config(self) -> dict[str, Any]:
        config = {"input_quantizer": ste_quantizers.serialize(self.input_quantizer)}
        for slot in self.slots:
            config[slot.quantizer] = ste_quantizers.serialize(getattr(self, slot.quantizer))
        return {**config, **self._metrics_config()}

    def _bias_and_activation(self, outputs: Any, channels: int, rank: int) -> Any:
        """Add the bias (channels-last or -first) and apply the activation, as the Keras conv layers do."""
        if getattr(self, "use_bias", False):
            if getattr(self, "data_format", "channels_last") == "channels_last":
                shape = (1,) * (rank + 1) + (channels,)
            else:
                shape = (1, channels) + (1,) * rank
            outputs = keras.ops.add(outputs, keras.ops.reshape(self.bias, shape))  # type: ignore[attr-defined]
        activation = getattr(self, "activation", None)
        return outputs if activation is None else activation(outputs)
