"""larq 0.14's larq/quantizers_test.py under ``import ste.larq as lq`` (``tf.keras`` -> ``keras``; larq's
``tf.keras.backend.function`` over a placeholder becomes a call on the values), and larq's saved quantizer configs."""

from __future__ import annotations

import functools

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste.larq as lq
from tests.larq_port.conftest import REFERENCE

RNG = np.random.default_rng(1)


def generate_real_values_with_zeros(low=-2, high=2, shape=(4, 10)):  # larq's testing_utils
    return np.insert(RNG.uniform(low, high, shape), 1, 0, axis=1)


class DummyTrainableQuantizer(keras.layers.Layer):
    """Used to test whether we can set layers as quantizers without any throws."""

    def build(self, input_shape):
        self.dummy_weight = self.add_weight(name="dummy_weight", shape=(), trainable=True)

    def call(self, inputs):
        return self.dummy_weight * inputs


QUANTIZERS = [
    ("ste_sign", lq.quantizers.SteSign),
    ("approx_sign", lq.quantizers.ApproxSign),
    ("ste_heaviside", lq.quantizers.SteHeaviside),
    ("magnitude_aware_sign", lq.quantizers.MagnitudeAwareSign),
    ("swish_sign", lq.quantizers.SwishSign),
    ("ste_tern", lq.quantizers.SteTern),
]


class TestCommonFunctionality:
    @pytest.mark.parametrize("module", [lq.quantizers, keras.activations])
    @pytest.mark.parametrize("name,ref_cls", QUANTIZERS)
    def test_serialization(self, module, name, ref_cls):
        fn = module.get(name)
        assert fn.__class__ == ref_cls or module is keras.activations  # Keras 3: an activation wrapping it
        fn = module.get(ref_cls())
        assert fn.__class__ == ref_cls
        assert type(fn.precision) is int
        config = module.serialize(fn)
        fn = module.deserialize(config)
        assert fn.__class__ == ref_cls
        assert type(fn.precision) is int

    def test_noop_serialization(self):
        fn = lq.quantizers.get(lq.quantizers.NoOp(precision=1))
        assert fn.__class__ == lq.quantizers.NoOp
        assert fn.precision == 1
        fn = lq.quantizers.deserialize(lq.quantizers.serialize(fn))
        assert fn.__class__ == lq.quantizers.NoOp
        assert fn.precision == 1

    def test_invalid_usage(self):
        with pytest.raises(ValueError):
            lq.quantizers.get(42)
        with pytest.raises(ValueError):
            lq.quantizers.get("unknown")
        with pytest.raises(ValueError):
            lq.quantizers.DoReFa(k_bit=2, mode="unknown")

    @pytest.mark.parametrize("quantizer", ["input_quantizer", "kernel_quantizer"])
    @pytest.mark.parametrize("run_eagerly", [False, True])
    def test_layer_as_quantizer(self, quantizer, run_eagerly):
        input_data = (10 * RNG.random((1, 10)) - 0.5).astype("float32")
        model = keras.Sequential(
            [keras.Input((10,)), lq.layers.QuantDense(1, **{quantizer: DummyTrainableQuantizer()})]
        )
        model.compile(optimizer="sgd", loss="mse", run_eagerly=run_eagerly)
        model.fit(input_data, np.ones((1,)), epochs=1, verbose=0)
        assert any("dummy_weight" in var.name for var in model.trainable_variables)


@pytest.mark.parametrize("name", sorted(REFERENCE["quantizers"]))
def test_configs_saved_by_larq_load(name):
    """larq 0.14's ``serialize`` output ({"module": "larq.quantizers", ...}), its class name, and tf.keras 2's form
    load as the same quantizer: the same forward values as larq's on the same input."""
    saved = REFERENCE["quantizers"][name]
    x, y = np.array(saved["x"], "float32"), np.array(saved["y"], "float32")
    config = saved["config"]
    legacy = {"class_name": config["class_name"], "config": config["config"]}
    for form in (config, legacy):
        for get in (lq.quantizers.get, lq.quantizers.deserialize, lq.quantizers.get_kernel_quantizer):
            quantizer = get(form)
            assert type(quantizer).__name__ in (name, "DoReFa")
            np.testing.assert_allclose(quantizer(x), y, rtol=1e-6, atol=1e-7)
    if name != "NoOp":  # larq's NoOp needs its precision
        assert isinstance(lq.quantizers.get(name), lq.quantizers.Quantizer)


def test_larq_constraint_config_loads():
    clip = lq.constraints.deserialize(REFERENCE["constraint"])
    np.testing.assert_array_equal(clip(tf.constant([-1.0, 0.25, 2.0])), [-0.5, 0.25, 0.5])


class TestQuantization:
    @pytest.mark.parametrize(
        "fn",
        [
            "ste_sign",
            lq.quantizers.SteSign(),
            "approx_sign",
            lq.quantizers.ApproxSign(),
            "swish_sign",
            lq.quantizers.SwishSign(),
        ],
    )
    def test_xnor_binarization(self, fn):
        f = lq.quantizers.get(fn)
        binarized_values = RNG.choice([-1, 1], size=(2, 5)).astype("float32")
        np.testing.assert_allclose(f(binarized_values), binarized_values)
        real_values = generate_real_values_with_zeros()
        result = np.asarray(f(real_values))
        assert not np.any(result == 0)
        assert np.all(result[real_values < 0] == -1)
        assert np.all(result[real_values >= 0] == 1)
        assert np.all(np.asarray(f(np.zeros((2, 5)))) == 1)

    @pytest.mark.parametrize("fn", ["ste_heaviside", lq.quantizers.SteHeaviside()])
    def test_and_binarization(self, fn):
        f = lq.quantizers.get(fn)
        binarized_values = RNG.choice([0, 1], size=(2, 5)).astype("float32")
        np.testing.assert_allclose(f(binarized_values), binarized_values)
        real_values = generate_real_values_with_zeros()
        result = np.asarray(f(real_values))
        assert np.all(result[real_values <= 0] == 0)
        assert np.all(result[real_values > 0] == 1)

    def test_magnitude_aware_sign_binarization(self):
        a = RNG.uniform(-2, 2, (3, 2, 2, 3))
        x = tf.Variable(a)
        y = lq.quantizers.MagnitudeAwareSign()(x)
        assert y.shape == x.shape
        np.testing.assert_allclose(tf.sign(y).numpy(), np.sign(a))
        np.testing.assert_allclose(
            tf.reduce_mean(tf.abs(y), axis=[0, 1, 2]).numpy(),
            [np.mean(np.abs(a[:, :, :, i])) for i in range(3)],
        )

    @pytest.mark.parametrize(
        "fn",
        [
            "ste_tern",
            lq.quantizers.SteTern(),
            lq.quantizers.SteTern(ternary_weight_networks=True),
            lq.quantizers.SteTern(threshold_value=float(np.random.default_rng(2).uniform(0.01, 0.8))),
        ],
    )
    def test_ternarization_basic(self, fn):
        f = lq.quantizers.get(fn)
        ternarized_values = RNG.choice([-1, 0, 1], size=(4, 10)).astype("float32")
        result = np.asarray(f(ternarized_values))
        np.testing.assert_allclose(result, ternarized_values)
        real_values = generate_real_values_with_zeros()
        result = np.asarray(f(real_values))
        assert not np.any(result > 1) and not np.any(result < -1)
        assert np.any(result == -1) and np.any(result == 1) and np.any(result == 0)

    @pytest.mark.parametrize("fn", ["ste_tern", lq.quantizers.SteTern()])
    def test_ternarization_with_default_threshold(self, fn):
        test_threshold = 0.05
        real_values = generate_real_values_with_zeros()
        result = np.asarray(lq.quantizers.get(fn)(real_values))
        assert np.all(result[real_values > test_threshold] == 1)
        assert np.all(result[real_values < -test_threshold] == -1)
        assert np.all(result[np.abs(real_values) < test_threshold] == 0)

    def test_ternarization_with_custom_threshold(self):
        test_threshold = float(RNG.uniform(0.01, 0.8))
        real_values = generate_real_values_with_zeros()
        result = np.asarray(lq.quantizers.SteTern(threshold_value=test_threshold)(real_values))
        assert np.all(result[real_values > test_threshold] == 1)
        assert np.all(result[real_values < -test_threshold] == -1)
        assert np.all(result[np.abs(real_values) < test_threshold] == 0)

    def test_ternarization_with_ternary_weight_networks(self):
        real_values = generate_real_values_with_zeros()
        test_threshold = 0.7 * np.sum(np.abs(real_values)) / np.size(real_values)
        result = np.asarray(lq.quantizers.SteTern(ternary_weight_networks=True)(real_values))
        assert np.all(result[real_values > test_threshold] == 1)
        assert np.all(result[real_values < -test_threshold] == -1)
        assert np.all(result[np.abs(real_values) < test_threshold] == 0)

    @pytest.mark.parametrize("k_bit", [1, 2, 4, 6, 8])
    @pytest.mark.parametrize("mode", ["activations", "weights"])
    def test_dorefa_quantize(self, k_bit, mode):
        real_values = generate_real_values_with_zeros()
        result = np.asarray(lq.quantizers.DoReFa(k_bit, mode)(real_values))
        n = 2**k_bit - 1
        if mode == "weights":
            divider = np.amax(np.abs(np.tanh(real_values)))
            real_values = np.tanh(real_values) / divider / 2.0 + 0.5
            result = result / 2.0 + 0.5
        assert not np.any(result > 1) and not np.any(result < 0)
        for i in range(n + 1):
            window = (real_values > (2 * i - 1) / (2 * n)) & (real_values < (2 * i + 1) / (2 * n))
            np.testing.assert_allclose(result[window], i / n, atol=1e-6)


def _gradient(fn, x):
    tf_x = tf.Variable(x)
    with tf.GradientTape() as tape:
        activation = fn(tf_x)
    return tape.gradient(activation, tf_x).numpy()


class TestGradients:
    @pytest.mark.parametrize(
        "fn",
        [
            lq.quantizers.SteSign(clip_value=None),
            lq.quantizers.SteTern(clip_value=None),
            lq.quantizers.SteHeaviside(clip_value=None),
        ],
    )
    def test_identity_ste_grad(self, fn):
        x = generate_real_values_with_zeros(shape=(8, 3, 3, 16))
        np.testing.assert_allclose(_gradient(fn, x), np.ones_like(x))

    @pytest.mark.parametrize("fn", [lq.quantizers.SteSign(), lq.quantizers.SteTern(), lq.quantizers.SteHeaviside()])
    def test_ste_grad(self, fn):
        x = generate_real_values_with_zeros(shape=(8, 3, 3, 16))
        np.testing.assert_allclose(_gradient(fn, x), np.where(np.abs(x) <= 1, 1.0, 0.0))

    def test_swish_grad(self):
        def swish_grad(x, beta):
            return beta * (2 - beta * x * np.tanh(beta * x / 2)) / (1 + np.cosh(beta * x))

        x = generate_real_values_with_zeros(shape=(8, 3, 3, 16))
        np.testing.assert_allclose(_gradient(lq.quantizers.SwishSign(), x), swish_grad(x, beta=5.0))
        np.testing.assert_allclose(_gradient(lq.quantizers.SwishSign(beta=10.0), x), swish_grad(x, beta=10.0))

    def test_approx_sign_grad(self):
        x = generate_real_values_with_zeros(shape=(8, 3, 3, 16))
        expected = np.where(np.abs(x) <= 1, 2 - 2 * np.abs(x), 0.0)
        np.testing.assert_allclose(_gradient(lq.quantizers.ApproxSign(), x), expected)

    def test_magnitude_aware_sign_grad(self):
        a = RNG.uniform(-2, 2, (3, 2, 2, 3))
        scale_vector = [np.mean(np.abs(a[:, :, :, i])) for i in range(3)]
        expected = np.where(abs(a) < 1, np.ones(a.shape) * scale_vector, 0)
        np.testing.assert_allclose(_gradient(lq.quantizers.MagnitudeAwareSign(), a), expected)

    @pytest.mark.parametrize("mode", ["activations", "weights"])
    def test_dorefa_ste_grad(self, mode):
        x = generate_real_values_with_zeros(shape=(8, 3, 3, 16))
        if mode == "activations":
            expected = np.where((x <= 1) & (x >= 0), 1.0, 0.0)
        else:
            expected = 1 / (np.cosh(x) ** 2.0) / np.amax(np.abs(np.tanh(x)))
        np.testing.assert_allclose(_gradient(lq.quantizers.DoReFa(2, mode), x), expected)


def _flip_ratio_metrics(model):
    model.compile(loss="mse", optimizer="sgd")
    model.fit(np.ones((4, 32), "float32"), np.zeros((4, 3), "float32"), epochs=1, verbose=0)
    return [m for m in model.metrics if m.name.startswith("flip_ratio")]


@pytest.mark.filterwarnings("ignore:.*has a binary")
@pytest.mark.parametrize(
    "quantizer",
    [
        *QUANTIZERS,
        ("dorefa_quantizer", lq.quantizers.DoReFa),
        ("dorefa_quantizer", functools.partial(lq.quantizers.DoReFa, mode="weights")),
    ],
)
def test_metrics(quantizer):
    """larq counts the metrics on the quantizer (``kernel_quantizer._metrics``); ste keeps them on the layer:
    none by default, one FlipRatio from metrics_scope, one from the quantizer's own ``metrics=``."""
    quantizer_str, quantizer_cls = quantizer
    model = keras.Sequential([keras.Input((32,)), lq.layers.QuantDense(3, kernel_quantizer=quantizer_str)])
    assert len(_flip_ratio_metrics(model)) == 0
    with lq.context.metrics_scope(["flip_ratio"]):
        model = keras.Sequential([keras.Input((32,)), lq.layers.QuantDense(3, kernel_quantizer=quantizer_str)])
    assert len(_flip_ratio_metrics(model)) == 1
    model = keras.Sequential(
        [keras.Input((32,)), lq.layers.QuantDense(3, kernel_quantizer=quantizer_cls(metrics=["flip_ratio"]))]
    )
    assert len(_flip_ratio_metrics(model)) == 1


def test_get_kernel_quantizer_assigns_metrics():
    with lq.context.metrics_scope(["flip_ratio"]):
        ste_sign = lq.quantizers.get_kernel_quantizer("ste_sign")
        assert "flip_ratio" in lq.context.get_training_metrics()
    assert isinstance(ste_sign, lq.quantizers.SteSign)
    assert "flip_ratio" in ste_sign._custom_metrics


def test_get_kernel_quantizer_accepts_function():
    custom_quantizer = lq.quantizers.get_kernel_quantizer(lambda x: x)
    assert callable(custom_quantizer)
    assert not hasattr(custom_quantizer, "_custom_metrics")


def test_backwards_compat_aliases():
    assert lq.quantizers.DoReFaQuantizer == lq.quantizers.DoReFa
    assert lq.quantizers.NoOpQuantizer == lq.quantizers.NoOp
