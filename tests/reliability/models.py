"""Small binarized Keras models built with the ste DSL, shared by the distribution, failure and process tests.

Self-contained (absolute imports only) so that worker subprocesses can import it by path. The learnable clipping
activation ``LearnedClip`` is a PACT-style quantizer written with the DSL here (an explicit two-input rule:
d/dx = 1[0 <= x <= a], d/da = sum(1[x >= a]), Choi et al. 2018), so the tests cover a learnable op whatever the
quantizer branch provides.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

import ste

PACKAGE = "ste_reliability_tests"


def sign(x: tf.Tensor) -> tf.Tensor:
    """sign with sign(0) = +1."""
    return tf.where(x >= 0, tf.ones_like(x), -tf.ones_like(x))


binarize = ste.forward(sign).backward("straight_through", clip=1.0)


@ste.forward
def learned_clip(x: tf.Tensor, alpha: tf.Tensor, levels: int = 3) -> tf.Tensor:
    """PACT forward: clip(x, 0, alpha) quantized to ``levels`` steps (round half to even)."""
    clipped = tf.clip_by_value(x, tf.zeros_like(alpha), alpha)
    return tf.round(clipped / alpha * levels) / levels * alpha


@learned_clip.backward
def learned_clip(dy: tf.Tensor, x: tf.Tensor, alpha: tf.Tensor, levels: int = 3) -> tuple[tf.Tensor, tf.Tensor]:
    inside = tf.cast((x >= 0) & (x <= alpha), dy.dtype)
    above = tf.cast(x >= alpha, dy.dtype)
    return dy * inside, tf.reshape(tf.reduce_sum(dy * above), tf.shape(alpha))


@keras.saving.register_keras_serializable(PACKAGE)
class BinaryDense(keras.layers.Layer):
    """Dense layer with a binarized kernel (and binarized inputs unless ``binary_inputs=False``)."""

    def __init__(self, units: int, binary_inputs: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.units = units
        self.binary_inputs = binary_inputs

    def build(self, input_shape: Any) -> None:
        self.kernel = self.add_weight(
            name="kernel",
            shape=(int(input_shape[-1]), self.units),
            initializer=keras.initializers.RandomUniform(-1.0, 1.0),
            constraint=lambda w: keras.ops.clip(w, -1.0, 1.0),
        )
        self.bias = self.add_weight(name="bias", shape=(self.units,), initializer="zeros")

    def call(self, inputs: Any) -> Any:
        x = binarize(inputs) if self.binary_inputs else inputs
        return tf.matmul(x, binarize(self.kernel)) + self.bias

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "units": self.units, "binary_inputs": self.binary_inputs}


@keras.saving.register_keras_serializable(PACKAGE)
class LearnedClip(keras.layers.Layer):
    """PACT-style activation with a learnable clipping level ``alpha`` (passed to the op as a positional input)."""

    def __init__(self, alpha: float = 2.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.initial_alpha = alpha

    def build(self, input_shape: Any) -> None:
        self.alpha = self.add_weight(
            name="alpha", shape=(), initializer=keras.initializers.Constant(self.initial_alpha)
        )

    def call(self, inputs: Any) -> Any:
        return learned_clip(inputs, self.alpha)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "alpha": self.initial_alpha}


HAS_QUANTIZERS = hasattr(ste, "quantizers")  # the quantizer package (LSQ, PACT), when this checkout has it


def make_model(
    seed: int = 0, extra_layers: tuple[Any, ...] = (), lsq: bool = HAS_QUANTIZERS, pact: bool = HAS_QUANTIZERS
) -> keras.Model:
    """A small binarized classifier with learnable quantizers.

    8 inputs → [PACT] → [LSQ] → BinaryDense(16) → LearnedClip → BinaryDense(3): binary kernels, quantized
    activations, ste.quantizers.PACT (learned clipping level) and LSQ (learned step) when asked (default: when the
    package has them). Every learnable parameter gets a non-zero gradient. The gradient reaching the inputs passes
    through the custom rules (autodiff alone would give zero through the rounding), so comparing input gradients
    checks that they are in effect.
    """
    keras.utils.set_random_seed(seed)
    layers: list[Any] = [keras.Input((8,))]
    if pact:
        layers.append(ste.quantizers.PACT(bits=4, alpha=1.0, name="pact"))
    if lsq:
        layers.append(ste.quantizers.LSQ(bits=4, name="lsq"))
    layers += [BinaryDense(16, binary_inputs=False, name="dense_in"), LearnedClip(2.0, name="clip")]
    layers += [*extra_layers, BinaryDense(3, binary_inputs=False, name="dense_out")]
    return keras.Sequential(layers)


def compile_model(model: keras.Model, optimizer: Any = None, **kwargs: Any) -> keras.Model:
    model.compile(
        optimizer=optimizer or keras.optimizers.SGD(0.05),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        **kwargs,
    )
    return model


def make_data(n: int = 64, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8)).astype(np.float32)
    y = (np.argmax(x[:, :3] + 0.5 * x[:, 3:6], axis=1)).astype(np.int32)
    return x, y


def weights_of(model: keras.Model) -> dict[str, np.ndarray]:
    """Weights keyed 'layer/variable' (independent of the model's auto-generated name and of loading)."""
    weights = {
        f"{layer.name}/{v.name}": np.asarray(keras.ops.convert_to_numpy(v))
        for layer in model.layers
        for v in layer.weights
    }
    assert len(weights) == len(model.weights)
    return weights
