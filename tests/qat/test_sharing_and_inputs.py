"""``ste.quantize_model`` keeps what the float model shares (a layer or a nested model called twice), copies Lambda
layers, and takes the integer inputs the float model took; the numbers against a numpy transcription of the
quantized computation."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

from .helpers import CONVERTS_PER_CHANNEL, L, interpreter, numpy_fake_quant, ops

STEP = 12 / 255  # one step of an activation quantizer still on its initial range [−6, 6]


def weight_levels(w: np.ndarray) -> np.ndarray:
    """The int8 scheme's Dense kernel: symmetric narrow range on ±max|w|, per output channel where TFLite converts
    that, else per tensor (numpy)."""
    m = np.abs(w).max(axis=0) if CONVERTS_PER_CHANNEL else np.abs(w).max()
    return numpy_fake_quant(w, -m, m, narrow_range=True)[0]


def dense_reference(x: np.ndarray, kernel: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Input quantizer (initial [−6, 6]), quantized kernel, bias, output quantizer (initial [−6, 6])."""
    inputs = numpy_fake_quant(x.astype(np.float64), -6.0, 6.0)[0]
    return numpy_fake_quant(inputs @ weight_levels(kernel) + bias, -6.0, 6.0)[0]


def assert_within_one_step(got: np.ndarray, expected: np.ndarray) -> None:
    """Equal but for float rounding, which can move a value sitting on a rounding boundary by one level."""
    difference = np.abs(got - expected)
    assert difference.max() <= STEP * 1.001, difference.max()
    assert np.mean(difference < 1e-5) >= 0.95


def siamese() -> tuple[keras.Model, keras.Model]:
    keras.utils.set_random_seed(3)
    encoder_in = keras.Input((6,))
    encoder = keras.Model(encoder_in, L.Dense(4, activation="relu")(L.Dense(8)(encoder_in)), name="encoder")
    a, b = keras.Input((6,), name="a"), keras.Input((6,), name="b")
    return keras.Model([a, b], L.Concatenate()([encoder(a), encoder(b)])), encoder


def test_a_nested_model_called_twice_stays_one_model_whose_weights_both_branches_share():
    model, encoder = siamese()
    q = ste.quantize_model(model, strict=True)
    nested = [layer for layer in q.layers if isinstance(layer, keras.Model)]
    assert len(nested) == 1 and len(nested[0]._inbound_nodes) == 2  # one encoder, called twice
    assert len(q.layers) == len(model.layers) + 1  # and the concatenation's output quantizer
    assert len(q.trainable_weights) == len(encoder.trainable_weights) == 4  # two kernels and two biases, once
    rng = np.random.default_rng(0)
    xa, xb = rng.normal(size=(16, 6)).astype(np.float32), rng.normal(size=(16, 6)).astype(np.float32)
    before = q.predict([xa, xb], verbose=0)
    first_kernel = nested[0].layers[2].kernel  # input, its quantizer, the first QuantDense
    first_kernel.assign(first_kernel.numpy() * 1.5)  # one weight changes ...
    after = q.predict([xa, xb], verbose=0)
    assert np.any(after[:, :4] != before[:, :4]) and np.any(after[:, 4:] != before[:, 4:])  # ... both branches
    # gradients reach the shared kernel from either branch alone, and add up when both are used
    inputs = [tf.constant(xa), tf.constant(xb)]
    grads = []
    for part in (slice(0, 4), slice(4, 8), slice(0, 8)):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(q(inputs, training=False)[:, part] ** 2)
        grads.append(tape.gradient(loss, first_kernel).numpy())
    assert np.abs(grads[0]).sum() > 0 and np.abs(grads[1]).sum() > 0
    np.testing.assert_allclose(grads[0] + grads[1], grads[2], rtol=1e-5, atol=1e-6)


def test_a_dense_layer_called_twice_is_quantized_once_and_each_call_computes_the_quantized_dense():
    keras.utils.set_random_seed(4)
    dense = L.Dense(3)
    a, b = keras.Input((5,)), keras.Input((5,))
    model = keras.Model([a, b], [dense(a), dense(b)])
    q = ste.quantize_model(model, strict=True)  # a shared layer used to stay float, and strict=True refused it
    quantized = [layer for layer in q.layers if isinstance(layer, ste.layers.QuantDense)]
    assert len(quantized) == 1 and len(quantized[0]._inbound_nodes) == 2
    rng = np.random.default_rng(1)
    xa, xb = rng.normal(size=(32, 5)).astype(np.float32), rng.normal(size=(32, 5)).astype(np.float32)
    out_a, out_b = q.predict([xa, xb], verbose=0)
    kernel, bias = dense.kernel.numpy(), dense.bias.numpy()
    assert_within_one_step(out_a, dense_reference(xa, kernel, bias))
    assert_within_one_step(out_b, dense_reference(xb, kernel, bias))


def plus_one(x):
    """A named function that is not registered with Keras."""
    return x + 1.0


@pytest.mark.parametrize("function", [plus_one, lambda x: x * 2.0], ids=["named", "lambda"])
def test_a_lambda_layer_stays_float_and_keeps_its_function(function):
    keras.utils.set_random_seed(5)
    i = keras.Input((4,))
    hidden = L.Dense(4, name="hidden")(i)
    model = keras.Model(i, L.Dense(2, name="head")(L.Lambda(function, name="fn")(hidden)))
    with pytest.warns(UserWarning, match=r"fn \(Lambda\)"):
        q = ste.quantize_model(model)
    assert q.get_layer("fn").function is function
    x = np.random.default_rng(2).normal(size=(16, 4)).astype(np.float32)
    hidden_q = keras.Model(q.input, q.get_layer("fn").input).predict(x, verbose=0)
    lambda_q = keras.Model(q.input, q.get_layer("fn").output).predict(x, verbose=0)
    np.testing.assert_allclose(lambda_q, function(hidden_q.astype(np.float64)), rtol=1e-6)


def test_an_integer_feature_input_is_cast_then_quantized_as_the_float_dense_promotes_it():
    keras.utils.set_random_seed(6)
    i = keras.Input((4,), dtype="int32")
    model = keras.Model(i, L.Dense(3)(i))
    # k ≡ 2 (mod 4) lies exactly halfway between two levels of [−6, 6] (k/step = 21.25·k): float32 and the float64
    # reference round such ties differently, so the values avoid them
    x = np.random.default_rng(3).choice([-5, -4, -3, -1, 0, 1, 3, 4, 5], size=(32, 4)).astype(np.int32)
    model.predict(x, verbose=0)  # the float model takes it
    q = ste.quantize_model(model, strict=True)
    assert q.inputs[0].dtype == "int32"
    dense = model.layers[-1]
    assert_within_one_step(q.predict(x, verbose=0), dense_reference(x, dense.kernel.numpy(), dense.bias.numpy()))


def test_embedding_indices_are_not_cast():
    i = keras.Input((5,), dtype="int32")
    model = keras.Model(i, L.Dense(2)(L.Flatten()(L.Embedding(10, 3)(i))))
    q = ste.quantize_model(model, strict=True)
    assert not any(isinstance(layer, L.Rescaling) for layer in q.layers)
    embedding = next(layer for layer in q.layers if isinstance(layer, ste.qat.QuantEmbedding))
    assert embedding.input.dtype == "int32"


def test_a_shared_folded_encoder_and_a_shared_head_convert_to_int8_and_match_keras():
    keras.utils.set_random_seed(7)
    encoder_in = keras.Input((8, 8, 3))
    x = L.ReLU()(L.BatchNormalization()(L.Conv2D(4, 3, use_bias=False)(encoder_in)))
    encoder = keras.Model(encoder_in, L.GlobalAveragePooling2D()(x), name="encoder")
    head = L.Dense(3, name="head")
    a, b = keras.Input((8, 8, 3), name="a"), keras.Input((8, 8, 3), name="b")
    q = ste.quantize_model(keras.Model([a, b], L.Concatenate()([head(encoder(a)), head(encoder(b))])), strict=True)
    assert [type(layer).__name__ for layer in q.get_layer("encoder").layers][2] == "FoldedConv2D"
    rng = np.random.default_rng(8)
    xa, xb = rng.uniform(0, 1, (32, 8, 8, 3)).astype(np.float32), rng.uniform(0, 1, (32, 8, 8, 3)).astype(np.float32)
    q.compile("adam", "mse")
    q.fit([xa, xb], rng.normal(size=(32, 6)), epochs=2, verbose=0)
    flatbuffer = ste.to_tflite(q)
    names = [name for name, _, _ in ops(flatbuffer)]
    assert names.count("CONV_2D") == 2 and names.count("FULLY_CONNECTED") == 2  # one op per call, int8
    for name, inputs, outputs in ops(flatbuffer):
        if name in ("CONV_2D", "FULLY_CONNECTED"):
            assert inputs[:2] == ["int8", "int8"] and outputs == ["int8"]
    it = interpreter(flatbuffer)
    slots = {detail["name"].split("_")[-1].split(":")[0]: detail["index"] for detail in it.get_input_details()}
    lite = []
    for row in range(8):
        it.set_tensor(slots["a"], xa[row : row + 1])
        it.set_tensor(slots["b"], xb[row : row + 1])
        it.invoke()
        lite.append(it.get_tensor(it.get_output_details()[0]["index"]))
    quantizer = q.layers[-2]  # the concatenation's range: its inputs and its output
    step = float(ste.qat.nudged_range(quantizer.min, quantizer.max, bits=8, narrow_range=False)[2])
    assert np.abs(np.concatenate(lite) - q.predict([xa[:8], xb[:8]], verbose=0)).max() <= step * 1.001
