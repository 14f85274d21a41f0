"""TFMOT's public QAT API on ste, through the mapping docs/qat.md documents: annotation and its errors,
``quantize_annotate_model``, layer names and ``quantized_layer_name_prefix``, ``QuantizeConfig`` subclasses with their
own quantizers (TFMOT's guide's code), TFMOT's quantizers against TFMOT's range formulas, the n-bit scheme, and
``fix_input_output_range`` read back from the TFLite model. TFMOT itself is never imported: the references are numpy
transcriptions of TFMOT 0.8.1's formulas (``quant_ops.py``) and the numbers its own tests expect."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

from .helpers import CONVERTS_PER_CHANNEL, L, interpreter, numpy_fake_quant, ops, residual_net, run

STEP = 12 / 255  # one step of an activation quantizer on its initial range [−6, 6]


def kinds(model: keras.Model) -> list[str]:
    return [type(layer).__name__ for layer in model.layers]


def small_dense(name: str = "dense") -> keras.Model:
    keras.utils.set_random_seed(1)
    return keras.Sequential([keras.Input((5,)), L.Dense(10, name=name), L.Dropout(0.4)])


def tfmot_symmetric(low: np.ndarray, high: np.ndarray, bits: int, narrow_range: bool) -> tuple[np.ndarray, ...]:
    """TFMOT 0.8.1's quant_ops: the symmetric range of [low, high]."""
    ratio = -1.0 if narrow_range else -((1 << bits) - 2) / (1 << bits)
    return np.minimum(low, high / ratio), np.maximum(high, low * ratio)


def assert_within_one_step(got: np.ndarray, expected: np.ndarray, step: float = STEP) -> None:
    """Equal but for float rounding, which can move a value on a rounding boundary by one level."""
    difference = np.abs(got - expected)
    assert difference.max() <= step * 1.001, difference.max()
    assert np.mean(difference < 1e-5) >= 0.95


# -- annotation -------------------------------------------------------------------------------------------------


def test_quantize_apply_refuses_a_model_without_annotated_layers():
    model = small_dense()
    with pytest.raises(ste.errors.ParameterError, match=r"no layer of model .* is annotated.*quantize_annotate_layer"):
        ste.qat.quantize_apply(model)
    # the user annotated a layer object the model does not use (here: the model was cloned after annotating)
    i = keras.Input((5,))
    annotated = keras.Model(i, ste.qat.quantize_annotate_layer(L.Dense(3))(i))
    with pytest.raises(ValueError, match="the layer objects the model uses"):
        ste.qat.quantize_apply(keras.models.clone_model(annotated))
    assert isinstance(ste.qat.quantize_apply(annotated).layers[2], ste.layers.QuantDense)


def test_quantize_annotate_layer_refuses_a_model_and_takes_tfmots_keyword():
    with pytest.raises(ste.errors.ParameterError, match="quantize_annotate_model"):
        ste.qat.quantize_annotate_layer(small_dense())
    config = ste.qat.QuantizeConfig(float=True)
    layer = ste.qat.quantize_annotate_layer(L.Dense(2), quantize_config=config)
    assert layer._ste_qat_annotation is config
    with pytest.raises(ste.errors.ParameterError, match="not both"):
        ste.qat.quantize_annotate_layer(L.Dense(2), config, quantize_config=config)
    with pytest.raises(ste.errors.ParameterError, match="QuantizeConfig"):
        ste.qat.quantize_annotate_layer(L.Dense(2), quantize_config=object())


def test_quantize_annotate_model_then_apply_is_quantize_model():
    keras.utils.set_random_seed(2)
    model, x = residual_net(), np.random.default_rng(0).uniform(0, 1, (8, 8, 8, 3)).astype(np.float32)
    expected = ste.quantize_model(model)
    annotated = ste.qat.quantize_annotate_model(model)
    assert annotated is model
    got = ste.qat.quantize_apply(annotated)
    assert kinds(got) == kinds(expected)
    np.testing.assert_array_equal(got.predict(x, verbose=0), expected.predict(x, verbose=0))
    with pytest.raises(ste.errors.ParameterError, match="quantize_annotate_layer"):
        ste.qat.quantize_annotate_model(L.Dense(2))


def test_quantize_annotate_model_keeps_a_layers_own_config():
    i = keras.Input((4,))
    kept = ste.qat.quantize_annotate_layer(L.Dense(3, name="kept"), ste.qat.QuantizeConfig(float=True))
    model = keras.Model(i, L.Dense(2, name="quantized")(kept(i)))
    q = ste.qat.quantize_apply(ste.qat.quantize_annotate_model(model))
    assert type(q.get_layer("kept")) is L.Dense and isinstance(q.get_layer("quantized"), ste.layers.QuantDense)


# -- names ------------------------------------------------------------------------------------------------------


def test_quantized_layers_are_named_prefix_and_the_float_layers_name_stably():
    """TFMOT names a quantized layer ``quantized_layer_name_prefix + layer.name`` (its default prefix is "quant_");
    ste's default prefix keeps the names. A folded convolution takes the convolution's name."""
    model = residual_net()
    conv = model.layers[1].name
    default = ste.quantize_model(model)
    prefixed = ste.quantize_model(model, quantized_layer_name_prefix="quant_")
    assert [layer.name for layer in ste.quantize_model(model).layers] == [layer.name for layer in default.layers]
    renamed = {
        layer.name
        for layer in prefixed.layers
        if isinstance(layer, (ste.layers.QuantDense, ste.layers.QuantConv2D, ste.layers.QuantDepthwiseConv2D))
    }
    compute = [layer.name for layer in model.layers if isinstance(layer, (L.Dense, L.Conv2D, L.DepthwiseConv2D))]
    assert renamed == {f"quant_{name}" for name in compute}
    assert isinstance(prefixed.get_layer(f"quant_{conv}"), ste.qat.FoldedConv2D)
    assert isinstance(default.get_layer(conv), ste.qat.FoldedConv2D)
    batch_norms = [layer.name for layer in model.layers if isinstance(layer, L.BatchNormalization)]
    assert not set(batch_norms) & {layer.name for layer in prefixed.layers}  # folded away
    kept = [layer.name for layer in model.layers if isinstance(layer, (L.Add, L.Flatten, L.MaxPooling2D))]
    assert set(kept) <= {layer.name for layer in prefixed.layers}  # not quantized: the same names
    assert ste.quantize_model(model, quantized_layer_name_prefix=None).layers[2].name == conv
    # TFMOT's QuantizeLayer on the model input is "quantize_layer", which TFMOT code looks up by name
    assert isinstance(prefixed.get_layer("quantize_layer"), ste.qat.ActivationFakeQuant)
    assert prefixed.get_layer("quantize_layer").input is prefixed.inputs[0]
    left, right = keras.Input((4,), name="left"), keras.Input((4,), name="right")
    two = keras.Model([left, right], L.Add()([L.Dense(3, name="a")(left), L.Dense(3, name="b")(right)]))
    names = {layer.name for layer in ste.quantize_model(two, quantized_layer_name_prefix="quant_").layers}
    assert {"quantize_layer", "quantize_layer_1", "quant_a", "quant_b"} <= names
    assert not any(layer.name.startswith("quantize_layer") for layer in ste.quantize_model(two).layers)
    with pytest.raises(ste.errors.ParameterError, match="quantized_layer_name_prefix"):
        ste.quantize_model(model, quantized_layer_name_prefix=3)


# -- QuantizeConfig subclasses (TFMOT's comprehensive guide) ----------------------------------------------------


class DefaultDenseQuantizeConfig(ste.qat.QuantizeConfig):
    """TFMOT's guide's config, with ``tfmot.quantization.keras.quantizers.X`` edited to ``ste.qat.X``."""

    def get_weights_and_quantizers(self, layer):
        return [
            (layer.kernel, ste.qat.LastValueQuantizer(num_bits=8, symmetric=True, narrow_range=False, per_axis=False))
        ]

    def get_activations_and_quantizers(self, layer):
        return [
            (
                layer.activation,
                ste.qat.MovingAverageQuantizer(num_bits=8, symmetric=False, narrow_range=False, per_axis=False),
            )
        ]

    def set_quantize_weights(self, layer, quantize_weights):
        layer.kernel = quantize_weights[0]  # a read-only property on Keras 3: ste does not call this

    def set_quantize_activations(self, layer, quantize_activations):
        layer.activation = quantize_activations[0]

    def get_output_quantizers(self, layer):
        return []

    def get_config(self):
        return {}


class CustomLayer(keras.layers.Dense):
    pass


SCOPE = {"DefaultDenseQuantizeConfig": DefaultDenseQuantizeConfig, "CustomLayer": CustomLayer}


@pytest.fixture(scope="module")
def custom() -> tuple[keras.Model, keras.Model]:
    keras.utils.set_random_seed(7)
    model = ste.qat.quantize_annotate_model(
        keras.Sequential(
            [
                keras.Input((20,)),
                ste.qat.quantize_annotate_layer(CustomLayer(20, activation="relu"), DefaultDenseQuantizeConfig()),
                L.Flatten(),
            ]
        )
    )
    with ste.qat.quantize_scope(SCOPE):
        return model, ste.qat.quantize_apply(model)


def custom_reference(x: np.ndarray, kernel: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Input quantizer (initial [−6, 6]); TFMOT's symmetric wide LastValue range of the kernel; ReLU; the
    MovingAverage activation quantizer on its initial [−6, 6]."""
    low, high = tfmot_symmetric(kernel.min(), kernel.max(), 8, False)
    weights = numpy_fake_quant(kernel.astype(np.float64), low, high)[0]
    inputs = numpy_fake_quant(x.astype(np.float64), -6.0, 6.0)[0]
    return numpy_fake_quant(np.maximum(inputs @ weights + bias, 0.0), -6.0, 6.0)[0]


def test_a_config_with_its_own_quantizers_quantizes_the_layer_as_tfmots_formulas(custom):
    model, q = custom
    assert kinds(q) == ["ActivationFakeQuant", "QuantizeWrapper", "Flatten"]  # the activation quantizes the output
    wrapper = q.layers[1]
    assert isinstance(wrapper.layer, CustomLayer) and wrapper.name == model.layers[0].name
    float_layer = model.layers[0]
    assert [w.path.split("/")[-1] for w in q.trainable_weights] == ["kernel", "bias"]
    for mine, theirs in zip(q.trainable_weights, float_layer.trainable_weights):
        assert mine is not theirs
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    x = np.random.default_rng(3).normal(size=(64, 20)).astype(np.float32)
    expected = custom_reference(x, float_layer.kernel.numpy(), float_layer.bias.numpy())
    assert_within_one_step(q.predict(x, verbose=0), expected)


def test_a_config_layer_trains_saves_loads_and_converts_to_an_int8_kernel(custom, tmp_path):
    _, q = custom
    x = np.random.default_rng(4).normal(size=(64, 20)).astype(np.float32)
    q.compile(keras.optimizers.SGD(0.1), "mse")
    q.fit(x, np.zeros((64, 20), np.float32), batch_size=64, epochs=1, verbose=0)
    activation = q.layers[1].activation_quantizers[0]
    assert float(activation.min.numpy()) == pytest.approx(-6 * 0.999)  # after ReLU min(x, 0) = 0
    assert float(activation.max.numpy()) != 6.0
    q.save(tmp_path / "custom.keras")
    with ste.qat.quantize_scope(SCOPE):
        loaded = keras.models.load_model(tmp_path / "custom.keras")
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), q.predict(x, verbose=0))
    flatbuffer = ste.to_tflite(q)
    assert [name for name, _, _ in ops(flatbuffer)] == ["QUANTIZE", "FULLY_CONNECTED", "DEQUANTIZE"]
    assert ops(flatbuffer)[1][1][:2] == ["int8", "int8"]
    step = float(ste.qat.nudged_range(activation.min, activation.max, bits=8, narrow_range=False)[2])
    assert np.abs(run(flatbuffer, x[:16]) - q.predict(x[:16], verbose=0)).max() <= step * 1.001


def wrapped_dense_model(dtype: str | None = None) -> keras.Model:
    keras.utils.set_random_seed(11)
    i = keras.Input((6,))
    hidden = ste.qat.quantize_annotate_layer(L.Dense(5, activation="relu", dtype=dtype), DefaultDenseQuantizeConfig())
    q = ste.qat.quantize_apply(keras.Model(i, ste.qat.quantize_annotate_layer(L.Dense(2))(hidden(i))))
    q.compile(keras.optimizers.SGD(0.1), "mse")
    return q


def wrapped_dense_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(12)
    return rng.normal(size=(16, 6)).astype(np.float32), rng.normal(size=(16, 2)).astype(np.float32)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "mixed_float16"])
def test_a_config_layer_trains_in_every_float_dtype(dtype):
    q = wrapped_dense_model(dtype)
    wrapper = q.layers[2]
    assert isinstance(wrapper, ste.qat.QuantizeWrapper) and wrapper.compute_dtype == q.layers[2].layer.compute_dtype
    x, y = wrapped_dense_data()
    before = [w.numpy() for w in q.trainable_weights]
    q.fit(x, y, batch_size=16, epochs=1, verbose=0)
    moved = [np.abs(w.numpy() - b).max() for w, b in zip(q.trainable_weights, before)]
    assert all(np.isfinite(m) and m > 0 for m in moved)
    assert np.all(np.isfinite(q.predict(x, verbose=0)))


def test_a_config_layer_under_xla_and_two_replicas_equals_one_device():
    x, y = wrapped_dense_data()
    single = wrapped_dense_model()
    single.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    compiled = wrapped_dense_model()
    compiled.compile(keras.optimizers.SGD(0.1), "mse", jit_compile=True)
    compiled.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
    if len(devices) < 2:
        pytest.skip("needs the two logical CPU devices set up by conftest.py")
    with tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice()).scope():
        mirrored = wrapped_dense_model()
    mirrored.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    for other in (compiled, mirrored):
        for a, b in zip(single.weights, other.weights):
            np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-5, atol=1e-6, err_msg=a.path)


class CustomConvLayer(keras.layers.Layer):
    """TFMOT's quantize_test.py: a layer whose kernel belongs to a sub-layer."""

    def __init__(self, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.conv1 = keras.layers.Conv2D(2, 2)

    def build(self, input_shape):
        self.conv1.build(input_shape)

    def call(self, inputs):
        return self.conv1(inputs)


class NoOpQuantizeConfig(ste.qat.QuantizeConfig):
    """TFMOT's guide's NoOpQuantizeConfig: quantizes nothing. Its six methods are TFMOT's abstract ones, so every
    config implements them; the configs below that quantize one thing derive from it for the rest."""

    def get_weights_and_quantizers(self, layer):
        return []

    def get_activations_and_quantizers(self, layer):
        return []

    def set_quantize_weights(self, layer, quantize_weights):
        pass

    def set_quantize_activations(self, layer, quantize_activations):
        pass

    def get_output_quantizers(self, layer):
        return []

    def get_config(self):
        return {}


class CustomConvQuantizeConfig(NoOpQuantizeConfig):
    def get_weights_and_quantizers(self, layer):
        return [(layer.conv1.kernel, ste.qat.LastValueQuantizer(8, per_axis=False, symmetric=True, narrow_range=False))]

    def set_quantize_weights(self, layer, quantize_weights):
        layer.conv1.kernel = quantize_weights[0]


def test_a_sub_layers_kernel_is_read_quantized_and_the_weights_keep_their_order():
    keras.utils.set_random_seed(8)
    model = keras.Sequential([keras.Input((6, 6, 3)), CustomConvLayer()])
    annotated = ste.qat.quantize_annotate_layer(model.layers[0], CustomConvQuantizeConfig())
    q = ste.qat.quantize_apply(model)
    assert annotated is model.layers[0]
    assert [w.path.split("/")[-1] for w in q.trainable_weights] == ["kernel", "bias"]
    for mine, theirs in zip(q.trainable_weights, model.trainable_weights):
        assert mine is not theirs
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    kernel, bias = (w.numpy() for w in model.trainable_weights)
    low, high = tfmot_symmetric(kernel.min(), kernel.max(), 8, False)
    x = np.random.default_rng(5).normal(size=(4, 6, 6, 3)).astype(np.float32)
    inputs = numpy_fake_quant(x.astype(np.float64), -6.0, 6.0)[0].astype(np.float32)
    weights = numpy_fake_quant(kernel.astype(np.float64), low, high)[0].astype(np.float32)
    expected = tf.nn.conv2d(inputs, weights, 1, "VALID").numpy() + bias  # the output is not quantized
    np.testing.assert_allclose(q.predict(x, verbose=0), expected, rtol=1e-5, atol=1e-5)


def test_a_config_that_cannot_hold_is_refused_when_the_model_is_quantized():
    class Unsupported(NoOpQuantizeConfig):
        def get_activations_and_quantizers(self, layer):
            return [(layer.activation, ste.qat.MovingAverageQuantizer(8, False, False, False))]

    class NotAWeight(NoOpQuantizeConfig):
        def get_weights_and_quantizers(self, layer):
            return [(np.ones((3, 2)), ste.qat.LastValueQuantizer(8, False, True, True))]

    for config, message in ((Unsupported(), "activation 'elu'"), (NotAWeight(), "expected variables of the layer")):
        i = keras.Input((3,))
        model = keras.Model(i, ste.qat.quantize_annotate_layer(L.Dense(2, activation="elu"), config)(i))
        with pytest.raises(ste.errors.ParameterError, match=message):
            ste.qat.quantize_apply(model)


def _weight_q():
    return ste.qat.LastValueQuantizer(8, per_axis=False, symmetric=True, narrow_range=True)


def _activation_q():
    return ste.qat.MovingAverageQuantizer(8, per_axis=False, symmetric=False, narrow_range=False)


class _TfmotStyleQuantizer:
    """The shape of a TFMOT quantizer object (``build(tensor_shape, name, layer)``, ``__call__``): not a Keras layer."""

    def build(self, tensor_shape, name, layer):
        return {}

    def __call__(self, inputs, training, weights, **kwargs):
        return inputs


# (method, what it returns for a Dense with a ReLU, words the message must hold besides the class and method names)
MALFORMED = {
    "weights None": ("get_weights_and_quantizers", lambda layer: None, ["returned None", "a list of (weight variable"]),
    "weights a bare weight": (
        "get_weights_and_quantizers",
        lambda layer: layer.kernel,
        ["returned the variable", "kernel", "(weight variable, quantizer) pairs"],
    ),
    "weights one pair": (
        "get_weights_and_quantizers",
        lambda layer: (layer.kernel, _weight_q()),
        ["one pair", "put the pair in a list"],
    ),
    "weights a list of weights": (
        "get_weights_and_quantizers",
        lambda layer: [layer.kernel, layer.bias],
        ["is not a (weight variable, quantizer) pair"],
    ),
    "weights a quantizer name": (
        "get_weights_and_quantizers",
        lambda layer: [(layer.kernel, "lsq")],
        ["'lsq' as a quantizer", "ste.quantizers.get('lsq')"],
    ),
    "weights a Dense": (
        "get_weights_and_quantizers",
        lambda layer: [(layer.kernel, L.Dense(3))],
        ["a Dense layer", "not a quantizer"],
    ),
    "weights a quantizer class": (
        "get_weights_and_quantizers",
        lambda layer: [(layer.kernel, ste.qat.LastValueQuantizer)],
        ["a class, not a quantizer object", "LastValueQuantizer(...)"],
    ),
    "weights a TFMOT quantizer object": (
        "get_weights_and_quantizers",
        lambda layer: [(layer.kernel, _TfmotStyleQuantizer())],
        ["TFMOT quantizer object", "subclass ste.quantizers.Quantizer"],
    ),
    "activations None": (
        "get_activations_and_quantizers",
        lambda layer: None,
        ["returned None", "(activation function, quantizer) pairs"],
    ),
    "activations one pair": (
        "get_activations_and_quantizers",
        lambda layer: (layer.activation, _activation_q()),
        ["one pair", "put the pair in a list"],
    ),
    "activations a weight as activation": (
        "get_activations_and_quantizers",
        lambda layer: [(layer.kernel, _activation_q())],
        ["as an activation", "layer.activation"],
    ),
    "outputs None": ("get_output_quantizers", lambda layer: None, ["returned None", "a list of quantizers"]),
    "outputs one quantizer": (
        "get_output_quantizers",
        lambda layer: _activation_q(),
        ["MovingAverageQuantizer", "put it in a list"],
    ),
    "outputs a Dense": ("get_output_quantizers", lambda layer: [L.Dense(4)], ["a Dense layer", "not a quantizer"]),
    "outputs two for one output": (
        "get_output_quantizers",
        lambda layer: [_activation_q(), _activation_q()],
        ["2 quantizers for a layer with 1 output", "one quantizer per output"],
    ),
}


def _malformed_config(method, returns):
    """TFMOT's guide's config with ``method`` replaced by one that returns ``returns(layer)``."""
    return type("MalformedConfig", (DefaultDenseQuantizeConfig,), {method: lambda self, layer: returns(layer)})()


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_config_that_returns_anything_but_pairs_or_quantizers_is_refused_naming_it(case):
    """TFMOT's interface: lists of (weight or activation, quantizer) pairs and a list of output quantizers, where a
    quantizer is a ste.quantizers.Quantizer. Anything else is refused when the wrapper is built, before the layer's
    activation is replaced, naming the config's class, the method, what it returned and the fix."""
    method, returns, words = MALFORMED[case]
    config = _malformed_config(method, returns)
    layer = L.Dense(4, activation="relu")
    i = keras.Input((3,))
    model = keras.Model(i, ste.qat.quantize_annotate_layer(layer, config)(i))
    with pytest.raises(ste.errors.ParameterError) as raised:
        ste.qat.quantize_apply(model)
    message = str(raised.value)
    for word in [f"MalformedConfig.{method}(layer)", "Fix:", *words]:
        assert word in message, (word, message)
    wrapper = ste.qat.QuantizeWrapper(L.Dense(4, activation="relu"), config)
    with pytest.raises(ste.errors.ParameterError, match="MalformedConfig"):
        wrapper.build((None, 3))
    assert wrapper.layer.activation is keras.activations.relu  # nothing was set on the layer
    assert not wrapper.weight_quantizers and not wrapper.activation_quantizers and not wrapper.output_quantizers


def test_a_config_may_return_tuples_and_lists_for_its_pairs():
    """TFMOT iterates what the config returns: a tuple of [weight, quantizer] lists quantizes as the guide's list of
    tuples."""

    class Tuples(DefaultDenseQuantizeConfig):
        def get_weights_and_quantizers(self, layer):
            return ([layer.kernel, ste.qat.LastValueQuantizer(8, per_axis=False, symmetric=True, narrow_range=False)],)

        def get_output_quantizers(self, layer):
            return ()

    def model(config):
        keras.utils.set_random_seed(13)
        i = keras.Input((6,))
        return ste.qat.quantize_apply(keras.Model(i, ste.qat.quantize_annotate_layer(L.Dense(5, "relu"), config)(i)))

    x = np.random.default_rng(14).normal(size=(8, 6)).astype(np.float32)
    expected = model(DefaultDenseQuantizeConfig())
    got = model(Tuples())
    assert len(got.layers[2].weight_quantizers) == 1
    np.testing.assert_array_equal(got.predict(x, verbose=0), expected.predict(x, verbose=0))


def test_a_config_that_quantizes_nothing_on_a_layer_with_weights_warns():
    """The layer stays float inside a wrapper that looks quantized: a warning names it and the fix. A layer without
    weights, and QuantizeConfig(float=True), keep the layer float silently."""
    keras.utils.set_random_seed(15)
    i = keras.Input((6,))
    dense = L.Dense(5, name="kept_float")
    model = keras.Model(i, L.ReLU(name="relu")(ste.qat.quantize_annotate_layer(dense, NoOpQuantizeConfig())(i)))
    with pytest.warns(UserWarning, match=r"'kept_float'.*NoOpQuantizeConfig.*quantizes nothing.*float=True"):
        q = ste.qat.quantize_apply(model)
    x = np.random.default_rng(16).normal(size=(8, 6)).astype(np.float32)
    inputs = numpy_fake_quant(x.astype(np.float64), -6.0, 6.0)[0]  # the scheme still quantizes the input
    expected = np.maximum(inputs @ dense.kernel.numpy() + dense.bias.numpy(), 0.0)  # the Dense itself is float
    np.testing.assert_allclose(q.predict(x, verbose=0), expected, rtol=1e-5, atol=1e-5)
    for annotated, config in ((L.Dense(5), ste.qat.QuantizeConfig(float=True)), (L.ReLU(), NoOpQuantizeConfig())):
        j = keras.Input((6,))
        silent = keras.Model(j, L.Dense(2)(ste.qat.quantize_annotate_layer(annotated, config)(j)))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ste.qat.quantize_apply(ste.qat.quantize_annotate_model(silent))


class OutputOnly(NoOpQuantizeConfig):
    """A subclass that declares itself a plain per-layer choice: quantize around the layer."""

    carries_quantizers = False

    def __init__(self):
        super().__init__(quantize_output=True)


class CarriesNothing(OutputOnly):
    """The same subclass declaring the opposite: TFMOT's kind, whose (empty) get_* methods are used."""

    carries_quantizers = True


def test_a_subclass_declares_whether_it_carries_quantizers():
    """Declared, not detected: a subclass is TFMOT's kind (its layer goes into a QuantizeWrapper) unless it declares
    carries_quantizers = False, which makes it what QuantizeConfig(quantize_output=True) is."""
    x = np.random.default_rng(17).normal(size=(4, 5)).astype(np.float32)

    def quantized(config):
        keras.utils.set_random_seed(18)
        i = keras.Input((5,))
        norm = ste.qat.quantize_annotate_layer(L.LayerNormalization(name="n"), config)
        dense = ste.qat.quantize_annotate_layer(L.Dense(2, name="b"))  # a layer quantize_apply changes
        return ste.qat.quantize_apply(keras.Model(i, dense(norm(i))))

    plain = quantized(ste.qat.QuantizeConfig(quantize_output=True))
    declared = quantized(OutputOnly())
    assert type(plain.get_layer("n")).__name__ == type(declared.get_layer("n")).__name__ == "LayerNormalization"
    assert [type(layer).__name__ for layer in declared.layers] == [type(layer).__name__ for layer in plain.layers]
    np.testing.assert_array_equal(declared.predict(x, verbose=0), plain.predict(x, verbose=0))
    with pytest.warns(UserWarning, match=r"CarriesNothing\): the config quantizes nothing"):
        assert isinstance(quantized(CarriesNothing()).get_layer("n"), ste.qat.QuantizeWrapper)
    assert NoOpQuantizeConfig().carries_quantizers and not ste.qat.QuantizeConfig().carries_quantizers


def test_quantize_scope_adds_the_given_custom_objects():
    with ste.qat.quantize_scope({"CustomLayer": CustomLayer}, {"Cfg": DefaultDenseQuantizeConfig}):
        assert keras.saving.get_registered_object("CustomLayer") is CustomLayer
        assert keras.saving.get_registered_object("QuantizeWrapper") is ste.qat.QuantizeWrapper
    assert keras.saving.get_registered_object("CustomLayer") is None
    with pytest.raises(ste.errors.ParameterError, match=r"\{name: class\}"):
        with ste.qat.quantize_scope(CustomLayer):
            pass


# -- TFMOT's quantizers -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("narrow_range", [False, True])
@pytest.mark.parametrize("per_axis", [False, True])
@pytest.mark.parametrize("symmetric", [False, True])
def test_last_value_quantizer_is_tfmots_range_of_the_tensor(bits, narrow_range, per_axis, symmetric):
    w = np.random.default_rng(6).normal(loc=0.3, size=(3, 3, 4, 5)).astype(np.float32)
    axes = (0, 1, 2) if per_axis else None
    low, high = w.min(axis=axes), w.max(axis=axes)
    if symmetric:
        low, high = tfmot_symmetric(low, high, bits, narrow_range)
    else:
        low, high = np.minimum(low, 0.0), np.maximum(high, 0.0)
    expected = numpy_fake_quant(w.astype(np.float64), low, high, bits, narrow_range)[0]
    quantizer = ste.qat.LastValueQuantizer(bits, per_axis=per_axis, symmetric=symmetric, narrow_range=narrow_range)
    np.testing.assert_allclose(quantizer(w).numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_last_value_quantizer_in_every_float_dtype(dtype):
    """TFMOT's range of the tensor in its own dtype, then ste's fake quantization (tested against numpy in every
    dtype by test_fake_quant.py); in float32 and float64 also numpy's result itself."""
    cast = tf.constant(np.random.default_rng(13).normal(size=(64, 5)), dtype)
    low, high = tfmot_symmetric(float(tf.reduce_min(cast)), float(tf.reduce_max(cast)), 8, True)
    got = ste.qat.LastValueQuantizer(8, per_axis=False, symmetric=True, narrow_range=True)(cast)
    assert got.dtype == dtype
    on_range = ste.qat.fake_quant_op(cast, tf.constant(low), tf.constant(high), bits=8, narrow_range=True)
    np.testing.assert_array_equal(np.asarray(tf.cast(got, tf.float64)), np.asarray(tf.cast(on_range, tf.float64)))
    if dtype in ("float32", "float64"):
        expected = numpy_fake_quant(cast.numpy().astype(np.float64), low, high, 8, True)[0]
        np.testing.assert_allclose(got.numpy(), expected, atol=1e-5)


def test_moving_average_and_all_values_quantizers_follow_tfmots_updates():
    rng = np.random.default_rng(7)
    batches = [rng.uniform(-1, 3, (4, 6)).astype(np.float32), rng.uniform(-4, 2, (4, 6)).astype(np.float32)]
    moving = ste.qat.MovingAverageQuantizer(8, per_axis=False, symmetric=True, narrow_range=False)
    everything = ste.qat.AllValuesQuantizer(8, per_axis=False, symmetric=False, narrow_range=False)
    low, high, all_low, all_high = -6.0, 6.0, 0.0, 0.0
    for x in batches:
        moving(x, training=True)
        everything(x, training=True)
        batch_low, batch_high = tfmot_symmetric(x.min(), x.max(), 8, False)
        low, high = 0.999 * low + 0.001 * batch_low, 0.999 * high + 0.001 * batch_high
        all_low, all_high = min(all_low, x.min(), 0.0), max(all_high, x.max(), 0.0)
    np.testing.assert_allclose([moving.min.numpy(), moving.max.numpy()], [low, high], rtol=1e-6)
    np.testing.assert_allclose([everything.min.numpy(), everything.max.numpy()], [all_low, all_high], rtol=1e-6)
    x = rng.uniform(-5, 5, (4, 6)).astype(np.float32)
    np.testing.assert_allclose(everything(x).numpy(), numpy_fake_quant(x, all_low, all_high)[0], rtol=1e-5, atol=1e-6)


def test_fixed_quantizer_and_refusals():
    x = np.random.default_rng(10).uniform(-0.5, 1.5, 64).astype(np.float32)  # no ties between two levels
    np.testing.assert_allclose(ste.qat.FixedQuantizer(8, 0.0, 1.0, False)(x).numpy(), numpy_fake_quant(x, 0.0, 1.0)[0])
    np.testing.assert_allclose(
        ste.qat.FixedQuantizer(4, -1.0, 2.0, False)(x).numpy(), numpy_fake_quant(x, -1.0, 2.0, bits=4)[0], atol=1e-6
    )
    with pytest.raises(ste.errors.ParameterError, match="must contain 0"):
        ste.qat.FixedQuantizer(8, 0.5, 1.0, False)
    with pytest.raises(ste.errors.ParameterError, match="per_axis"):
        ste.qat.MovingAverageQuantizer(8, per_axis=True, symmetric=False, narrow_range=False)
    with pytest.raises(ste.errors.ParameterError, match="bits"):
        ste.qat.LastValueQuantizer(9, per_axis=False, symmetric=True, narrow_range=True)


# -- the n-bit scheme -------------------------------------------------------------------------------------------


def conv_net() -> keras.Model:
    keras.utils.set_random_seed(9)
    i = keras.Input((6, 6, 2))
    x = L.Flatten()(L.Conv2D(4, 3, activation="relu")(i))
    return keras.Model(i, L.Dense(3)(x))


def test_n_bit_weights_take_2_to_the_b_minus_1_levels_and_convert_to_int8_kernels():
    model = conv_net()
    q = ste.quantize_model(model, scheme=ste.qat.NBitScheme(num_bits_weight=4), strict=True)
    assert {layer.bits for layer in q.layers if isinstance(layer, ste.qat.ActivationFakeQuant)} == {8}
    dense = q.layers[-2]
    kernel = model.layers[-1].kernel.numpy()
    m = np.abs(kernel).max(axis=0) if CONVERTS_PER_CHANNEL else np.abs(kernel).max()  # per output channel, or tensor
    np.testing.assert_allclose(
        dense.quantized_kernels["kernel"].numpy(), np.round(kernel / (m / 7)) * (m / 7), atol=1e-6
    )
    conv = next(layer for layer in q.layers if isinstance(layer, ste.layers.QuantConv2D))
    assert conv.kernel_quantizer.channel_axes == 1 and conv.kernel_quantizer.bits == 4
    flatbuffer = ste.to_tflite(q)
    it = interpreter(flatbuffer)
    packed = _int4_tensor_names(flatbuffer)
    kernels = [
        _unpacked_int4(it.get_tensor(t["index"])) if t["name"] in packed else it.get_tensor(t["index"])
        for t in it.get_tensor_details()
        if t["dtype"] == np.int8 and len(t["shape"]) in (2, 4) and t["shape"][0] in (3, 4)
    ]
    # TFMOT 0.8.1's n-bit models convert the same way: int8 kernels in [−7, 7] (TensorFlow 2.16's converter stores
    # them as packed INT4 tensors, which the interpreter reports as int8 bytes: decoded here nibble by nibble).
    assert len(kernels) == 2
    for values in kernels:
        assert np.abs(values).max() == 7 and np.unique(values).size <= 15


def _int4_tensor_names(flatbuffer: bytes) -> set[str]:
    from tensorflow.lite.python import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(flatbuffer, 0))
    return {t.name.decode() for g in model.subgraphs for t in g.tensors if t.type == schema.TensorType.INT4}


def _unpacked_int4(values: np.ndarray) -> np.ndarray:
    """Two's-complement nibbles, low nibble first, of the first ceil(n / 2) bytes of a packed INT4 tensor."""
    raw = values.reshape(-1).view(np.uint8)[: (values.size + 1) // 2]
    nibbles = np.stack([raw & 0xF, raw >> 4], axis=1).reshape(-1)[: values.size].astype(np.int8)
    return np.where(nibbles > 7, nibbles - 16, nibbles).reshape(values.shape)


def test_n_bit_activations_train_but_tflite_has_no_kernels_for_them():
    q = ste.quantize_model(conv_net(), scheme=ste.qat.NBitScheme(num_bits_activation=4, disable_per_axis=True))
    quantizers = [layer for layer in q.layers if isinstance(layer, ste.qat.ActivationFakeQuant)]
    assert quantizers and {layer.bits for layer in quantizers} == {4}
    conv = next(layer for layer in q.layers if isinstance(layer, ste.layers.QuantConv2D))
    assert conv.kernel_quantizer.channel_axes == 0 and conv.kernel_quantizer.bits == 8
    x = np.random.default_rng(8).uniform(-1, 1, (8, 6, 6, 2)).astype(np.float32)
    levels = (quantizers[0](x).numpy() - quantizers[0].min.numpy()) / (12 / 15)
    assert np.unique(np.round(levels)).size <= 16
    with pytest.raises(ste.errors.ConversionError, match="4 bits.*8-bit activations only"):
        ste.to_tflite(q)
    with pytest.raises(ste.errors.ParameterError, match="bits"):
        ste.qat.NBitScheme(num_bits_weight=1)


# -- fix_input_output_range -------------------------------------------------------------------------------------


def tflite_parameters(low: float, high: float, narrow_range: bool) -> tuple[float, int]:
    """The int8 scale and zero point of a fixed range: scale (max − min)/(255 − q_min), zero point
    q_min − min/scale − 128 (q_min = 1 in the narrow range)."""
    q_min = 1 if narrow_range else 0
    scale = (high - low) / (255 - q_min)
    return scale, round(q_min - low / scale) - 128


@pytest.mark.parametrize(
    ("kind", "input_range", "output_range", "narrow_range"),
    [
        ("sequential", (0.0, 1.0), (0.0, 255.0), False),  # TFMOT's test: 1/255, −128 and 1, −128
        ("sequential", (-127.0, 127.0), (-127.0, 127.0), True),  # 1, 0
        ("functional_dict", (0.0, 255.0), (0.0, 1.0), False),
    ],
)
def test_fix_input_output_range_gives_the_tflite_model_those_scales(kind, input_range, output_range, narrow_range):
    model = small_dense()
    if kind == "functional_dict":
        x = keras.Input((5,), name="x")
        model = keras.Model({"x": x}, {"y": L.Dense(10)(x)})
    q = ste.qat.quantize_apply(ste.qat.quantize_annotate_model(model))
    fixed = ste.qat.fix_input_output_range(q, 8, *input_range, *output_range, narrow_range=narrow_range)
    assert type(fixed) is type(q)
    for mine, theirs in zip(fixed.trainable_weights, q.trainable_weights):  # TFMOT's would start from scratch
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    it = interpreter(ste.to_tflite(fixed, int8_io=True))
    got_in = it.get_input_details()[0]["quantization"]
    got_out = it.get_output_details()[0]["quantization"]
    for got, (low, high) in ((got_in, input_range), (got_out, output_range)):
        scale, zero = tflite_parameters(low, high, narrow_range)
        assert got[0] == pytest.approx(scale, rel=1e-6) and got[1] == zero


def test_fixed_ranges_do_not_move_in_training_and_remove_input_range_drops_the_input_quantizer():
    q = ste.quantize_model(small_dense())
    fixed = ste.qat.fix_input_output_range(q, input_min=-1.0, input_max=1.0, output_min=None, output_max=None)
    first = fixed.layers[0]
    x = np.random.default_rng(9).normal(scale=3.0, size=(32, 5)).astype(np.float32)
    fixed.compile("sgd", "mse")
    fixed.fit(x, np.zeros((32, 10)), verbose=0)
    assert (float(first.min.numpy()), float(first.max.numpy())) == (-1.0, 1.0)
    assert float(fixed.layers[-2].max.numpy()) != float(q.layers[-2].max.numpy())  # the output range still moves
    removed = ste.qat.remove_input_range(q)
    assert kinds(removed) == ["NoOp", "QuantDense", "ActivationFakeQuant", "Dropout"]
    dense, output = removed.layers[1], removed.layers[2]
    np.testing.assert_array_equal(removed.predict(x, verbose=0), output(dense(x)).numpy())
    with pytest.raises(ste.errors.ParameterError, match="not read by an activation quantizer"):
        ste.qat.fix_input_output_range(removed)
    with pytest.raises(ste.errors.ParameterError, match="must contain 0"):
        ste.qat.fix_input_output_range(q, input_min=0.5, input_max=1.0)


#: The abstract methods of TFMOT 0.8.1's QuantizeConfig (tensorflow_model_optimization/python/core/quantization/keras/
#: quantize_config.py, an abc.ABCMeta class).
TFMOT_ABSTRACT = {
    "get_weights_and_quantizers",
    "get_activations_and_quantizers",
    "set_quantize_weights",
    "set_quantize_activations",
    "get_output_quantizers",
    "get_config",
}


def test_a_quantize_config_subclass_follows_tfmots_abstract_methods():
    """A subclass missing one of TFMOT's six abstract methods (here misspelt: get_weight_and_quantizers) is refused
    at instantiation with MissingMethodError naming the method, TFMOT's rule and the fix, before any layer is built;
    the base called with options is the plain per-layer choice and carries no quantizers."""

    class Misspelt(ste.qat.QuantizeConfig):
        def get_weight_and_quantizers(self, layer):
            return [(layer.kernel, ste.qat.LastValueQuantizer(8, per_axis=False, symmetric=True, narrow_range=True))]

        def get_activations_and_quantizers(self, layer):
            return []

        def set_quantize_weights(self, layer, quantize_weights):
            pass

        def set_quantize_activations(self, layer, quantize_activations):
            pass

        def get_output_quantizers(self, layer):
            return []

        def get_config(self):
            return {}

    assert set(ste.qat.QuantizeConfig.__abstractmethods__) == TFMOT_ABSTRACT
    with pytest.raises(ste.errors.MissingMethodError, match=r"(?s)get_weights_and_quantizers.*TFMOT.*Fix: define"):
        Misspelt()
    for name in sorted(TFMOT_ABSTRACT):  # each one missing is refused
        methods = {key: value for key, value in vars(NoOpQuantizeConfig).items() if key in TFMOT_ABSTRACT - {name}}
        partial = type("Partial", (ste.qat.QuantizeConfig,), methods)
        with pytest.raises(ste.errors.MissingMethodError, match=name):
            partial()
    plain = ste.qat.QuantizeConfig(float=True)
    assert isinstance(plain, ste.qat.QuantizeConfig) and not plain.carries_quantizers and plain.float
    assert repr(ste.qat.QuantizeConfig(quantize_output=False)) == "QuantizeConfig(quantize_output=False, float=False)"
