"""Weight clustering on a small CNN: accuracy, TFLite size and gzip-compressed size (TFMOT's measure) of the float
model and of the model clustered to 16 and 32 centroids per kernel (docs/clustering.md).

Run from the repository root: ``python -m benchmarks.clustering`` (sklearn's 8×8 digits, which needs scikit-learn),
or ``python -m benchmarks.clustering --fashion-mnist DIR`` with DIR holding Fashion-MNIST's four ``*-ubyte.gz``
files. The float CNN is trained first; each clustered copy starts from it (k-means++ centroids, TFMOT's default),
is fine-tuned, stripped and converted with ``ste.to_tflite(..., optimizations=[])`` (a float flatbuffer whose
kernels keep their clustered values). Clustering alone does not shrink the file; it makes it compress.
"""

from __future__ import annotations

import argparse
import gzip
import os
import time

import keras
import numpy as np

import ste


def _idx(path: str) -> np.ndarray:
    with gzip.open(path, "rb") as handle:
        data = handle.read()
    dims = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims))
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(fashion_mnist: str | None, train: int, test: int) -> tuple[np.ndarray, ...]:
    if fashion_mnist:
        x_train = _idx(os.path.join(fashion_mnist, "train-images-idx3-ubyte.gz"))[:train, ..., None] / 255.0
        y_train = _idx(os.path.join(fashion_mnist, "train-labels-idx1-ubyte.gz"))[:train]
        x_test = _idx(os.path.join(fashion_mnist, "t10k-images-idx3-ubyte.gz"))[:test, ..., None] / 255.0
        y_test = _idx(os.path.join(fashion_mnist, "t10k-labels-idx1-ubyte.gz"))[:test]
    else:
        from sklearn.datasets import load_digits

        digits = load_digits()
        x, y = digits.images[..., None] / 16.0, digits.target
        order = np.random.default_rng(0).permutation(len(x))
        x, y = x[order], y[order]
        x_train, y_train, x_test, y_test = x[:1400], y[:1400], x[1400:], y[1400:]
    return (x_train.astype("float32"), y_train, x_test.astype("float32"), y_test)


def cnn(shape: tuple[int, ...]) -> keras.Model:
    keras.utils.set_random_seed(0)
    inputs = keras.Input(shape)
    h = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(inputs)
    h = keras.layers.MaxPooling2D()(h)
    h = keras.layers.Conv2D(64, 3, padding="same", activation="relu")(h)
    h = keras.layers.MaxPooling2D()(h)
    h = keras.layers.Flatten()(h)
    h = keras.layers.Dense(128, activation="relu")(h)
    return keras.Model(inputs, keras.layers.Dense(10)(h))


def compile_(model: keras.Model, learning_rate: float) -> None:
    model.compile(
        keras.optimizers.Adam(learning_rate),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )


def sizes(model: keras.Model) -> tuple[int, int]:
    flatbuffer = ste.to_tflite(model, optimizations=[])
    return len(flatbuffer), len(gzip.compress(flatbuffer, compresslevel=9))


def distinct(model: keras.Model) -> int:
    kernels = [layer.kernel.numpy() for layer in model.layers if hasattr(layer, "kernel")]
    return max(np.unique(kernel).size for kernel in kernels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fashion-mnist", help="directory with Fashion-MNIST's *-ubyte.gz files (else digits)")
    parser.add_argument("--train", type=int, default=20000, help="training images used (Fashion-MNIST)")
    parser.add_argument("--test", type=int, default=5000, help="test images used (Fashion-MNIST)")
    parser.add_argument("--epochs", type=int, default=3, help="float training epochs")
    parser.add_argument("--fine-tune-epochs", type=int, default=1, help="clustered fine-tuning epochs")
    parser.add_argument("--clusters", type=int, nargs="+", default=[16, 32])
    args = parser.parse_args()

    x_train, y_train, x_test, y_test = load(args.fashion_mnist, args.train, args.test)
    dataset = "Fashion-MNIST" if args.fashion_mnist else "sklearn digits"
    print(f"{dataset}: {len(x_train)} training, {len(x_test)} test images of shape {x_train.shape[1:]}")
    model = cnn(x_train.shape[1:])
    compile_(model, 1e-3)
    model.fit(x_train, y_train, batch_size=128, epochs=args.epochs, verbose=0)
    _, accuracy = model.evaluate(x_test, y_test, verbose=0)
    size, zipped = sizes(model)
    rows = [("float", accuracy, distinct(model), size, zipped, 0.0)]
    trained = model.get_weights()
    for k in args.clusters:
        model.set_weights(trained)  # the clustered model shares its latent weights with `model` (as TFMOT's does)
        clustered = ste.clustering.cluster_weights(model, k, ste.clustering.CentroidInitialization.KMEANS_PLUS_PLUS)
        compile_(clustered, 1e-4)
        start = time.perf_counter()
        clustered.fit(x_train, y_train, batch_size=128, epochs=args.fine_tune_epochs, verbose=0)
        seconds = time.perf_counter() - start
        stripped = ste.clustering.strip_clustering(clustered)
        compile_(stripped, 1e-4)
        _, accuracy = stripped.evaluate(x_test, y_test, verbose=0)
        size, zipped = sizes(stripped)
        rows.append((f"{k} clusters", accuracy, distinct(stripped), size, zipped, seconds))
    print(f"{'model':<12} {'accuracy':>9} {'values':>7} {'tflite B':>9} {'gzip B':>8} {'gzip ×':>7} {'tune s':>7}")
    float_zip = rows[0][4]
    for name, accuracy, values, size, zipped, seconds in rows:
        print(
            f"{name:<12} {accuracy:>9.4f} {values:>7d} {size:>9d} {zipped:>8d} {float_zip / zipped:>7.2f} "
            f"{seconds:>7.1f}"
        )


if __name__ == "__main__":
    main()
