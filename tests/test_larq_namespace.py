"""ste.larq: larq model code runs on Keras 3 after `import larq as lq` -> `import ste.larq as lq`, tf.keras -> keras."""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
import ste.larq as lq
from tests.helpers import load_example

RNG = np.random.default_rng(0)
ZOO = load_example("larq_zoo")  # the larq-style definitions (also run with larq itself)
LARQ_OUTPUTS = np.load(Path(__file__).resolve().parent / "data" / "larq_outputs.npz")


# --- the same models written with ste's own names ---------------------------------------------------------------
def birealnet_ste():
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(8, 3, padding="same", use_bias=False)(inputs)
    x = keras.layers.BatchNormalization(momentum=0.8)(x)
    for filters in (8, 16):
        shortcut = x
        if x.shape[-1] != filters:
            shortcut = keras.layers.AveragePooling2D(2, strides=2, padding="same")(shortcut)
            shortcut = keras.layers.Conv2D(filters, 1, use_bias=False)(shortcut)
            shortcut = keras.layers.BatchNormalization(momentum=0.8)(shortcut)
        x = ste.layers.QuantConv2D(
            filters,
            3,
            strides=1 if filters == x.shape[-1] else 2,
            padding="same",
            input_quantizer=ste.quantizers.Sign(surrogate="approx_sign"),
            kernel_quantizer=ste.quantizers.MagnitudeAwareSign(),
            kernel_constraint=ste.constraints.WeightClip(1.0),
            use_bias=False,
        )(x)
        x = keras.layers.Add()([keras.layers.BatchNormalization(momentum=0.8)(x), shortcut])
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(10)(x))


def quicknet_ste():
    sign = "sign(surrogate='straight_through(clip=1.25)')"
    inputs = keras.Input((16, 16, 3))
    x = ste.layers.QuantConv2D(8, 3, padding="same", strides=2, use_bias=False)(inputs)
    x = keras.layers.BatchNormalization()(x)
    x = ste.layers.QuantDepthwiseConv2D(3, padding="same", use_bias=False)(keras.layers.ReLU()(x))
    x = keras.layers.BatchNormalization(scale=False, center=False)(x)
    for _ in range(2):
        y = ste.layers.QuantConv2D(
            8,
            3,
            activation="relu",
            padding="same",
            pad_values=1.0,
            use_bias=False,
            input_quantizer=sign,
            kernel_quantizer=sign,
            kernel_constraint=ste.constraints.WeightClip(1.25),
        )(x)
        x = keras.layers.Add()([keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-5)(y), x])
    x = keras.layers.GlobalAveragePooling2D()(keras.layers.ReLU()(x))
    return keras.Model(inputs, ste.layers.QuantDense(10)(x))


PAIRS = [("birealnet_block_net", birealnet_ste), ("quicknet_block_net", quicknet_ste)]


@pytest.mark.parametrize("name, ste_style", PAIRS)
def test_larq_style_model_equals_the_ste_model(name, ste_style):
    ours, reference = ZOO.SMALL[name](lq, keras), ste_style()
    assert ours.count_params() == reference.count_params()
    assert ste.summary(ours, print_fn=None).params == ste.summary(reference, print_fn=None).params
    reference.set_weights(ours.get_weights())  # larq's get_weights -> set_weights also moves trained larq weights
    # inputs away from 0, and BN statistics that move pre-activations off 0 too (a sign's tie would be fragile)
    x = RNG.uniform(0.1, 1.0, size=(4, 16, 16, 3)).astype("float32") * RNG.choice([-1, 1], size=(4, 16, 16, 3))
    np.testing.assert_allclose(ours(x, training=False), reference(x, training=False), rtol=1e-5, atol=1e-5)
    # one training step moves both the same way
    with tf.GradientTape(persistent=True) as tape:
        loss_ours = tf.reduce_sum(ours(x, training=True) ** 2)
        loss_ref = tf.reduce_sum(reference(x, training=True) ** 2)
    for g_ours, g_ref in zip(
        tape.gradient(loss_ours, ours.trainable_weights), tape.gradient(loss_ref, reference.trainable_weights)
    ):
        np.testing.assert_allclose(g_ours, g_ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", [name for name, _ in PAIRS])
def test_larq_weights_give_larqs_outputs(name):
    """Weights and outputs saved by larq 0.14 itself (examples/larq_zoo.py --larq-reference): set_weights moves them."""
    model = ZOO.SMALL[name](lq, keras)
    model.set_weights([LARQ_OUTPUTS[key] for key in sorted(LARQ_OUTPUTS.files) if key.startswith(f"{name}/w")])
    x, y = LARQ_OUTPUTS[f"{name}/x"], LARQ_OUTPUTS[f"{name}/y"]
    np.testing.assert_allclose(model(x, training=False), y, rtol=1e-4, atol=1e-3 * np.abs(y).max())


def test_names_are_stes_objects():
    for name in lq.layers.__all__:  # larq's conventions on ste's layers (the construction-time warning)
        assert issubclass(getattr(lq.layers, name), getattr(ste.layers, name)), name
    with pytest.raises(ste.errors.UnsupportedLayerError, match="Keras 3"):
        lq.layers.QuantLocallyConnected2D  # noqa: B018
    assert lq.quantizers.DoReFaQuantizer is lq.quantizers.DoReFa
    assert issubclass(lq.quantizers.DoReFa, ste.quantizers.DoReFa)  # larq's k_bit=, ste's computation
    assert issubclass(lq.quantizers.MagnitudeAwareSign, ste.quantizers.MagnitudeAwareSign)  # larq's clip_value=
    assert issubclass(lq.quantizers.SteSign, ste.quantizers.Sign)
    assert lq.constraints.WeightClip is ste.constraints.WeightClip is lq.constraints.weight_clip
    assert lq.quantizers.NoOp is lq.quantizers.NoOpQuantizer is ste.quantizers.NoOp
    for name in ("SteSign", "ApproxSign", "SwishSign", "SteHeaviside", "SteTern", "DoReFaQuantizer", "ste_sign"):
        assert name in lq.quantizers.__all__ and not hasattr(ste.quantizers, name), name  # larq's names: ste.larq's
    assert (lq.optimizers.Bop, lq.optimizers.CaseOptimizer) == (ste.optimizers.Bop, ste.optimizers.CaseOptimizer)
    assert lq.callbacks.HyperparameterScheduler is ste.callbacks.HyperparameterScheduler
    assert lq.activations.hard_tanh is ste.activations.hard_tanh
    assert lq.activations.leaky_tanh is ste.activations.leaky_tanh
    assert lq.metrics.FlipRatio is ste.metrics.FlipRatio
    assert lq.models.summary(ZOO.SMALL["birealnet_block_net"](lq, keras), print_fn=lambda _: None).weight_count() > 0


def test_math_sign_and_heaviside_match_larq_definitions():
    x = np.array([-2.0, -0.0, 0.0, 1e-30, 3.0], dtype="float32")
    np.testing.assert_array_equal(lq.math.sign(x), np.sign(np.sign(x) + 0.1))  # larq: sign(sign(x) + 0.1)
    np.testing.assert_array_equal(lq.math.heaviside(x), np.sign(np.maximum(x, 0)))  # larq: sign(relu(x))
    for dtype in ("float16", "bfloat16", "float32", "float64"):
        assert lq.math.sign(tf.constant([1.0], dtype)).dtype == dtype


def test_quantizer_serialization_round_trip():
    quantizer = lq.quantizers.SteSign(clip_value=1.25)
    restored = lq.quantizers.deserialize(lq.quantizers.serialize(quantizer))
    assert type(restored) is type(quantizer) and restored.get_config() == quantizer.get_config()
    clip = lq.constraints.deserialize(lq.constraints.serialize(lq.constraints.WeightClip(0.5)))
    np.testing.assert_array_equal(clip(tf.constant([-1.0, 0.25, 2.0])), [-0.5, 0.25, 0.5])


def test_user_quantizer_with_set_precision_and_registration(tmp_path):
    @lq.utils.set_precision(1)
    @lq.utils.register_keras_custom_object
    def scaled_sign(x):  # XNOR-Net's weight quantizer, as larq-zoo writes it
        x = tf.clip_by_value(x, -1, 1)
        return tf.reduce_mean(tf.abs(x), axis=[0], keepdims=True) * lq.quantizers.SteSign()(x)

    model = keras.Sequential(
        [keras.Input((4,)), lq.layers.QuantDense(3, kernel_quantizer=scaled_sign, kernel_constraint="weight_clip")]
    )
    assert ste.summary(model, print_fn=None).params == {1: 12, 32: 3}
    model.save(tmp_path / "m.keras")
    restored = keras.models.load_model(tmp_path / "m.keras")
    x = RNG.normal(size=(2, 4)).astype("float32")
    np.testing.assert_allclose(restored.predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-6)


def test_registered_function_names_work_as_strings():
    @lq.utils.set_precision(1)
    @lq.utils.register_keras_custom_object
    def larqsummary_unclipped_sign(x):
        @tf.custom_gradient
        def _sign(x):
            return lq.math.sign(x), lambda dy: dy

        return _sign(x)

    @lq.utils.register_keras_custom_object
    def larqsummary_clip01(x):
        return tf.clip_by_value(x, 0, 1)

    layer = lq.layers.QuantDense(2, kernel_quantizer="larqsummary_unclipped_sign", activation="larqsummary_clip01")
    assert layer.kernel_quantizer is larqsummary_unclipped_sign
    act = keras.layers.Activation("larqsummary_clip01")
    np.testing.assert_array_equal(act(np.array([-1.0, 0.5, 2.0], "float32")), [0.0, 0.5, 1.0])
    # ste's own names keep their meaning; Keras's too
    assert isinstance(lq.quantizers.get("ste_sign"), ste.larq.quantizers.SteSign)
    assert lq.utils.register_keras_custom_object(larqsummary_clip01) is larqsummary_clip01  # idempotent
    assert keras.activations.get("relu") is keras.activations.relu
