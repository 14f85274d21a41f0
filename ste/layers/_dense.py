"""``QuantDense``: ``keras.layers.Dense`` with an input quantizer and a kernel quantizer.

On an input of rank > 2 the product is one 2-D matmul on the flattened rows, the bias added before the rows are
reshaped back (the same numbers as Keras's N-D matmul): the TFLite converter then fuses the bias into one
FULLY_CONNECTED whose output range is the layer's, where after an N-D matmul it kept the kernel float
(:func:`flat_matmul`, also used by ``ste.qat.QuantEinsumDense``).
"""

from __future__ import annotations

import math
from typing import Any

import keras
import tensorflow as tf

from ._base import KernelSlot, QuantLayerMixin

__all__ = ["QuantDense", "flat_matmul", "unflatten"]


def flat_matmul(x: Any, kernel: Any, contracted: int) -> Any:
    """The last ``contracted`` axes of ``x`` times the first ``contracted`` axes of ``kernel``, as one 2-D matmul:
    rows (the product of ``x``'s other axes) × the product of ``kernel``'s other axes."""
    inner = math.prod(kernel.shape[:contracted])
    rows = keras.ops.reshape(x, (-1, inner))
    return keras.ops.matmul(rows, keras.ops.reshape(kernel, (inner, -1)))


def unflatten(y: Any, x: Any, contracted: int, out_shape: tuple[int, ...]) -> Any:
    """``flat_matmul``'s rows back to ``x``'s leading axes followed by ``out_shape`` (static sizes kept)."""
    lead = list(x.shape[: x.shape.rank - contracted])
    if lead.count(None) <= 1:  # -1 for the batch: the static sizes stay known while Keras builds the model
        return keras.ops.reshape(y, tuple(-1 if size is None else size for size in lead) + tuple(out_shape))
    dynamic = tf.shape(x)
    shape = [size if size is not None else dynamic[i] for i, size in enumerate(lead)]
    return tf.reshape(y, [*shape, *out_shape])


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
