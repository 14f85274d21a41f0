"""``QuantDense``: ``keras.layers.Dense`` with an input quantizer and a kernel quantizer.

On an input of rank > 2 the product is one 2-D matmul on the flattened rows, the bias added before the rows are
reshaped back (the same numbers as Keras's N-D matmul): the TFLite converter then fuses the bias into one
FULLY_CONNECTED whose output range is the layer's, where after an N-D matmul it kept the kernel float
(``ste._keras._matmul``, also used by ``ste.qat.QuantEinsumDense``).
"""

from __future__ import annotations

from typing import Any

import keras

from .._keras._matmul import flat_matmul, unflatten
from ._base import KernelSlot, QuantLayerMixin

__all__ = ["QuantDense"]


@keras.saving.register_keras_serializable(package="ste")
class QuantDense(QuantLayerMixin, keras.layers.Dense):  # type: ignore[misc]
    """``keras.layers.Dense`` computing ``activation(input_quantizer(x) @ kernel_quantizer(kernel) + bias)``.

    Takes every argument of ``keras.layers.Dense`` plus ``input_quantizer`` and ``kernel_quantizer`` (a quantizer
    name or spec string such as ``"sign"`` or ``"ternary"``, a ``ste.quantizers`` layer, a config dict, a callable,
    or ``None`` for no quantization). ``kernel_constraint`` also accepts ``"weight_clip"``. The latent kernel stays in
    ``layer.kernel``; the quantized one is ``layer.quantized_kernel``.
    """

    slots = (KernelSlot("kernel_quantizer", "kernel", "kernel_constraint"),)

    def call(self, inputs: Any, training: Any = None) -> Any:
        quantized = self.quantize_inputs(inputs)
        kernel = self.quantize_kernel(self.slots[0])
        rank = getattr(getattr(quantized, "shape", None), "rank", None)
        flat = rank is not None and rank > 2  # one 2-D product, bias added before the reshape (module docstring)
        product = (lambda x, k: flat_matmul(x, k, 1)) if flat else keras.ops.matmul
        x = self.apply_to_quantized_input(product, quantized, [kernel])
        if self.bias is not None:
            x = keras.ops.add(x, self.bias)
        if flat:
            x = unflatten(x, quantized, 1, (self.units,))
        if self.activation is not None:
            x = self.activation(x)
        return x
