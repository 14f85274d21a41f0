"""Models and pickles written by an earlier ste (``tests/data/saved``) load, and compute what they computed then.

The expected outputs and input gradients in ``expected.npz`` were computed by the ste that wrote the files
(``tests/data/saved/write.py``), so they are a reference independent of the code that loads them: a class or a
function that moved to another module must still be found, by its Keras registration name or its pickled path.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

SAVED = Path(__file__).parent / "data" / "saved"
EXPECTED = dict(np.load(SAVED / "expected.npz"))


def _output_and_gradient(fn, x):
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = fn(xt)
        weights = tf.reshape(tf.cast(tf.range(1, tf.size(y) + 1), y.dtype), tf.shape(y))
        loss = tf.reduce_sum(y * weights)
    return y.numpy(), tape.gradient(loss, xt).numpy()


@pytest.mark.parametrize("name", ["ops", "layers", "qat", "spiking"])
def test_a_saved_keras_file_loads_with_safe_mode_and_computes_as_before(name):
    model = keras.models.load_model(SAVED / f"{name}.keras")  # safe_mode: only registered names, no code
    x = EXPECTED[f"{name}_x"]
    y, dx = _output_and_gradient(lambda t: model(t, training=False), x)
    np.testing.assert_allclose(y, EXPECTED[f"{name}_y"], rtol=1e-6, atol=1e-6)
    # float32 gradients summed in the CPU kernels' order, which oneDNN changes (a spiking gradient, summed over
    # time steps: 3e-5 relative between oneDNN on and off)
    np.testing.assert_allclose(dx, EXPECTED[f"{name}_dx"], rtol=1e-4, atol=1e-6)


def test_saved_ste_layers_load_as_ste_classes():
    model = keras.models.load_model(SAVED / "layers.keras")
    kinds = {type(layer) for layer in model.layers}
    assert {ste.layers.QuantConv2D, ste.layers.QuantDense, ste.layers.BatchNormalization} <= kinds
    spiking = keras.models.load_model(SAVED / "spiking.keras")
    assert isinstance(spiking.get_layer("lif"), ste.spiking.LIF)
    assert spiking.get_layer("lif").surrogate == ste.registry.get("atan(alpha=2.0)")


def _pickled():
    with open(SAVED / "objects.pickle", "rb") as file:
        return pickle.load(file)


def test_pickled_objects_load_as_the_same_kinds():
    objects = _pickled()
    assert isinstance(objects["op"], ste.STEFunction)
    assert objects["surrogate"] == ste.registry.get("atan(alpha=2.0)")
    assert isinstance(objects["quantizer"], ste.quantizers.LSQ)
    assert isinstance(objects["layer"], ste.layers.QuantDense)


@pytest.mark.parametrize("name", ["op", "op_like", "op_surrogate", "quantizer", "layer"])
def test_a_pickled_object_computes_as_before(name):
    obj = _pickled()[name]
    call = (lambda t: obj(t, training=False)) if name in ("quantizer", "layer") else obj
    y, dx = _output_and_gradient(call, EXPECTED["pickle_x"])
    np.testing.assert_allclose(y, EXPECTED[f"pickle_{name}_y"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dx, EXPECTED[f"pickle_{name}_dx"], rtol=1e-5, atol=1e-6)


def test_a_pickled_surrogate_has_the_same_derivative():
    surrogate = _pickled()["surrogate"]
    dx = surrogate.derivative(tf.constant(EXPECTED["pickle_x"])).numpy()
    np.testing.assert_allclose(dx, EXPECTED["pickle_surrogate_dx"], rtol=1e-6)
