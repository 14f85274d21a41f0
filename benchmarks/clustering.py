"""Weight clustering on a small CNN: accuracy, TFLite size and gzip-compressed size (TFMOT's measure) of the float
model and of the model clustered to 16 and 32 centroids per kernel (docs/clustering.md), with TFMOT side by side.

Run from the repository root: ``python -m benchmarks.clustering`` (sklearn's 8×8 digits, which needs scikit-learn),
or ``python -m benchmarks.clustering --fashion-mnist DIR`` with DIR holding Fashion-MNIST's four ``*-ubyte.gz``
files. ``--tfmot-venv PATH`` also runs the same steps with TFMOT 0.8 on tf-keras in that virtual environment
(``TF_USE_LEGACY_KERAS=1``), in its own process, and prints its rows beside ste's.

The float CNN is trained first; each clustered copy starts from it (k-means++ centroids, the default of both), is
fine-tuned, stripped and converted to a float flatbuffer (ste: ``ste.to_tflite(..., optimizations=[])``; TFMOT:
``TFLiteConverter.from_keras_model``), whose kernels keep their clustered values. Clustering alone does not shrink
the file; it makes it compress.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np


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


def cnn(keras: Any, shape: tuple[int, ...]) -> Any:
    keras.utils.set_random_seed(0)
    inputs = keras.Input(shape)
    h = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(inputs)
    h = keras.layers.MaxPooling2D()(h)
    h = keras.layers.Conv2D(64, 3, padding="same", activation="relu")(h)
    h = keras.layers.MaxPooling2D()(h)
    h = keras.layers.Flatten()(h)
    h = keras.layers.Dense(128, activation="relu")(h)
    return keras.Model(inputs, keras.layers.Dense(10)(h))


def distinct(model: Any) -> int:
    kernels = [layer.kernel.numpy() for layer in model.layers if hasattr(layer, "kernel")]
    return max(np.unique(kernel).size for kernel in kernels)


def run(side: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The float row and one row per cluster count, for ``side`` ("ste" or "tfmot")."""
    if side == "ste":
        import keras

        import ste

        cluster = ste.clustering.cluster_weights
        strip = ste.clustering.strip_clustering
        kmeans = ste.clustering.CentroidInitialization.KMEANS_PLUS_PLUS

        def flatbuffer(model: Any) -> bytes:
            return ste.to_tflite(model, optimizations=[])

    else:
        import tensorflow as tf
        import tensorflow_model_optimization as tfmot
        import tf_keras as keras

        cluster = tfmot.clustering.keras.cluster_weights
        strip = tfmot.clustering.keras.strip_clustering
        kmeans = tfmot.clustering.keras.CentroidInitialization.KMEANS_PLUS_PLUS

        def flatbuffer(model: Any) -> bytes:
            return bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())

    def compile_(model: Any, learning_rate: float) -> None:
        model.compile(
            keras.optimizers.Adam(learning_rate),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )

    def row(name: str, model: Any, seconds: float) -> dict[str, Any]:
        _, accuracy = model.evaluate(x_test, y_test, verbose=0)
        converted = flatbuffer(model)
        return {
            "model": name,
            "accuracy": float(accuracy),
            "values": distinct(model),
            "tflite_bytes": len(converted),
            "gzip_bytes": len(gzip.compress(converted, compresslevel=9)),
            "tune_s": seconds,
        }

    x_train, y_train, x_test, y_test = load(args.fashion_mnist, args.train, args.test)
    model = cnn(keras, x_train.shape[1:])
    compile_(model, 1e-3)
    model.fit(x_train, y_train, batch_size=128, epochs=args.epochs, verbose=0)
    rows = [row("float", model, 0.0)]
    trained = model.get_weights()
    for k in args.clusters:
        # A fresh float model each time: the clustered model shares its latent weights with the model it was made
        # from (in both libraries), and TFMOT also replaces that model's kernel attributes.
        model = cnn(keras, x_train.shape[1:])
        model.set_weights(trained)
        clustered = cluster(model, number_of_clusters=k, cluster_centroids_init=kmeans)
        compile_(clustered, 1e-4)
        start = time.perf_counter()
        clustered.fit(x_train, y_train, batch_size=128, epochs=args.fine_tune_epochs, verbose=0)
        seconds = time.perf_counter() - start
        stripped = strip(clustered)
        compile_(stripped, 1e-4)
        rows.append(row(f"{k} clusters", stripped, seconds))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fashion-mnist", help="directory with Fashion-MNIST's *-ubyte.gz files (else digits)")
    parser.add_argument("--train", type=int, default=20000, help="training images used (Fashion-MNIST)")
    parser.add_argument("--test", type=int, default=5000, help="test images used (Fashion-MNIST)")
    parser.add_argument("--epochs", type=int, default=3, help="float training epochs")
    parser.add_argument("--fine-tune-epochs", type=int, default=1, help="clustered fine-tuning epochs")
    parser.add_argument("--clusters", type=int, nargs="+", default=[16, 32])
    parser.add_argument("--tfmot-venv", help="a virtual environment with tf-keras and TFMOT 0.8")
    parser.add_argument("--side", choices=["ste", "tfmot"], default="ste", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.side == "tfmot":  # the child process: rows as JSON on the last line
        print(json.dumps(run("tfmot", args)))
        return
    dataset = f"Fashion-MNIST ({args.train} training, {args.test} test images)" if args.fashion_mnist else "digits"
    print(f"{dataset}; float {args.epochs} epochs, clustered fine-tuning {args.fine_tune_epochs} epoch(s)")
    results = {"ste": run("ste", args)}
    if args.tfmot_venv:
        command = [os.path.join(args.tfmot_venv, "bin", "python"), os.path.abspath(__file__), "--side", "tfmot"]
        for name in ("fashion_mnist", "train", "test", "epochs", "fine_tune_epochs"):
            value = getattr(args, name)
            if value is not None:
                command += [f"--{name.replace('_', '-')}", str(value)]
        command += ["--clusters", *map(str, args.clusters)]
        env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
        env.pop("PYTHONPATH", None)
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.exit(f"the TFMOT side failed:\n{done.stderr[-3000:]}")
        results["tfmot"] = json.loads(done.stdout.strip().splitlines()[-1])
    header = f"{'side':<6} {'model':<12} {'accuracy':>9} {'values':>7} {'tflite B':>9} {'gzip B':>8} {'gzip ×':>7}"
    print(header + f" {'tune s':>7}")
    for side, rows in results.items():
        float_zip = rows[0]["gzip_bytes"]
        for r in rows:
            print(
                f"{side:<6} {r['model']:<12} {r['accuracy']:>9.4f} {r['values']:>7d} {r['tflite_bytes']:>9d} "
                f"{r['gzip_bytes']:>8d} {float_zip / r['gzip_bytes']:>7.2f} {r['tune_s']:>7.1f}"
            )


if __name__ == "__main__":
    main()
