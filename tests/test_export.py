"""ste.export_quantized_weights: the quantized kernels of every quantized layer, nested models included."""

from __future__ import annotations

import keras
import numpy as np

import ste


def test_exports_quantized_kernels_by_layer_name():
    inner = keras.Sequential(
        [
            keras.Input((4,)),
            ste.layers.QuantDense(3, kernel_quantizer="sign", kernel_constraint="weight_clip", name="binary"),
        ],
        name="inner",
    )
    inputs = keras.Input((4,))
    h = inner(inputs)
    h = keras.layers.Dense(3, name="plain")(h)
    h = ste.layers.QuantDense(2, name="unquantized")(h)
    outputs = ste.layers.QuantDense(2, kernel_quantizer="dorefa(bits=2, mode='weights')", name="dorefa")(h)
    model = keras.Model(inputs, outputs)

    exported = ste.export_quantized_weights(model)
    assert set(exported) == {"inner/binary", "unquantized", "dorefa"}
    latent = inner.get_layer("binary").kernel.numpy()
    np.testing.assert_array_equal(exported["inner/binary"]["kernel"], np.where(latent >= 0, 1.0, -1.0))
    np.testing.assert_array_equal(exported["unquantized"]["kernel"], model.get_layer("unquantized").kernel.numpy())
    assert set(np.round(exported["dorefa"]["kernel"] * 3).ravel()) <= {-3.0, -1.0, 1.0, 3.0}

    as_int = ste.export_quantized_weights(model, dtype="int8")
    assert as_int["inner/binary"]["kernel"].dtype == np.int8
    assert set(as_int["inner/binary"]["kernel"].ravel()) <= {-1, 1}


def test_separable_layers_export_both_kernels():
    layer = ste.layers.QuantSeparableConv2D(
        2,
        3,
        depthwise_quantizer="ternary(threshold=0.1)",
        pointwise_quantizer="sign",
        pointwise_constraint="weight_clip",
    )
    model = keras.Sequential([keras.Input((5, 5, 2)), layer])
    kernels = ste.export_quantized_weights(model)[layer.name]
    assert set(kernels) == {"depthwise_kernel", "pointwise_kernel"}
    dw = layer.depthwise_kernel.numpy()
    np.testing.assert_array_equal(kernels["depthwise_kernel"], np.where(dw >= 0.1, 1, np.where(dw <= -0.1, -1, 0)))
    np.testing.assert_array_equal(layer.quantized_pointwise_kernel.numpy(), kernels["pointwise_kernel"])
