"""QAT under ``tf.distribute.MirroredStrategy`` with two logical CPU devices (tests/conftest.py): one ``fit`` step on a
global batch gives the weights and activation ranges of the same step on one device."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

L = keras.layers


def _two_replicas() -> tf.distribute.Strategy:
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
    if len(devices) < 2:
        pytest.skip("needs the two logical CPU devices set up by conftest.py")
    # ReductionToOneDevice: no collective ops (their keys could clash with another strategy in this process)
    return tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())


def _qat_model() -> keras.Model:
    keras.utils.set_random_seed(5)
    i = keras.Input((6, 6, 2))
    x = L.Conv2D(4, 3, activation="relu")(i)
    x = L.MaxPooling2D()(x)
    x = L.Flatten()(x)
    q = ste.quantize_model(keras.Model(i, L.Dense(3)(x)), strict=True)
    q.compile(keras.optimizers.SGD(0.5), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return q


def test_one_fit_step_under_two_replicas_equals_one_device():
    rng = np.random.default_rng(0)
    # the two halves of the batch have different ranges: a per-replica min/max would not be the global one
    x = np.concatenate([rng.uniform(-1, 1, (8, 6, 6, 2)), rng.uniform(-3, 2, (8, 6, 6, 2))]).astype(np.float32)
    y = rng.integers(0, 3, 16)
    single = _qat_model()
    single.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    with _two_replicas().scope():
        mirrored = _qat_model()
    mirrored.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(single.weights, mirrored.weights):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-5, atol=1e-6, err_msg=a.path)
    # the input quantizer moved towards the global batch's min and max (numpy), not a replica's
    first = single.layers[1]
    assert isinstance(first, ste.qat.ActivationFakeQuant)
    np.testing.assert_allclose(first.min.numpy(), -6 * 0.999 + x.min() * 0.001, rtol=1e-6)
    np.testing.assert_allclose(first.max.numpy(), 6 * 0.999 + x.max() * 0.001, rtol=1e-6)
