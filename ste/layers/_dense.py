"""``QuantDense``: ``keras.layers.Dense`` with an input quantizer and a kernel quantizer."""

from __future__ import annotations

from typing import Any

import keras

from ._base import KernelSlot, QuantLayerMixin

__all__ = ["QuantDense"]


@keras.saving.register_keras_serializable(package="ste")
class QuantDense(QuantLayerMixin, keras.layers.Dense):  # type: ignore[misc]
    """``keras.layers.Dense`` computing ``activation(input_quantizer(x) @ kernel_quantizer(kernel) + bias)``.

    Takes every argument of ``keras.layers.Dense`` plus ``input_quantizer`` and ``kernel_quantizer`` (a quantizer
    name or spec string such as ``"sign"`` or ``"ste_sign"``, a ``ste.quantizers`` layer, a config dict, a callable,
    or ``None`` for no quantization). ``kernel_constraint`` also accepts ``"weight_clip"``. The latent kernel stays in
    ``layer.kernel``; the quantized one is ``layer.quantized_kernel``.
    """

    slots = (KernelSlot("kernel_quantizer", "kernel", "kernel_constraint"),)

    def call(self, inputs: Any, training: Any = None) -> Any:
        x = self.apply_to_quantized_input(
            keras.ops.matmul, self.quantize_inputs(inputs), [self.quantize_kernel(self.slots[0])]
        )
        if self.bias is not None:
            x = keras.ops.add(x, self.bias)
        if self.activation is not None:
            x = self.activation(x)
        return x
