"""Recipe: a Keras model computes tanh(x) in the forward pass, but backprop
skips tanh's derivative.

Run: python examples/recipe_skip_derivative.py
"""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np
import tensorflow as tf

import ste

# Forward tanh(x); backward "identity": the upstream gradient passes through
# as if tanh were not there.
tanh_skip = ste.forward(tf.tanh).backward("identity")


@keras.saving.register_keras_serializable(package="recipes")
class SkipDerivative(keras.layers.Layer):
    """Apply a parameter-free activation in the forward pass; pass gradients
    through unchanged."""

    def __init__(self, activation: str = "tanh", **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.activation = activation
        self._op = ste.forward(keras.activations.get(activation)).backward(
            "identity"
        )

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        return self._op(inputs)

    def get_config(self) -> dict[str, object]:
        return {**super().get_config(), "activation": self.activation}


def build_model(seed: int = 0) -> keras.Model:
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(6, name="hidden")(inputs)
    hidden = SkipDerivative("tanh", name="skip_tanh")(hidden)
    outputs = keras.layers.Dense(1, name="out")(hidden)
    return keras.Model(inputs, outputs)


def main(directory: str | None = None) -> None:
    """Run the recipe; the saved model goes into `directory` (default: a
    temporary directory, removed after)."""
    x = tf.constant([-3.0, -1.0, 0.0, 1.0, 3.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tanh_skip(x)
    print("forward:  ", np.round(y.numpy(), 4), "(tanh)")
    print("gradient: ", tape.gradient(y, x).numpy(), "(identity)")

    model = build_model()
    model.compile(optimizer="adam", loss="mse")
    rng = np.random.default_rng(0)
    features = rng.normal(size=(128, 4)).astype(np.float32)
    targets = np.tanh(features.sum(axis=1, keepdims=True)).astype(np.float32)
    history = model.fit(features, targets, epochs=5, batch_size=32, verbose=0)
    losses = history.history["loss"]
    print(f"training loss: {losses[0]:.3f} -> {losses[-1]:.3f}")

    # removed afterwards, unless a directory is given
    with tempfile.TemporaryDirectory() as temporary:
        path = os.path.join(directory or temporary, "skip_derivative.keras")
        model.save(path)
        restored = keras.models.load_model(path)
        assert np.allclose(
            restored.predict(features, verbose=0),
            model.predict(features, verbose=0),
        )
        print("saved and reloaded:", path)


if __name__ == "__main__":
    main()
