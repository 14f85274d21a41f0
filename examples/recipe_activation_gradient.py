"""Recipe: ReLU in the forward pass, backpropagate as if the activation had
been sigmoid.

Run: python examples/recipe_activation_gradient.py
"""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np
import tensorflow as tf

import ste

# The op: relu(x) forward; the gradient is sigmoid'(x) = s(x)·(1 − s(x)) at
# the same x.
relu = ste.forward(tf.nn.relu)
relu_with_sigmoid_gradient = relu.backward_like(tf.nn.sigmoid)

# The same gradient from the registry (sigmoid_surrogate at beta=1 is
# sigmoid'), e.g. to try another beta.
relu_with_surrogate = relu.backward("sigmoid_surrogate", beta=1.0)


def forward_and_gradient(
    op: ste.STEFunction, x: tf.Tensor
) -> tuple[np.ndarray, np.ndarray]:
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = op(x)
    return y.numpy(), tape.gradient(y, x).numpy()


def build_model(seed: int = 0) -> keras.Model:
    """A small regression net whose hidden activation is the op: any Keras
    `activation=` accepts it (and saves it)."""
    keras.utils.set_random_seed(seed)
    return keras.Sequential([
        keras.Input((3,)),
        keras.layers.Dense(
            8, activation=relu_with_sigmoid_gradient, name="hidden"
        ),
        keras.layers.Dense(1, name="out"),
    ])


def data(n: int = 256, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    y = (
        np.maximum(x @ np.array([1.0, -2.0, 0.5]), 0.0)
        + 0.1 * rng.normal(size=n)
    ).astype(np.float32)
    return x, y[:, None]


def main(directory: str | None = None) -> None:
    """Run the recipe; the saved model goes into `directory` (default: a
    temporary directory, removed after)."""
    x = tf.constant([-2.0, -0.5, 0.0, 0.5, 2.0])
    y, grad = forward_and_gradient(relu_with_sigmoid_gradient, x)
    print("x:        ", x.numpy())
    print("forward:  ", y, "(relu)")
    print("gradient: ", np.round(grad, 4), "(sigmoid')")
    _, grad_registry = forward_and_gradient(relu_with_surrogate, x)
    assert np.allclose(grad, grad_registry, atol=1e-6)

    model = build_model()
    model.compile(optimizer=keras.optimizers.Adam(0.02), loss="mse")
    features, targets = data()
    history = model.fit(features, targets, epochs=20, batch_size=64, verbose=0)
    losses = history.history["loss"]
    print(f"training loss: {losses[0]:.3f} -> {losses[-1]:.3f}")

    # The op names its functions (tf.nn.relu, tf.nn.sigmoid), so the model saves
    # and loads like any Keras model.
    # removed afterwards, unless a directory is given
    with tempfile.TemporaryDirectory() as temporary:
        path = os.path.join(directory or temporary, "activation_gradient.keras")
        model.save(path)
        restored = keras.models.load_model(path)
        assert np.allclose(
            restored.predict(features, verbose=0),
            model.predict(features, verbose=0),
        )
        print("saved and reloaded:", path)


if __name__ == "__main__":
    main()
