"""The missing-kernel-constraint warning: once, when the user builds the layer; never on load; only for binary
quantizers whose gradient vanishes outside a clip range (larq warns for every binary kernel quantizer)."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste


def _caught(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    return result, [w for w in caught if "has a binary" in str(w.message)]


def test_constructing_does_not_warn_building_warns_once():
    layer, caught = _caught(lambda: ste.layers.QuantConv2D(4, 3, kernel_quantizer="ste_sign"))
    assert caught == []
    _, caught = _caught(lambda: layer(np.zeros((1, 5, 5, 2), "float32")))
    assert len(caught) == 1 and "QuantConv2D" in str(caught[0].message) and __file__ == caught[0].filename
    _, caught = _caught(lambda: layer(np.zeros((1, 5, 5, 2), "float32")))  # called again: already built
    assert caught == []


def test_loading_a_saved_model_does_not_warn(tmp_path):
    def build():
        return keras.Sequential([keras.Input((4,)), ste.layers.QuantDense(3, kernel_quantizer="ste_sign")])

    model, caught = _caught(build)
    assert len(caught) == 1
    model.save(tmp_path / "m.keras")
    restored, caught = _caught(lambda: keras.models.load_model(tmp_path / "m.keras"))
    assert caught == []
    x = np.random.default_rng(0).normal(size=(2, 4)).astype("float32")
    np.testing.assert_array_equal(restored.predict(x, verbose=0), model.predict(x, verbose=0))


@pytest.mark.parametrize(
    "quantizer",
    [
        "ste_sign(clip_value=None)",  # straight-through without clipping: gradient 1 everywhere
        "sign(surrogate='identity')",
        "magnitude_aware_sign(surrogate='straight_through(clip=None)')",
    ],
)
def test_no_warning_when_the_gradient_does_not_vanish(quantizer):
    # the premise, checked independently: the gradient at a latent weight of ±1000 is not zero
    x = tf.constant([-1000.0, 1000.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = ste.quantizers.get(quantizer)(x)
    assert np.all(tape.gradient(y, x).numpy() != 0)
    _, caught = _caught(lambda: ste.layers.QuantDense(3, kernel_quantizer=quantizer).build((None, 4)))
    assert caught == []


@pytest.mark.parametrize("quantizer", ["ste_sign", "approx_sign", "ste_sign(clip_value=1.25)", "swish_sign"])
def test_warning_when_the_gradient_vanishes_outside_a_clip_range(quantizer):
    _, caught = _caught(lambda: ste.layers.QuantDense(3, kernel_quantizer=quantizer).build((None, 4)))
    assert len(caught) == 1


def test_a_user_quantizer_function_with_an_identity_gradient_does_not_warn():
    @tf.custom_gradient
    def unclipped_sign(x):  # DoReFa-Net's weight binarization: identity gradient everywhere
        return ste.larq.math.sign(x), lambda dy: dy

    unclipped_sign.precision = 1
    _, caught = _caught(lambda: ste.layers.QuantConv2D(2, 3, kernel_quantizer=unclipped_sign).build((None, 5, 5, 1)))
    assert caught == []
