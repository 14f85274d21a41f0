"""A binarized network on scikit-learn's bundled 8×8 digits (no download), next to a float network of the same shape.

The hidden layers have binary (−1/+1) weights and binary activations: each ``QuantDense`` binarizes its input and its
kernel with ``"ste_sign"`` (sign, gradient 1 where abs(x) <= 1), and ``WeightClip`` keeps the latent weights in
[−1, 1]. ``ste.layers.BatchNormalization`` is Keras's batch norm trained on TensorFlow's fused kernel, the one to
put after quantized layers. The first layer reads the real-valued pixels (binary weights), as in BinaryNet. At the
end: both test accuracies, the ``ste.summary`` table (real bit widths and memory), and a peek at the exported
binary kernel.

Run: python examples/binarized_digits.py            (add --epochs N for a shorter run)
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import ste

HIDDEN = 256
BATCH = 64


def load() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    digits = load_digits()
    x = (digits.data.astype("float32") / 8.0) - 1.0  # pixels 0..16 -> [-1, 1]
    y = digits.target.astype("int32")
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, stratify=y, random_state=0)
    return x_train, x_test, y_train, y_test


def binarized_model() -> keras.Model:
    binary = {"kernel_quantizer": "ste_sign", "kernel_constraint": "weight_clip", "use_bias": False}
    return keras.Sequential(
        [
            keras.Input((64,)),
            ste.layers.QuantDense(HIDDEN, **binary, name="binary_dense_1"),  # float pixels in, binary weights
            ste.layers.BatchNormalization(momentum=0.9),
            ste.layers.QuantDense(HIDDEN, input_quantizer="ste_sign", **binary, name="binary_dense_2"),
            ste.layers.BatchNormalization(momentum=0.9),
            ste.layers.QuantDense(10, input_quantizer="ste_sign", **binary, name="binary_dense_3"),
            ste.layers.BatchNormalization(momentum=0.9),
            keras.layers.Activation("softmax"),
        ],
        name="binarized_mlp",
    )


def float_model() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((64,)),
            keras.layers.Dense(HIDDEN, use_bias=False, name="dense_1"),
            keras.layers.BatchNormalization(momentum=0.9),
            keras.layers.Activation("relu"),
            keras.layers.Dense(HIDDEN, use_bias=False, name="dense_2"),
            keras.layers.BatchNormalization(momentum=0.9),
            keras.layers.Activation("relu"),
            keras.layers.Dense(10, use_bias=False, name="dense_3"),
            keras.layers.BatchNormalization(momentum=0.9),
            keras.layers.Activation("softmax"),
        ],
        name="float_mlp",
    )


class _Progress(keras.callbacks.Callback):
    """Three lines a network: the first epoch, the middle one and the last, with the test accuracy."""

    def __init__(self, epochs: int) -> None:
        super().__init__()
        self.epochs, self.shown = epochs, {0, epochs // 2, epochs - 1}

    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        if epoch in self.shown and logs:
            loss, accuracy = logs["loss"], logs["val_accuracy"]
            print(f"  epoch {epoch + 1:2d}/{self.epochs}: loss {loss:.3f}, test accuracy {accuracy:.2%}")


def train(model: keras.Model, data: tuple[np.ndarray, ...], epochs: int, verbose: int) -> float:
    x_train, x_test, y_train, y_test = data
    schedule = keras.optimizers.schedules.CosineDecay(1e-2, decay_steps=epochs * -(-len(x_train) // BATCH))
    model.compile(
        optimizer=keras.optimizers.Adam(schedule),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    callbacks = [] if verbose else [_Progress(epochs)]
    model.fit(
        x_train,
        y_train,
        batch_size=BATCH,
        epochs=epochs,
        validation_data=(x_test, y_test),
        verbose=verbose,
        callbacks=callbacks,
    )
    _, accuracy = model.evaluate(x_test, y_test, verbose=0)
    return float(accuracy)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=25, help="training epochs per network (default 25)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--verbose", type=int, default=0, help="Keras's progress output: 0 three lines (default), 1 bar, 2 every epoch"
    )
    args = parser.parse_args(argv)

    start = time.perf_counter()
    keras.utils.set_random_seed(args.seed)
    data = load()
    print(f"digits: {len(data[0])} training and {len(data[1])} test images of 8x8 pixels, 10 classes\n")

    print("== binarized network (binary weights and activations in the hidden layers) ==")
    binarized = binarized_model()
    binary_accuracy = train(binarized, data, args.epochs, args.verbose)
    print("\n== float network of the same shape ==")
    keras.utils.set_random_seed(args.seed)
    float_accuracy = train(float_model(), data, args.epochs, args.verbose)

    print(f"\ntest accuracy  binarized: {binary_accuracy:.2%}   float: {float_accuracy:.2%}\n")
    ste.summary(binarized)
    kernel = ste.export_quantized_weights(binarized, dtype="int8")["binary_dense_2"]["kernel"]
    values = sorted(int(v) for v in set(kernel.ravel()))
    print(f"\nexported binary kernel of binary_dense_2: shape {kernel.shape}, values {values}")
    seconds = time.perf_counter() - start
    print(f"total time: {seconds:.1f} s")
    return {"binarized": binary_accuracy, "float": float_accuracy, "seconds": seconds}


if __name__ == "__main__":
    main()
