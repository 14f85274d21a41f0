"""Write the ``.keras`` files in this folder and their outputs, with the ste that runs this script.

``.keras`` files written by ste 0.1.0 must load in every later ste: ``tests/test_saved_files.py`` loads these (ops
as activations, quantized layers, a QAT model, a pruned model, a clustered model, spiking neurons) and compares their
outputs and input gradients with the ones stored in ``expected.npz``, computed when the files were written.

Run from the repository root: ``python tests/data/saved/write.py``. Do not run it again after a release: the point of
these files is that an older ste wrote them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

import ste

HERE = Path(__file__).resolve().parent
STEPS, FEATURES = 5, 4


def op_model() -> keras.Model:
    """An op as a Dense activation and in an Activation layer."""
    op = ste.forward(tf.sign).backward("straight_through", clip=1.0)
    smooth = ste.forward(tf.nn.relu).backward_like(tf.nn.sigmoid)
    inputs = keras.Input((6,))
    h = keras.layers.Dense(5, activation=op, kernel_initializer=keras.initializers.GlorotUniform(seed=1))(inputs)
    return keras.Model(inputs, keras.layers.Activation(smooth)(h), name="ops")


def layers_model() -> keras.Model:
    """ste layers with quantizers (one with a learned step) and constraints."""
    inputs = keras.Input((6, 6, 2))
    h = ste.layers.QuantConv2D(
        3,
        3,
        input_quantizer="ste_sign",
        kernel_quantizer="lsq(bits=3)",
        kernel_constraint="weight_clip",
        kernel_initializer=keras.initializers.GlorotUniform(seed=2),
    )(inputs)
    h = ste.layers.BatchNormalization(momentum=0.8)(h)
    h = keras.layers.Flatten()(h)
    out = ste.layers.QuantDense(
        4,
        input_quantizer="ste_sign",
        kernel_quantizer="ste_sign",
        kernel_constraint="weight_clip",
        kernel_initializer=keras.initializers.GlorotUniform(seed=3),
    )(h)
    return keras.Model(inputs, out, name="layers")


def qat_model() -> keras.Model:
    """A float model made quantization-aware by ``ste.quantize_model``."""
    inputs = keras.Input((6,))
    h = keras.layers.Dense(5, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(seed=4))(inputs)
    out = keras.layers.Dense(3, kernel_initializer=keras.initializers.GlorotUniform(seed=5))(h)
    return ste.quantize_model(keras.Model(inputs, out, name="float"))


def pruned_model() -> keras.Model:
    """A float model pruned to 50 % by ``ste.sparsity.prune_low_magnitude`` (the wrappers are saved, not stripped)."""
    inputs = keras.Input((6,))
    h = keras.layers.Dense(8, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(seed=7))(inputs)
    out = keras.layers.Dense(3, kernel_initializer=keras.initializers.GlorotUniform(seed=8))(h)
    schedule = ste.sparsity.ConstantSparsity(0.5, begin_step=0, frequency=1)
    return ste.sparsity.prune_low_magnitude(keras.Model(inputs, out, name="pruned"), pruning_schedule=schedule)


def clustered_model() -> keras.Model:
    """A float model clustered to 4 centroids per kernel by ``ste.clustering.cluster_weights``."""
    inputs = keras.Input((6,))
    h = keras.layers.Dense(8, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(seed=9))(inputs)
    out = keras.layers.Dense(3, kernel_initializer=keras.initializers.GlorotUniform(seed=10))(h)
    return ste.clustering.cluster_weights(
        keras.Model(inputs, out, name="clustered"), number_of_clusters=4, cluster_centroids_init="linear"
    )


def spiking_model() -> keras.Model:
    """Spiking neurons with learned parameters and a surrogate with a learned width."""
    keras.utils.set_random_seed(6)
    return keras.Sequential(
        [
            keras.Input((STEPS, FEATURES)),
            keras.layers.Dense(6, name="dense_in"),
            ste.spiking.LIF(surrogate="atan(alpha=2.0)", learn_surrogate=("alpha",), name="lif"),
            keras.layers.Dense(5, name="dense_mid"),
            ste.spiking.Synaptic(alpha=0.7, learn_alpha=True, name="syn"),
            keras.layers.Dense(3, name="dense_out"),
            ste.spiking.LI(beta=0.8, learn_beta=True, name="li"),
        ],
        name="spiking",
    )


def inputs(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def output_and_gradient(fn: Any, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The output and the gradient of a weighted sum of it with respect to the input."""
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = fn(xt)
        weights = tf.reshape(tf.cast(tf.range(1, tf.size(y) + 1), y.dtype), tf.shape(y))
        loss = tf.reduce_sum(y * weights)
    return y.numpy(), tape.gradient(loss, xt).numpy()


def train_a_little(model: keras.Model, x: np.ndarray) -> None:
    """Move the weights and the learned state away from their initial values."""
    y = np.asarray(model(x)) * 0.5 + 0.1
    model.compile(keras.optimizers.SGD(0.05), "mse")
    callbacks = [ste.sparsity.UpdatePruningStep()] if model.name == "pruned" else []
    model.fit(x, y, epochs=2, batch_size=len(x), shuffle=False, verbose=0, callbacks=callbacks)


def main() -> None:
    expected: dict[str, np.ndarray] = {}
    models = {
        "ops": (op_model(), (4, 6)),
        "layers": (layers_model(), (3, 6, 6, 2)),
        "qat": (qat_model(), (4, 6)),
        "pruned": (pruned_model(), (4, 6)),
        "clustered": (clustered_model(), (4, 6)),
        "spiking": (spiking_model(), (2, STEPS, FEATURES)),
    }
    for seed, (name, (model, shape)) in enumerate(models.items()):
        x = inputs(shape, seed)
        train_a_little(model, x)
        model.save(HERE / f"{name}.keras")
        expected[f"{name}_x"] = x
        expected[f"{name}_y"], expected[f"{name}_dx"] = output_and_gradient(lambda t, m=model: m(t, training=False), x)

    np.savez(HERE / "expected.npz", **expected)
    print(f"wrote {len(models)} .keras files with ste {ste.__version__}", file=sys.stderr)


if __name__ == "__main__":
    main()
