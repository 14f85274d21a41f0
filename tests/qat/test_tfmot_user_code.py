"""A TFMOT user's own code runs on ``ste.qat`` after the edit docs/qat.md's table gives.

The user code follows TFMOT 0.8's published guides (the QAT overview and the comprehensive guide): annotate
layers through ``keras.models.clone_model(..., clone_function=...)``, custom ``QuantizeConfig`` subclasses, a 4-bit
weight quantizer, skipping an activation's quantization, ``quantize_scope`` to load, ``fix_input_output_range``.
Every number is checked against a numpy reference or the float model; every refusal must be an ``ste.STEError``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
from ste import qat
from tests.helpers import expect_ste_error
from tests.qat.helpers import CONVERTS_PER_CHANNEL
from tests.qat.test_fake_quant_gradients import nudge

L = keras.layers


class DefaultDenseQuantizeConfig(qat.QuantizeConfig):
    """TFMOT's comprehensive guide, with the names docs/qat.md's table maps."""

    def get_weights_and_quantizers(self, layer: Any) -> list[Any]:
        return [(layer.kernel, qat.LastValueQuantizer(num_bits=8, symmetric=True, narrow_range=False, per_axis=False))]

    def get_activations_and_quantizers(self, layer: Any) -> list[Any]:
        return [
            (
                layer.activation,
                qat.MovingAverageQuantizer(num_bits=8, symmetric=False, narrow_range=False, per_axis=False),
            )
        ]

    def set_quantize_weights(self, layer: Any, quantize_weights: Any) -> None:
        layer.kernel = quantize_weights[0]

    def set_quantize_activations(self, layer: Any, quantize_activations: Any) -> None:
        layer.activation = quantize_activations[0]

    def get_output_quantizers(self, layer: Any) -> list[Any]:
        return []

    def get_config(self) -> dict[str, Any]:
        return {}


class FourBitDenseQuantizeConfig(DefaultDenseQuantizeConfig):
    """The guide's "modify quantization": 4-bit weights, and its activation left unquantized."""

    def get_weights_and_quantizers(self, layer: Any) -> list[Any]:
        return [(layer.kernel, qat.LastValueQuantizer(num_bits=4, symmetric=True, narrow_range=False, per_axis=False))]

    def get_activations_and_quantizers(self, layer: Any) -> list[Any]:
        return []

    def set_quantize_activations(self, layer: Any, quantize_activations: Any) -> None:
        return


class CustomLayer(L.Dense):
    pass


def _np_symmetric_wide(w: np.ndarray, bits: int) -> np.ndarray:
    """TFMOT's symmetric LastValueQuantizer on the wide range (docs/qat.md's formula), TensorFlow's nudging."""
    lo, hi = np.float32(min(w.min(), 0.0)), np.float32(max(w.max(), 0.0))
    r = np.float32(-(2**bits - 2) / 2**bits)
    lo, hi = min(lo, hi / r), max(hi, lo * r)
    n_min, n_max, scale = (float(v) for v in nudge(lo, hi, bits, False, np.float32))
    return np.floor((np.clip(w, n_min, n_max) - n_min) / scale + 0.5) * scale + n_min


def test_guide_clone_function_annotation_quantizes_only_dense() -> None:
    """TFMOT's guide: annotate through clone_model's clone_function, then quantize_apply."""
    keras.utils.set_random_seed(0)
    base = keras.Sequential([keras.Input((10,)), L.Dense(8, activation="relu"), L.LayerNormalization(), L.Dense(3)])

    def apply_quantization_to_dense(layer: Any) -> Any:
        if isinstance(layer, L.Dense):
            return ste.qat.quantize_annotate_layer(layer)
        return layer

    annotated = keras.models.clone_model(base, clone_function=apply_quantization_to_dense)
    quantized = ste.qat.quantize_apply(annotated)
    kinds = [type(layer).__name__ for layer in quantized.layers]
    assert "LayerNormalization" in kinds and kinds.count("QuantDense") == 2, kinds
    x = np.random.default_rng(0).normal(size=(16, 10)).astype("float32")
    np.testing.assert_allclose(quantized.predict(x, verbose=0), base.predict(x, verbose=0), atol=0.3)


def test_guide_annotate_then_clone_keeps_annotation_or_refuses() -> None:
    """Annotating the original layers and then cloning the model loses the marks (docs: another object). The docs
    promise a ParameterError then, not a silent float copy."""
    base = keras.Sequential([keras.Input((10,)), L.Dense(8), L.Dense(3)])
    for layer in base.layers:
        ste.qat.quantize_annotate_layer(layer)
    clone = keras.models.clone_model(base)
    expect_ste_error(lambda: ste.qat.quantize_apply(clone), "annotate")
    assert isinstance(expect_ste_error(lambda: ste.qat.quantize_apply(clone)), ValueError)


def test_guide_custom_config_quantizes_kernel_with_its_quantizer() -> None:
    model = ste.qat.quantize_annotate_model(
        keras.Sequential(
            [
                keras.Input((20,)),
                ste.qat.quantize_annotate_layer(CustomLayer(20, activation="relu"), FourBitDenseQuantizeConfig()),
                L.Flatten(),
            ]
        )
    )
    with ste.qat.quantize_scope({"FourBitDenseQuantizeConfig": FourBitDenseQuantizeConfig, "CustomLayer": CustomLayer}):
        quantized = ste.qat.quantize_apply(model)
    wrapper = next(layer for layer in quantized.layers if isinstance(layer, qat.QuantizeWrapper))
    kernel = next(v for v in wrapper.weights if v.path.endswith("kernel"))
    kernel.assign(np.random.default_rng(1).normal(size=(20, 20)).astype("float32"))
    bias = next(v for v in wrapper.weights if v.path.endswith("bias"))
    bias.assign(np.zeros(20, "float32"))
    out = np.asarray(wrapper(np.eye(20, dtype="float32"), training=False))
    want = np.maximum(_np_symmetric_wide(np.asarray(kernel), 4), 0.0)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
    assert len(np.unique(np.round(out[out > 0], 6))) <= 8


def test_guide_custom_layer_trains_saves_loads_and_converts(tmp_path: Any) -> None:
    model = ste.qat.quantize_annotate_model(
        keras.Sequential(
            [
                keras.Input((20,)),
                ste.qat.quantize_annotate_layer(CustomLayer(20, activation="relu"), DefaultDenseQuantizeConfig()),
                L.Flatten(),
                L.Dense(4),
            ]
        )
    )
    scope = {"DefaultDenseQuantizeConfig": DefaultDenseQuantizeConfig, "CustomLayer": CustomLayer}
    with ste.qat.quantize_scope(scope):
        quantized = ste.qat.quantize_apply(model, quantized_layer_name_prefix="quant_")
    assert all(
        layer.name.startswith("quant_")
        for layer in quantized.layers
        if isinstance(layer, (qat.QuantizeWrapper, ste.layers.QuantDense))
    ), [lr.name for lr in quantized.layers]
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(64, 20)).astype("float32"), rng.integers(0, 4, 64)
    quantized.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    quantized.fit(x, y, epochs=2, verbose=0)
    path = os.path.join(tmp_path, "m.keras")
    quantized.save(path)
    with ste.qat.quantize_scope(scope):
        loaded = keras.models.load_model(path)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), quantized.predict(x, verbose=0))
    flatbuffer = ste.to_tflite(loaded)
    interpreter = tf.lite.Interpreter(model_content=flatbuffer)
    interpreter.allocate_tensors()
    inp, out = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    interpreter.resize_tensor_input(inp["index"], x.shape)
    interpreter.allocate_tensors()
    interpreter.set_tensor(inp["index"], x)
    interpreter.invoke()
    lite = interpreter.get_tensor(out["index"])
    keras_out = quantized.predict(x, verbose=0)
    step = float(np.ptp(keras_out)) / 255.0
    assert np.mean(np.abs(lite - keras_out) <= step * 1.01) >= 0.95


def test_fix_input_output_range_scales_in_tflite() -> None:
    model = keras.Sequential([keras.Input((5,)), L.Dense(10)])
    fixed = ste.qat.fix_input_output_range(
        ste.quantize_model(model), input_min=0.0, input_max=1.0, output_min=0.0, output_max=255.0
    )
    interpreter = tf.lite.Interpreter(model_content=ste.to_tflite(fixed, int8_io=True))
    interpreter.allocate_tensors()
    (in_scale, in_zero), (out_scale, out_zero) = (
        interpreter.get_input_details()[0]["quantization"],
        interpreter.get_output_details()[0]["quantization"],
    )
    assert in_zero == -128 and abs(in_scale - 1 / 255) < 1e-7, (in_scale, in_zero)
    assert out_zero == -128 and abs(out_scale - 1.0) < 1e-6, (out_scale, out_zero)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"input_min": 0.5, "input_max": 1.0}, ("0",)),
        ({"input_min": None, "input_max": 1.0}, ("None",)),
        ({"output_min": 2.0, "output_max": 1.0}, ()),
        ({"num_bits": 1}, ("num_bits",)),
        ({"num_bits": 9}, ("num_bits",)),
        ({"num_bits": "8"}, ("num_bits",)),
        ({"narrow_range": "no"}, ("narrow_range",)),
        ({"input_min": float("nan")}, ()),
        ({"input_max": float("inf")}, ()),
    ],
)
def test_fix_input_output_range_refuses_bad_arguments(kwargs: dict[str, Any], words: tuple[str, ...]) -> None:
    qmodel = ste.quantize_model(keras.Sequential([keras.Input((5,)), L.Dense(3)]))
    expect_ste_error(lambda: ste.qat.fix_input_output_range(qmodel, **kwargs), *words)


def test_fix_input_output_range_and_remove_input_range_refuse_a_float_model() -> None:
    model = keras.Sequential([keras.Input((5,)), L.Dense(3)])
    expect_ste_error(lambda: ste.qat.fix_input_output_range(model))
    expect_ste_error(lambda: ste.qat.remove_input_range(model))
    expect_ste_error(lambda: ste.qat.remove_input_range("model"))


def test_remove_input_range_keeps_weights_and_drops_input_quantizer() -> None:
    model = keras.Sequential([keras.Input((5,)), L.Dense(3)])
    qmodel = ste.quantize_model(model)
    removed = ste.qat.remove_input_range(qmodel)
    kinds = [type(layer).__name__ for layer in removed.layers]
    assert kinds[0] != "ActivationFakeQuant", kinds
    x = np.random.default_rng(0).uniform(-1, 1, (8, 5)).astype("float32")
    dense = next(layer for layer in removed.layers if "Dense" in type(layer).__name__)
    np.testing.assert_array_equal(np.asarray(dense.kernel), np.asarray(model.layers[0].kernel))
    assert removed.predict(x, verbose=0).shape == (8, 3)


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda m: ste.quantize_model("model"), ()),
        (lambda m: ste.quantize_model(m, scheme="int4"), ("int8",)),
        (lambda m: ste.quantize_model(m, scheme=None), ()),
        (lambda m: ste.quantize_model(m, strict="yes"), ("strict",)),
        (lambda m: ste.quantize_model(m, quantized_layer_name_prefix=3), ("quantized_layer_name_prefix",)),
        (lambda m: ste.quantize_model(m, quantized_layer_name_prefix="a/b"), ()),
        (lambda m: ste.qat.quantize_apply(m), ("annotate",)),
        (lambda m: ste.qat.quantize_annotate_layer(m), ()),
        (lambda m: ste.qat.quantize_annotate_layer("dense"), ()),
        (lambda m: ste.qat.quantize_annotate_layer(m.layers[0], config="int8"), ()),
        (lambda m: ste.qat.quantize_annotate_model("model"), ()),
        (lambda m: ste.qat.quantize_annotate_model(m.layers[0]), ()),
        (lambda m: ste.to_tflite("model"), ()),
        (lambda m: ste.to_tflite(m, int8_io="yes"), ("int8_io",)),
        (lambda m: ste.qat.quantize_scope(["CustomLayer"]).__enter__(), ()),
        (lambda m: qat.NBitScheme(num_bits_weight=1), ("num_bits_weight",)),
        (lambda m: qat.NBitScheme(num_bits_activation=9), ("num_bits_activation",)),
        (lambda m: qat.NBitScheme(disable_per_axis="no"), ("disable_per_axis",)),
        (lambda m: qat.LastValueQuantizer(num_bits=0, per_axis=False, symmetric=True, narrow_range=True), ()),
        (lambda m: qat.LastValueQuantizer(num_bits=8, per_axis="no", symmetric=True, narrow_range=True), ()),
        (lambda m: qat.MovingAverageQuantizer(num_bits=8, per_axis=True, symmetric=False, narrow_range=False), ()),
        (lambda m: qat.AllValuesQuantizer(num_bits=8, per_axis=True, symmetric=False, narrow_range=False), ()),
        (lambda m: qat.FixedQuantizer(num_bits=8, init_min=0.5, init_max=1.0, narrow_range=False), ()),
        (lambda m: qat.FixedQuantizer(num_bits=8, init_min=1.0, init_max=-1.0, narrow_range=False), ()),
        (lambda m: qat.WeightFakeQuant(channel_axes=-1), ("channel_axes",)),
        (lambda m: qat.WeightFakeQuant(bits=1), ("bits",)),
        (lambda m: qat.ActivationFakeQuant(ema_decay=1.5), ("ema_decay",)),
        (lambda m: qat.ActivationFakeQuant(initial_min=1.0, initial_max=-1.0), ()),
        (lambda m: qat.QuantizeWrapper(m.layers[0], "config"), ()),
        (lambda m: qat.QuantizeConfig(float="yes"), ("float",)),
    ],
)
def test_tfmot_api_bad_input_is_a_typed_error(call: Callable[[Any], Any], words: tuple[str, ...]) -> None:
    model = keras.Sequential([keras.Input((5,)), L.Dense(3)])
    expect_ste_error(lambda: call(model), *words)


class _BadWeightsConfig(DefaultDenseQuantizeConfig):
    def get_weights_and_quantizers(self, layer: Any) -> list[Any]:
        return [(layer.kernel, "not a quantizer")]


class _ForeignWeightConfig(DefaultDenseQuantizeConfig):
    def get_weights_and_quantizers(self, layer: Any) -> list[Any]:
        return [(keras.Variable(np.zeros((2, 2))), qat.LastValueQuantizer(8, False, True, True))]


class _EluConfig(DefaultDenseQuantizeConfig):
    pass


@pytest.mark.parametrize(
    ("config", "activation"),
    [(_BadWeightsConfig(), "relu"), (_ForeignWeightConfig(), "relu"), (_EluConfig(), "elu")],
)
def test_bad_quantize_config_is_a_typed_error(config: Any, activation: str) -> None:
    model = keras.Sequential(
        [keras.Input((4,)), ste.qat.quantize_annotate_layer(CustomLayer(3, activation=activation), config)]
    )
    expect_ste_error(lambda: ste.qat.quantize_apply(model))


def test_quantize_apply_of_annotated_model_is_quantize_model() -> None:
    def build() -> keras.Model:
        i = keras.Input((8, 8, 3), name="image")
        h = L.Conv2D(4, 3, use_bias=False, name="conv")(i)
        h = L.BatchNormalization(name="bn")(h)
        h = L.ReLU(name="relu")(h)
        h = L.GlobalAveragePooling2D(name="gap")(h)
        return keras.Model(i, L.Dense(2, name="head")(h))

    a = ste.quantize_model(build())
    b = ste.qat.quantize_apply(ste.qat.quantize_annotate_model(build()))
    assert [(type(x).__name__, x.name) for x in a.layers] == [(type(x).__name__, x.name) for x in b.layers]


def test_siamese_encoder_stays_shared_and_both_branches_train() -> None:
    enc_in = keras.Input((6,))
    encoder = keras.Model(enc_in, L.Dense(4, activation="relu")(L.Dense(5)(enc_in)), name="encoder")
    a, b = keras.Input((6,)), keras.Input((6,))
    model = keras.Model([a, b], L.Subtract()([encoder(a), encoder(b)]))
    qmodel = ste.quantize_model(model)
    float_kernels = [v for v in model.weights if v.path.endswith("kernel")]
    kernels = [v for v in qmodel.weights if v.path.endswith("kernel")]
    assert len(kernels) == len(float_kernels) == 2, [v.path for v in qmodel.weights]
    xa = tf.constant(np.random.default_rng(0).normal(size=(8, 6)), tf.float32)
    xb = tf.constant(np.random.default_rng(1).normal(size=(8, 6)), tf.float32)
    with tf.GradientTape() as tape:
        out = qmodel([tf.zeros_like(xa), xb], training=False)  # branch a sees only zeros
        loss = tf.reduce_sum(out**2)
    grads = tape.gradient(loss, kernels)
    assert all(g is not None and float(tf.reduce_max(tf.abs(g))) > 0 for g in grads)
    same = qmodel([xa, xa], training=False)  # one encoder: equal inputs give equal codes
    np.testing.assert_array_equal(np.asarray(same), np.zeros_like(np.asarray(same)))


def test_shared_dense_layer_called_twice_is_one_quantized_layer() -> None:
    shared = L.Dense(4, name="shared")
    a, b = keras.Input((6,)), keras.Input((6,))
    model = keras.Model([a, b], L.Concatenate()([shared(a), shared(b)]))
    with _no_warning_about("shared"):
        qmodel = ste.quantize_model(model)
    kernels = [v for v in qmodel.weights if v.path.endswith("kernel")]
    assert len(kernels) == 1, [v.path for v in qmodel.weights]
    quantized = [layer for layer in qmodel.layers if layer.name == "shared"]
    assert len(quantized) == 1 and type(quantized[0]).__name__ != "Dense", [type(x).__name__ for x in qmodel.layers]


class _no_warning_about:
    def __init__(self, word: str) -> None:
        self.word = word

    def __enter__(self) -> None:
        import warnings

        self._cm = warnings.catch_warnings(record=True)
        self.caught = self._cm.__enter__()
        warnings.simplefilter("always")

    def __exit__(self, *exc: Any) -> None:
        self._cm.__exit__(*exc)
        for warning in self.caught:
            assert self.word not in str(warning.message), str(warning.message)


def _double(t: Any) -> Any:
    return t * 2.0


@pytest.mark.parametrize("kind", ["named", "lambda"])
def test_lambda_layers_stay_float_and_save(kind: str, tmp_path: Any) -> None:
    fn = _double if kind == "named" else (lambda t: t * 2.0)
    keras.utils.set_random_seed(0)  # the weights do not depend on which tests ran before in this process
    model = keras.Sequential([keras.Input((5,)), L.Dense(4), L.Lambda(fn, name="lam"), L.Dense(2)])
    qmodel = ste.quantize_model(model)
    assert any(isinstance(layer, L.Lambda) for layer in qmodel.layers)
    x = np.random.default_rng(0).normal(size=(8, 5)).astype("float32")
    np.testing.assert_allclose(qmodel.predict(x, verbose=0), model.predict(x, verbose=0), atol=0.5)
    path = os.path.join(tmp_path, "lam.keras")
    qmodel.save(path)
    loaded = keras.models.load_model(path, safe_mode=False, custom_objects={"_double": _double})
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), qmodel.predict(x, verbose=0))


def test_int32_feature_input_is_accepted_as_the_float_model_does() -> None:
    i = keras.Input((5,), dtype="int32")
    model = keras.Model(i, L.Dense(3)(i))
    x = np.random.default_rng(0).integers(-3, 4, (8, 5)).astype("int32")
    want = model.predict(x, verbose=0)
    qmodel = ste.quantize_model(model)
    got = qmodel.predict(x, verbose=0)
    assert qmodel.inputs[0].dtype == "int32"
    np.testing.assert_allclose(got, want, atol=0.15)


def test_nbit_scheme_weights_take_at_most_15_levels() -> None:
    model = keras.Sequential([keras.Input((16,)), L.Dense(32, use_bias=False)])
    model.layers[0].kernel.assign(np.random.default_rng(0).normal(size=(16, 32)).astype("float32"))
    qmodel = ste.quantize_model(model, scheme=qat.NBitScheme(num_bits_weight=4))
    dense = next(layer for layer in qmodel.layers if "Dense" in type(layer).__name__)
    out = np.asarray(dense(np.eye(16, dtype="float32")))
    k = np.asarray(model.layers[0].kernel)
    for j in range(k.shape[1]):  # per output channel where TFLite converts it (CONVERTS_PER_CHANNEL), else per tensor
        m = float(np.max(np.abs(k[:, j]) if CONVERTS_PER_CHANNEL else np.abs(k)))
        n_min, n_max, scale = (float(v) for v in nudge(np.float32(-m), np.float32(m), 4, True, np.float32))
        want = np.floor((np.clip(k[:, j], n_min, n_max) - n_min) / scale + 0.5) * scale + n_min
        np.testing.assert_allclose(out[:, j], want, rtol=1e-6, atol=1e-6)
        assert len(np.unique(np.round(out[:, j] / scale))) <= 15


def test_nbit_four_bit_activations_refused_by_to_tflite() -> None:
    model = keras.Sequential([keras.Input((16,)), L.Dense(8)])
    qmodel = ste.quantize_model(model, scheme=qat.NBitScheme(num_bits_activation=4))
    error = expect_ste_error(lambda: ste.to_tflite(qmodel))
    assert isinstance(error, ste.errors.ConversionError)
