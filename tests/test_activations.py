"""larq's activations: values and gradients against numpy (REFERENCE.md §6), in every float dtype."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

FLOATS = [tf.float16, tf.bfloat16, tf.float32, tf.float64]
# Away from the kinks at ±1 (there TensorFlow's subgradients apply, checked separately below).
X = np.array([-5.0, -2.0, -1.5, -0.75, -0.25, 0.0, 0.25, 0.75, 1.5, 2.0, 5.0])


def _value_and_grad(fn, x, dtype):
    xt = tf.constant(x, dtype=dtype)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = fn(xt)
    assert y.dtype == dtype
    return y.numpy().astype(np.float64), tape.gradient(y, xt).numpy().astype(np.float64)


@pytest.mark.parametrize("dtype", FLOATS)
def test_hard_tanh(dtype):
    y, g = _value_and_grad(ste.activations.hard_tanh, X, dtype)
    np.testing.assert_array_equal(y, np.clip(X, -1, 1))
    np.testing.assert_array_equal(g, (np.abs(X) <= 1).astype(float))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("alpha", [0.2, 0.5])
def test_leaky_tanh(dtype, alpha):
    y, g = _value_and_grad(lambda x: ste.activations.leaky_tanh(x, alpha=alpha), X, dtype)
    expected = np.clip(X, -1, 1) + alpha * (np.maximum(X, 1) - 1) + alpha * (np.minimum(X, -1) + 1)
    tol = {tf.float16: 1e-2, tf.bfloat16: 2e-2}.get(dtype, 1e-6)
    np.testing.assert_allclose(y, expected, rtol=tol)
    np.testing.assert_allclose(g, np.where(np.abs(X) < 1, 1.0, alpha), rtol=tol)


def test_leaky_tanh_matches_finite_differences_and_larq_at_the_kinks():
    x = np.array([-3.0, -0.3, 0.4, 2.5])
    _, g = _value_and_grad(ste.activations.leaky_tanh, x, tf.float64)
    eps = 1e-6
    fd = (ste.activations.leaky_tanh(x + eps).numpy() - ste.activations.leaky_tanh(x - eps).numpy()) / (2 * eps)
    np.testing.assert_allclose(g, fd, rtol=1e-6)
    _, g_kinks = _value_and_grad(ste.activations.leaky_tanh, np.array([-1.0, 1.0]), tf.float64)
    np.testing.assert_allclose(g_kinks, [1.2, 1.2])  # larq's formula through TensorFlow's subgradients: 1 + alpha


def test_activations_save_and_load_in_a_model(tmp_path):
    inputs = keras.Input((3,))
    hidden = keras.layers.Dense(4, activation=ste.activations.leaky_tanh)(inputs)
    outputs = keras.layers.Activation(ste.activations.hard_tanh)(hidden)
    model = keras.Model(inputs, outputs)
    path = tmp_path / "m.keras"
    model.save(path)
    restored = keras.saving.load_model(path)
    x = np.random.default_rng(0).normal(size=(5, 3)).astype("float32") * 3
    np.testing.assert_allclose(restored(x).numpy(), model(x).numpy())


def test_leaky_tanh_rejects_a_bad_alpha():
    with pytest.raises(ste.errors.ParameterError, match="alpha"):
        ste.activations.leaky_tanh(X, alpha=float("nan"))


def test_register_gives_a_function_a_keras_activation_name():
    def cube_halved(x):
        return x**3 / 2

    assert ste.activations.register("test_register_cube_halved", cube_halved) is cube_halved
    assert keras.activations.get("test_register_cube_halved") is cube_halved
    x = np.array([[-2.0, 0.5, 3.0]], "float32")
    layer = keras.layers.Activation("test_register_cube_halved")
    np.testing.assert_allclose(layer(x).numpy(), x**3 / 2)
    dense = keras.layers.Dense(2, activation="test_register_cube_halved", kernel_initializer="ones")
    np.testing.assert_allclose(dense(x).numpy(), np.full((1, 2), 1.5**3 / 2), rtol=1e-6)


def test_register_refuses_a_keras_name_and_keeps_its_meaning():
    relu = keras.activations.get("relu")
    with pytest.raises(ste.errors.RegistrationError, match=r"'relu' is Keras's own activation name.*Fix:"):
        ste.activations.register("relu", lambda x: x)
    assert keras.activations.get("relu") is relu
    np.testing.assert_array_equal(keras.activations.get("relu")(np.array([-1.0, 2.0])), [0.0, 2.0])


@pytest.mark.parametrize(("name", "function"), [(3, abs), ("not a name", abs), ("fine_name", 3), ("cls", int)])
def test_register_refuses_a_bad_name_or_function(name, function):
    with pytest.raises(ste.errors.ParameterTypeError, match="ste.activations.register.*Fix:"):
        ste.activations.register(name, function)
