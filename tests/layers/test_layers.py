"""Each quantized layer computes exactly its Keras parent on the quantized input and the quantized kernel."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
from ste.layers import (
    QuantConv1D,
    QuantConv1DTranspose,
    QuantConv2D,
    QuantConv2DTranspose,
    QuantConv3D,
    QuantConv3DTranspose,
    QuantDense,
    QuantDepthwiseConv2D,
    QuantSeparableConv1D,
    QuantSeparableConv2D,
)
from tests.helpers import run_or_skip_like_parent

QUANT_KEYS = ("input_quantizer", "kernel_quantizer", "depthwise_quantizer", "pointwise_quantizer", "pad_values")

CASES = [
    (QuantDense, keras.layers.Dense, dict(units=5, activation="tanh", kernel_quantizer="sign"), (4, 7)),
    (QuantDense, keras.layers.Dense, dict(units=3, kernel_quantizer="dorefa(bits=2, mode='weights')"), (2, 3, 6)),
    (
        QuantConv1D,
        keras.layers.Conv1D,
        dict(filters=4, kernel_size=3, padding="causal", dilation_rate=2, kernel_quantizer="ste_tern"),
        (2, 9, 3),
    ),
    (QuantConv1D, keras.layers.Conv1D, dict(filters=4, kernel_size=2, strides=2, kernel_quantizer="sign"), (2, 8, 3)),
    (
        QuantConv2D,
        keras.layers.Conv2D,
        dict(
            filters=6,
            kernel_size=3,
            padding="same",
            activation="relu",
            groups=2,
            kernel_quantizer="magnitude_aware_sign",
        ),
        (2, 5, 5, 4),
    ),
    (
        QuantDepthwiseConv2D,
        keras.layers.DepthwiseConv2D,
        dict(kernel_size=3, depth_multiplier=2, kernel_quantizer="uniform(bits=3)"),
        (2, 6, 6, 3),
    ),
    (
        QuantSeparableConv2D,
        keras.layers.SeparableConv2D,
        dict(filters=4, kernel_size=2, depthwise_quantizer="sign", pointwise_quantizer="ternary(threshold=0.2)"),
        (2, 5, 5, 3),
    ),
    (
        QuantConv3D,
        keras.layers.Conv3D,
        dict(filters=4, kernel_size=(2, 3, 2), strides=(1, 2, 1), padding="same", groups=2, kernel_quantizer="sign"),
        (2, 4, 5, 3, 4),
    ),
    (
        QuantConv1DTranspose,
        keras.layers.Conv1DTranspose,
        dict(filters=3, kernel_size=3, strides=2, output_padding=1, activation="relu", kernel_quantizer="ste_tern"),
        (2, 6, 4),
    ),
    (
        QuantConv2DTranspose,
        keras.layers.Conv2DTranspose,
        dict(filters=4, kernel_size=3, strides=2, padding="same", kernel_quantizer="sign"),
        (2, 4, 5, 3),
    ),
    (
        QuantConv2DTranspose,
        keras.layers.Conv2DTranspose,
        dict(filters=2, kernel_size=2, dilation_rate=2, kernel_quantizer="dorefa(bits=2, mode='weights')"),
        (2, 4, 4, 3),
    ),
    (
        QuantConv3DTranspose,
        keras.layers.Conv3DTranspose,
        dict(filters=2, kernel_size=2, strides=(1, 2, 2), kernel_quantizer="magnitude_aware_sign"),
        (2, 3, 3, 4, 2),
    ),
    (
        QuantSeparableConv1D,
        keras.layers.SeparableConv1D,
        dict(
            filters=5,
            kernel_size=3,
            strides=2,
            depth_multiplier=2,
            padding="same",
            depthwise_quantizer="sign",
            pointwise_quantizer="ternary(threshold=0.2)",
        ),
        (2, 9, 3),
    ),
]


def parent_of(layer, parent_cls):
    """A float Keras parent layer with the quantized layer's configuration and its quantized kernels as weights."""
    config = {k: v for k, v in layer.get_config().items() if k not in QUANT_KEYS}
    config["name"] = layer.name + "_parent"
    parent = parent_cls.from_config(config)
    return parent


@pytest.mark.filterwarnings("ignore:.*has a binary")
@pytest.mark.parametrize(("cls", "parent_cls", "kwargs", "shape"), CASES, ids=lambda v: getattr(v, "__name__", None))
def test_layer_equals_parent_on_quantized_input_and_kernel(cls, parent_cls, kwargs, shape):
    keras.utils.set_random_seed(1)
    layer = cls(**kwargs, input_quantizer="ste_sign", bias_initializer="random_normal")
    x = tf.constant(np.random.default_rng(0).normal(size=shape), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = run_or_skip_like_parent(lambda: layer(x), lambda: parent_of(layer, parent_cls)(tf.sign(x)))
    dx = tape.gradient(y, x)

    parent = parent_of(layer, parent_cls)
    xq = tf.sign(tf.sign(x) + 0.1)  # the input quantizer's values, written independently
    parent.build(x.shape)
    quantized = layer.quantized_kernels
    kernels = [
        tf.constant(quantized[w.name if w.name in quantized else "kernel"])
        for w in parent.weights
        if "kernel" in w.name
    ]
    assert len(kernels) == len(layer.slots)
    parent.set_weights([*(k.numpy() for k in kernels), *(w.numpy() for w in layer.weights if w.name == "bias")])
    with tf.GradientTape() as tape:
        tape.watch(xq)
        expected = parent(xq)
    dxq = tape.gradient(expected, xq)
    np.testing.assert_allclose(y.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)
    # the input gradient is the parent's, passed through the input quantizer's clipped straight-through rule
    np.testing.assert_allclose(dx.numpy(), dxq.numpy() * (np.abs(x.numpy()) <= 1.0), rtol=1e-5, atol=1e-5)


def test_kernel_gradient_goes_through_the_kernel_quantizer():
    layer = QuantDense(3, kernel_quantizer="sign", kernel_constraint="weight_clip", use_bias=False)
    x = tf.constant(np.random.default_rng(2).normal(size=(4, 5)), tf.float32)
    layer.build(x.shape)
    layer.kernel.assign(np.linspace(-1.5, 1.5, 15).reshape(5, 3))
    with tf.GradientTape() as tape:
        y = layer(x)
    (dk,) = tape.gradient(y, [layer.kernel])
    # y = x @ sign(W): d(sum y)/dW_ij = sum_b x_bi, masked where abs(W) > 1 by the straight-through clip
    expected = np.repeat(np.sum(x.numpy(), axis=0)[:, None], 3, axis=1) * (np.abs(layer.kernel.numpy()) <= 1.0)
    np.testing.assert_allclose(dk.numpy(), expected, rtol=1e-5)
    np.testing.assert_array_equal(layer.quantized_kernel.numpy(), np.where(layer.kernel.numpy() >= 0, 1, -1))


def test_binary_kernel_without_constraint_warns_and_weight_clip_silences_it():
    with pytest.warns(UserWarning, match="kernel_constraint='weight_clip'"):
        QuantDense(3, kernel_quantizer="ste_sign").build((None, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        QuantDense(3, kernel_quantizer="ste_sign", kernel_constraint="weight_clip").build((None, 4))
        QuantDense(3, kernel_quantizer="dorefa(bits=4, mode='weights')").build((None, 4))  # multi-bit: no warning
        separable = QuantSeparableConv2D(2, 3, depthwise_quantizer="sign", depthwise_constraint="weight_clip")
        separable.build((None, 5, 5, 2))


def test_weight_clip_clips_after_each_optimizer_step():
    clip = ste.constraints.WeightClip(0.5)
    np.testing.assert_array_equal(clip(tf.constant([-2.0, -0.5, 0.125, 0.7])).numpy(), [-0.5, -0.5, 0.125, 0.5])
    assert ste.constraints.get("weight_clip(clip_value=0.25)").clip_value == 0.25
    layer = QuantDense(2, kernel_quantizer="sign", kernel_constraint="weight_clip", kernel_initializer="ones")
    model = keras.Sequential([keras.Input((3,)), layer])
    model.compile(keras.optimizers.SGD(10.0), "mse")
    model.fit(np.ones((4, 3)), -100 * np.ones((4, 2)), verbose=0, epochs=1)
    assert np.max(np.abs(layer.kernel.numpy())) <= 1.0
    with pytest.raises(ste.errors.ParameterError):
        ste.constraints.WeightClip(0)


def test_quantized_kernels_before_build_raise():
    with pytest.raises(ste.errors.NotBuiltError, match="not built"):
        _ = QuantDense(2, kernel_quantizer="sign", kernel_constraint="weight_clip").quantized_kernel


def test_layer_config_round_trip():
    layer = QuantConv2D(
        3,
        2,
        input_quantizer="sign(surrogate='approx_sign')",
        kernel_quantizer="lsq(bits=3)",
        kernel_constraint="weight_clip(clip_value=0.5)",
    )
    restored = QuantConv2D.from_config(layer.get_config())
    assert restored.input_quantizer.surrogate.name == "approx_sign"
    assert isinstance(restored.kernel_quantizer, ste.quantizers.LSQ) and restored.kernel_quantizer.bits == 3
    assert restored.kernel_constraint.clip_value == 0.5


def test_separable_layer_has_no_single_quantized_kernel() -> None:
    layer = QuantSeparableConv2D(2, 3, depthwise_quantizer="sign", pointwise_quantizer="sign")
    layer(np.zeros((1, 5, 5, 3), np.float32))
    assert set(layer.quantized_kernels) == {"depthwise_kernel", "pointwise_kernel"}
    with pytest.raises(AttributeError, match="quantized_kernels"):
        _ = layer.quantized_kernel
