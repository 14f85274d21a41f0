"""Real int8 deployment: the stock TFLite converter turns a quantize_model'd network into int8 kernels that compute
what the Keras QAT model computes (LiteRT's reference kernels; ``tf.lite.Interpreter`` without ai-edge-litert)."""

from __future__ import annotations

import logging

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

from .helpers import CONVERTS_PER_CHANNEL, data, ops, residual_net, run

INT8_KERNELS = {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"}


def output_step(model: keras.Model) -> float:
    last = model.layers[-1]
    assert isinstance(last, ste.qat.ActivationFakeQuant)
    return float(ste.qat.nudged_range(last.min, last.max, bits=8, narrow_range=False)[2])


def assert_int8(flatbuffer: bytes) -> list[str]:
    found = ops(flatbuffer)
    names = [name for name, _, _ in found]
    for name, inputs, outputs in found:
        if name in INT8_KERNELS:
            assert inputs[:2] == ["int8", "int8"] and outputs == ["int8"], (name, inputs, outputs)
    # quantize/dequantize only at the float input and output
    assert names.count("QUANTIZE") == 1 and names[0] == "QUANTIZE"
    assert names.count("DEQUANTIZE") == 1 and names[-1] == "DEQUANTIZE"
    return names


@pytest.fixture(scope="module")
def trained() -> keras.Model:
    x, y = data(256)
    q = ste.quantize_model(residual_net())
    q.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    q.fit(x, y, epochs=3, batch_size=32, verbose=0)
    return q


def test_every_kernel_is_int8_and_outputs_match_keras(trained):
    flatbuffer = ste.to_tflite(trained)
    names = assert_int8(flatbuffer)
    assert INT8_KERNELS <= set(names) and "CONCATENATION" in names and "ADD" in names
    x, _ = data(64, seed=1)
    lite, keras_out = run(flatbuffer, x), trained.predict(x, verbose=0)
    within = np.abs(lite - keras_out) <= output_step(trained) * 1.001
    assert within.mean() >= 0.99, within.mean()


def test_export_and_stock_converter_give_the_same(trained, tmp_path):
    """The documented path, ``model.export`` then the stock converter, gives int8 kernels, and the very flatbuffer
    ``ste.to_tflite`` makes (which leaves the training-only gradient functions out of its SavedModel). The Dense
    kernel is per output channel where TFLite takes that: the converter takes it in its QDQ mode "STATIC" (its
    default path refuses it); before TensorFlow 2.20 the kernel is per tensor and the default path converts it."""
    import tensorflow as tf

    trained.export(str(tmp_path / "model"), verbose=False)
    converter = tf.lite.TFLiteConverter.from_saved_model(str(tmp_path / "model"))
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if CONVERTS_PER_CHANNEL:
        with pytest.raises(Exception, match="mismatched quantized axes"):
            converter.convert()
        converter._experimental_qdq_conversion_mode = "STATIC"
    stock = bytes(converter.convert())
    assert_int8(stock)
    assert stock == ste.to_tflite(trained)


def test_int8_io_has_no_float_edges(trained):
    found = ops(ste.to_tflite(trained, int8_io=True))
    assert all(name not in ("QUANTIZE", "DEQUANTIZE") for name, _, _ in found)
    assert found[0][1][0] == "int8" and found[-1][2] == ["int8"]


def test_conv1d_separable_conv1d_and_global_average_pooling_convert_to_int8():
    i = keras.Input((16, 3))
    x = keras.layers.Conv1D(8, 3, activation="relu")(i)
    x = keras.layers.SeparableConv1D(6, 3, depth_multiplier=2, padding="same")(x)
    x = keras.layers.GlobalAveragePooling1D()(x)
    q = ste.quantize_model(keras.Model(i, keras.layers.Dense(4)(x)), strict=True)
    x = np.random.default_rng(0).uniform(-1, 1, (32, 16, 3)).astype(np.float32)
    q(x, training=True)
    flatbuffer = ste.to_tflite(q)
    names = assert_int8(flatbuffer)
    assert {"MEAN", "FULLY_CONNECTED"} <= set(names)
    assert names.count("CONV_2D") == 2 and names.count("DEPTHWISE_CONV_2D") == 1
    # int8 kernels against the fake-quant graph: within one output step, except where an intermediate value sits on
    # a rounding boundary and the float kernels' summation order (oneDNN on or off) rounds it the other way: then
    # that one step of an inner layer shows as two at the output
    steps = np.abs(run(flatbuffer, x) - q.predict(x, verbose=0)) / output_step(q)
    assert steps.max() <= 2.001
    assert (steps <= 1.001).mean() >= 0.95


def test_to_tflite_refuses_a_non_model():
    with pytest.raises(ste.errors.ParameterError):
        ste.to_tflite("model.keras")


def test_mobilenet_v2_converts_end_to_end():
    # alpha=0.35 narrows every layer and keeps all of them: the layer kinds and counts below are MobileNetV2's
    model = keras.applications.MobileNetV2(weights=None, input_shape=(32, 32, 3), alpha=0.35, classes=10)
    q = ste.quantize_model(model, strict=True)
    x = np.random.default_rng(0).uniform(-1, 1, (8, 32, 32, 3)).astype(np.float32)
    q(x, training=True)  # one step of range statistics
    found = ops(ste.to_tflite(q))
    names = [name for name, _, _ in found]
    keras_kinds = [type(layer).__name__ for layer in model.layers]
    assert names.count("CONV_2D") == keras_kinds.count("Conv2D") == 35
    assert names.count("DEPTHWISE_CONV_2D") == keras_kinds.count("DepthwiseConv2D") == 17
    assert names.count("FULLY_CONNECTED") == 1
    for name, inputs, outputs in found:
        if name in INT8_KERNELS:
            assert inputs[:2] == ["int8", "int8"] and outputs == ["int8"], (name, inputs, outputs)
    assert names.count("QUANTIZE") == 1 and names.count("DEQUANTIZE") == 1


def test_separable_convolutions_run_as_int8_depthwise_then_conv():
    i = keras.Input((8, 8, 3))
    x = keras.layers.SeparableConv2D(8, 3, padding="same", depth_multiplier=2, activation="relu")(i)
    x = keras.layers.SeparableConv2D(6, 3, strides=2)(x)
    q = ste.quantize_model(keras.Model(i, keras.layers.Dense(4)(keras.layers.Flatten()(x))), strict=True)
    assert [type(layer).__name__ for layer in q.layers].count("SplitSeparableConv2D") == 2
    x = np.random.default_rng(0).uniform(-1, 1, (32, 8, 8, 3)).astype(np.float32)
    q(x, training=True)
    flatbuffer = ste.to_tflite(q)
    names = assert_int8(flatbuffer)
    # each separable convolution is two int8 kernels: TFLite has no separable one
    assert names.count("DEPTHWISE_CONV_2D") == 2 and names.count("CONV_2D") == 2
    within = np.abs(run(flatbuffer, x) - q.predict(x, verbose=0)) <= output_step(q) * 1.001
    assert within.mean() >= 0.99


def test_conv2d_transpose_converts_to_int8_transpose_conv():
    i = keras.Input((4, 4, 3))
    # no bias: a ReLU fused into a bias-free transposed convolution made the converter keep both float
    x = keras.layers.Conv2DTranspose(8, 3, strides=2, padding="same", use_bias=False, activation="relu")(i)
    x = keras.layers.Conv2DTranspose(4, 3, bias_initializer="ones")(x)
    q = ste.quantize_model(keras.Model(i, x), strict=True)
    x = np.random.default_rng(0).uniform(-1, 1, (16, 4, 4, 3)).astype(np.float32)
    q(x, training=True)
    flatbuffer = ste.to_tflite(q)
    found = ops(flatbuffer)
    names = [name for name, _, _ in found]
    assert names.count("TRANSPOSE_CONV") == 2 and names.count("RELU") == 1
    for name, inputs, outputs in found:
        if name == "TRANSPOSE_CONV":  # (output shape, filter, input[, bias])
            assert inputs[1:3] == ["int8", "int8"] and outputs == ["int8"], (inputs, outputs)
        if name == "RELU":
            assert inputs == outputs == ["int8"]
    assert names.count("QUANTIZE") == 1 and names.count("DEQUANTIZE") == 1
    within = np.abs(run(flatbuffer, x) - q.predict(x, verbose=0)) <= output_step(q) * 1.001
    assert within.mean() >= 0.99


def small_net() -> keras.Model:
    """Conv+BN+ReLU (folded), Dense: the smallest model with both int8 kernels."""
    i = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(8, 3, use_bias=False)(i)
    x = keras.layers.ReLU()(keras.layers.BatchNormalization()(x))
    return keras.Model(i, keras.layers.Dense(10)(keras.layers.Flatten()(x)))


def test_a_mixed_float16_model_trains_and_converts_to_the_same_int8_kernels():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        q = ste.quantize_model(small_net(), strict=True)
        q.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        x, y = data(64)
        history = q.fit(x, y, epochs=1, batch_size=32, verbose=0)
        mixed_out = q.predict(x, verbose=0)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert np.isfinite(history.history["loss"]).all()
    assert mixed_out.dtype == np.float16  # the outputs in the compute dtype; the ranges stay float32 variables
    assert q.layers[1].min.dtype == "float32" and float(q.layers[1].min.numpy()) > -6.0
    flatbuffer = ste.to_tflite(q)  # exported as a float32 copy: the converter reads only float32 fake-quant ops
    assert {"CONV_2D", "FULLY_CONNECTED"} <= set(assert_int8(flatbuffer))
    # the int8 model computes what the trained weights compute in float32 (float16 arithmetic moved some
    # activations to a neighbouring level: up to 2 output steps, measured)
    float32 = ste.quantize_model(small_net())
    float32(x[:1])
    float32.set_weights(q.get_weights())
    keras_out = float32.predict(x, verbose=0)
    within = np.abs(run(flatbuffer, x) - keras_out) <= output_step(q) * 1.001
    assert within.mean() >= 0.99, within.mean()
    assert np.abs(mixed_out.astype(np.float32) - keras_out).max() <= 3 * output_step(q)


UNSAVED_GRADIENTS = "with ops with unsaved custom gradients"  # TensorFlow: "... Will likely fail if a gradient ..."


def test_conversion_logs_no_unsaved_gradients_notice(tmp_path, caplog, capfd):
    """ste.to_tflite exports without the gradient functions on purpose and the converter never asks for a gradient:
    TensorFlow's notice that loading such a function "will likely fail if a gradient is requested" must not reach
    the user. The control: loading that very SavedModel with ``tf.saved_model.load`` logs the notice, so the
    capture (Python logging and the process's stderr) would see it."""
    from ste.qat._api import _export_for_inference

    model = ste.quantize_model(keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)]))
    caplog.set_level(logging.WARNING)
    ste.to_tflite(model)
    assert UNSAVED_GRADIENTS not in caplog.text + capfd.readouterr().err
    _export_for_inference(model, str(tmp_path / "saved"))
    tf.saved_model.load(str(tmp_path / "saved"))
    assert UNSAVED_GRADIENTS in caplog.text + capfd.readouterr().err
    for name in ("absl", "tensorflow"):  # the filter is gone after the conversion
        assert not logging.getLogger(name).filters, name
