"""A low-bit layer that a non-negative activation feeds (a ReLU, sigmoid, softmax ...): ``ste_sign`` of its input
would be all +1, so the binary scheme keeps that input at 8 bits (with a warning, or an error under
``strict=True``); the ternary scheme's 8-bit absmax input keeps the values. Checked against numpy, against what
the graph's signs are by hand, and by training."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

from .helpers import L, interpreter, numpy_fake_quant

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.deploy_size import flatbuffer_ops  # noqa: E402

MESSAGE = "non-negative activation feeds them"


def dense_net(middle_input: keras.layers.Layer | None = None) -> keras.Model:
    """Dense(relu) [8-bit first] → Dense 'b1' [binary] → Dense 'head' [8-bit last]; ``middle_input`` between the
    first two (the first layer's ReLU when None)."""
    keras.utils.set_random_seed(1)
    i = keras.Input((6,))
    h = L.Dense(16, activation="relu", name="first")(i)
    if middle_input is not None:
        h = middle_input(h)
    h = L.Dense(12, name="b1")(h)
    return keras.Model(i, L.Dense(3, name="head")(h))


def conv_net(classes: int = 4) -> keras.Model:
    """The reproduction's shape: Conv2D(relu) → Conv2D(relu) → pooling → Dense(relu) → Dense head."""
    keras.utils.set_random_seed(2)
    i = keras.Input((8, 8, 1))
    h = L.Conv2D(8, 3, padding="same", activation="relu", name="first")(i)
    h = L.Conv2D(8, 3, padding="same", name="b1")(h)
    h = L.ReLU(name="relu_b1")(h)
    h = L.MaxPooling2D(name="pool")(h)
    h = L.Flatten(name="flat")(h)
    h = L.Dense(16, activation="relu", name="b2")(h)
    return keras.Model(i, L.Dense(classes, name="head")(h))


def quantize_quietly(model: keras.Model, scheme: object = "binary", **kwargs: object) -> keras.Model:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ste.quantize_model(model, scheme=scheme, **kwargs)


def input_of(model: keras.Model, name: str, x: np.ndarray) -> np.ndarray:
    """What the float graph of ``model`` feeds layer ``name`` (before its own input quantizer)."""
    return keras.ops.convert_to_numpy(keras.Model(model.inputs, model.get_layer(name).input)(x))


def toy_task(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Four classes of 8×8 images: the brighter quadrant is the label (noise elsewhere)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 4, n)
    x = rng.normal(0.0, 0.3, (n, 8, 8, 1)).astype(np.float32)
    for k, (r, c) in enumerate([(0, 0), (0, 4), (4, 0), (4, 4)]):
        x[y == k, r : r + 4, c : c + 4, 0] += 1.0
    return x, y


def test_binary_layer_after_relu_gets_an_8_bit_input_and_computes_it_with_its_sign_kernel():
    model = dense_net()
    q = quantize_quietly(model)
    x = np.random.default_rng(0).normal(size=(32, 6)).astype(np.float32)
    layer = q.get_layer("b1")
    assert isinstance(layer.input_quantizer, ste.qat.ActivationFakeQuant)
    assert isinstance(layer.kernel_quantizer, ste.quantizers.Sign)
    h = input_of(q, "b1", x).astype(np.float64)
    assert h.min() >= 0.0 and h.max() > 0.0
    # numpy of what the layer computes: TensorFlow's fake quantization on the layer's range, then the ±1 kernel
    low, high = float(layer.input_quantizer.min.numpy()), float(layer.input_quantizer.max.numpy())
    hq, _, _ = numpy_fake_quant(h, low, high)
    w = layer.kernel.numpy().astype(np.float64)
    want = hq @ np.where(w >= 0, 1.0, -1.0) + layer.bias.numpy()
    got = keras.ops.convert_to_numpy(layer(h.astype(np.float32), training=False))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    quantized = keras.ops.convert_to_numpy(layer.input_quantizer(h.astype(np.float32), training=False))
    assert len(np.unique(quantized)) > 10  # sign would give one value: +1
    assert np.unique(np.where(h >= 0, 1.0, -1.0)).tolist() == [1.0]  # what ste_sign would have seen


def test_one_warning_names_the_layers_and_the_fix():
    with pytest.warns(UserWarning) as record:
        ste.quantize_model(conv_net(), scheme="binary")
    ours = [str(w.message) for w in record if MESSAGE in str(w.message)]
    assert len(ours) == 1
    text = ours[0]
    assert "'b1' (after 'first' (relu))" in text and "'b2' (after 'relu_b1' (relu))" in text
    assert "Sign" in text and "8 bits" in text and "kernel stays binary" in text
    assert "BatchNormalization" in text and "hard_tanh" in text and "strict=True" in text
    assert "'first'" not in text.split("feeds them:")[1].split("(after")[0]  # the 8-bit first layer is not named


def test_strict_raises_before_anything_is_built_and_leaves_the_model_unchanged():
    built: list[str] = []

    class Spy(ste.qat.BinaryScheme):
        def quantize(self, layer, batch_norm, activation):  # type: ignore[no-untyped-def]
            built.append(layer.name)
            return super().quantize(layer, batch_norm, activation)

    model = conv_net()
    before = [w.copy() for w in model.get_weights()]
    with pytest.raises(ste.errors.UnsupportedLayerError) as caught:
        ste.quantize_model(model, scheme=Spy(), strict=True)
    assert isinstance(caught.value, ste.STEError) and isinstance(caught.value, ValueError)
    text = str(caught.value)
    assert "strict=True" in text and "'b1'" in text and "'b2'" in text and "BatchNormalization" in text
    assert "strict=False" in text
    assert built == []
    for old, new in zip(before, model.get_weights()):
        np.testing.assert_array_equal(old, new)
    with warnings.catch_warnings():  # a BatchNormalization in between: nothing to refuse, no warning
        warnings.simplefilter("error")
        ste.quantize_model(dense_net(L.BatchNormalization()), scheme="binary", strict=True)


class _SignAfterRelu(ste.qat.BinaryScheme):
    """The behaviour before the fix: sign of every low-bit input, whatever feeds it."""

    def adapt_input(self, layer, feed):  # type: ignore[no-untyped-def]
        return None


def _trained_accuracy(scheme: object) -> float:
    x, y = toy_task(512, seed=3)
    xt, yt = toy_task(512, seed=4)
    model = conv_net()
    q = quantize_quietly(model, scheme)
    keras.utils.set_random_seed(5)
    q.compile(keras.optimizers.Adam(3e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    q.fit(x, y, batch_size=32, epochs=6, verbose=0)
    return float(np.mean(np.argmax(keras.ops.convert_to_numpy(q(xt, training=False)), axis=-1) == yt))


def test_a_tiny_binary_net_with_relus_learns_above_chance():
    assert _trained_accuracy("binary") > 0.6  # chance: 0.25 (balanced classes)
    # control: with sign inputs after the ReLUs the output does not depend on the image
    x, _ = toy_task(64, seed=6)
    q = quantize_quietly(conv_net(), _SignAfterRelu())
    assert np.unique(keras.ops.convert_to_numpy(q.get_layer("b1").input_quantizer(input_of(q, "b1", x)))).size == 1
    out = keras.ops.convert_to_numpy(q(x, training=False))
    np.testing.assert_allclose(out, np.broadcast_to(out[:1], out.shape), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("between", "adapted"),
    [
        (None, True),  # Dense(activation="relu")
        (L.Activation("sigmoid"), True),
        (L.Softmax(), True),
        (L.ReLU(max_value=6.0), True),
        (keras.Sequential([L.Dropout(0.1), L.Reshape((4, 4)), L.Flatten()]), True),  # nested, sign-keeping
        (L.BatchNormalization(), False),
        (L.Activation("hard_tanh"), False),
        (L.Activation("tanh"), False),
        (L.LeakyReLU(0.1), False),
        (L.ReLU(negative_slope=0.1), False),
        (L.ReLU(threshold=0.5), True),
        (L.Rescaling(-1.0), False),  # a layer outside the sign-keeping list: its sign is unknown
    ],
)
def test_which_inputs_count_as_non_negative(between, adapted):
    # by hand: an activation ≥ 0 (relu, relu6, sigmoid, softmax) or a sign-keeping layer on one is non-negative
    model = dense_net(between)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        q = ste.quantize_model(model, scheme="binary")
    quantizer = q.get_layer("b1").input_quantizer
    assert isinstance(quantizer, ste.qat.ActivationFakeQuant if adapted else ste.quantizers.Sign)
    assert any(MESSAGE in str(w.message) for w in record) is adapted


def test_merges_and_nested_models_carry_the_sign():
    keras.utils.set_random_seed(3)
    i = keras.Input((6,))
    a = L.Dense(8, activation="relu", name="first")(i)
    b = L.Dense(8, activation="sigmoid", name="gate")(i)
    inner_in = keras.Input((8,))
    inner = keras.Model(inner_in, L.Dense(8, name="inner_b")(inner_in), name="block")
    s = L.Add(name="add")([a, b])  # ≥ 0 + ≥ 0
    m = L.Multiply(name="mul")([a, L.Dense(8, name="signed")(i)])  # unknown sign
    h = L.Concatenate()([inner(s), L.Dense(8, name="b_mul")(m)])
    model = keras.Model(i, L.Dense(2, name="head")(h))
    with pytest.warns(UserWarning, match=MESSAGE) as record:
        q = ste.quantize_model(model, scheme="binary")
    text = next(str(w.message) for w in record if MESSAGE in str(w.message))
    assert "'block/inner_b' (after 'first' (relu), 'gate' (sigmoid))" in text
    assert "b_mul" not in text
    block = q.get_layer("block")
    assert isinstance(block.get_layer("inner_b").input_quantizer, ste.qat.ActivationFakeQuant)
    assert isinstance(q.get_layer("b_mul").input_quantizer, ste.quantizers.Sign)


def test_the_model_input_follows_keep_ends():
    # keep_ends=True (the default): the first layer is 8-bit; keep_ends=False: it binarizes the model input, whose
    # sign the graph does not show, with no warning
    model = dense_net(L.BatchNormalization())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        q = ste.quantize_model(model, scheme=ste.qat.BinaryScheme(keep_ends=False))
    assert isinstance(q.get_layer("first").input_quantizer, ste.quantizers.Sign)


def test_ternary_inputs_after_relu_keep_their_levels_without_a_warning():
    model = dense_net()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        q = ste.quantize_model(model, scheme="ternary")
    layer = q.get_layer("b1")
    assert isinstance(layer.input_quantizer, ste.quantizers.AbsmaxPerToken)
    x = np.random.default_rng(1).normal(size=(16, 6)).astype(np.float32)
    h = input_of(q, "b1", x).astype(np.float64)
    assert h.min() >= 0.0
    m = np.maximum(np.abs(h).max(axis=-1, keepdims=True), 1e-5)  # BitNet's absmax per token
    want = np.clip(np.round(h * 127 / m), -128, 127) * m / 127
    got = keras.ops.convert_to_numpy(layer.input_quantizer(h.astype(np.float32)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert len(np.unique(got)) > 10


def test_quantize_apply_checks_the_annotated_layers_only():
    model = dense_net()
    ste.qat.quantize_annotate_layer(model.get_layer("b1"))
    with pytest.warns(UserWarning, match=MESSAGE):
        q = ste.qat.quantize_apply(model, scheme=ste.qat.BinaryScheme(keep_ends=False))
    assert isinstance(q.get_layer("b1").input_quantizer, ste.qat.ActivationFakeQuant)


def test_the_result_converts_summarizes_saves_and_packs(tmp_path):
    q = quantize_quietly(conv_net())
    x, _ = toy_task(16, seed=7)
    flatbuffer = ste.to_tflite(q)
    ops = flatbuffer_ops(flatbuffer)
    assert ops["CONV_2D"] == 2  # the first conv and 'b1' (8-bit input, ±1 kernel)
    assert ops["QUANTIZE"] == 1 and ops["DEQUANTIZE"] == 1  # int8 from the float input to the float output
    run = interpreter(flatbuffer)
    detail_in, detail_out = run.get_input_details()[0], run.get_output_details()[0]
    want = keras.ops.convert_to_numpy(q(x))
    for k in range(len(x)):
        run.set_tensor(detail_in["index"], x[k : k + 1])
        run.invoke()
        # int8 kernels against fake quantization: a step here and there, not another function
        np.testing.assert_allclose(run.get_tensor(detail_out["index"])[0], want[k], atol=0.05 * np.abs(want).max())
    rows = {row.name: row for row in ste.summary(q, print_fn=None).layers}
    assert rows["b1"].input_bits == 8 and rows["b1"].kernel_bits == (1,)
    path = tmp_path / "q.keras"
    q.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(loaded(x)), keras.ops.convert_to_numpy(q(x)))
    packed = ste.export_quantized_weights(q, packed=True)
    assert packed["b1"]["kernel"]["bits"] == 1


@pytest.mark.parametrize("policy", ["float16", "bfloat16", "float64", "mixed_float16", "mixed_bfloat16"])
def test_every_float_dtype_gives_the_same_kind_of_answer(policy):
    reference = quantize_quietly(dense_net())
    keras.config.set_dtype_policy(policy)
    try:
        model = dense_net()
        with pytest.warns(UserWarning, match=MESSAGE):
            q = ste.quantize_model(model, scheme="binary")
    finally:
        keras.config.set_dtype_policy("float32")
    layer = q.get_layer("b1")
    assert isinstance(layer.input_quantizer, ste.qat.ActivationFakeQuant)
    x = np.random.default_rng(2).normal(size=(32, 6)).astype(np.float32)
    h = input_of(reference, "b1", x)
    hq = keras.ops.convert_to_numpy(layer.input_quantizer(tf.cast(h, layer.compute_dtype), training=False))
    assert hq.dtype == np.dtype(layer.compute_dtype)
    assert len(np.unique(hq)) > 10
    want = keras.ops.convert_to_numpy(reference.get_layer("b1").input_quantizer(h, training=False))
    # the float32 answer within one step of the initial range [-6, 6] (a rounding tie may go the other way), two in
    # bfloat16: its 8 significant bits hold (x - min)/scale ≈ 145 only to the nearest whole number already
    step = (6.0 - -6.0) / 255
    steps = 2 if "bfloat16" in policy else 1
    np.testing.assert_allclose(hq.astype(np.float64), want, atol=steps * step * 1.05)
