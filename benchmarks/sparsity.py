"""Pruning with ``ste.sparsity``: accuracy and deployed size at 50 %, 80 % and 2:4 sparsity (docs/sparsity.md).

Run from the repository root: ``python -m benchmarks.sparsity [--epochs 2] [--prune-epochs 2] [--train 20000]``.
A small CNN (two 3×3 convolutions, a Dense hidden layer) is trained on Fashion-MNIST (Debian's
``dataset-fashion-mnist`` files when present, else a synthetic 10-class set of the same shape), then a copy is
pruned and fine-tuned for each row with the masked gradient (TFMOT's):

* ``50 %`` and ``80 %``: ``PolynomialDecay(0 → s)`` over the first 60 % of the fine-tuning steps, every layer but
  the first convolution (one input channel), which stays dense as in TFMOT's examples;
* ``2:4``: ``sparsity_m_by_n=(2, 4)`` on the same layers (their input channels are multiples of 4).

Each row reports test accuracy, the fraction of zeros in the pruned kernels, and the size of the stripped model as
a float TFLite flatbuffer and as ``ste.to_tflite``'s (``Optimize.DEFAULT``: int8 weights), each raw and after
``gzip`` (TFMOT's measure: zeros compress), and TFLite's ``EXPERIMENTAL_SPARSITY`` flatbuffer where the converter
accepts it. Sizes are in bytes; ratios are to the dense row.
"""

from __future__ import annotations

import argparse
import gzip
import os
import struct
import tempfile
from typing import Any

import keras
import numpy as np
import tensorflow as tf

import ste

_FASHION = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist (the IDX files Keras downloads)


def _idx(path: str) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4 : 4 + 4 * dims])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(train: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str]:
    if os.path.isdir(_FASHION):
        xs = [_idx(os.path.join(_FASHION, f"{p}-images-idx3-ubyte.gz")) for p in ("train", "t10k")]
        ys = [_idx(os.path.join(_FASHION, f"{p}-labels-idx1-ubyte.gz")) for p in ("train", "t10k")]
        x_train, x_test = (x[..., None].astype(np.float32) / 255.0 for x in xs)
        y_train, y_test = (y.astype(np.int64) for y in ys)
        return x_train[:train], y_train[:train], x_test, y_test, "Fashion-MNIST"
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(10, 28, 28, 1)).astype(np.float32)
    y = rng.integers(0, 10, size=train + 2000)
    x = centers[y] + rng.normal(scale=2.0, size=(len(y), 28, 28, 1)).astype(np.float32)
    return x[:train], y[:train], x[train:], y[train:], "synthetic"


def cnn() -> keras.Model:
    keras.utils.set_random_seed(0)
    L = keras.layers
    return keras.Sequential(
        [
            keras.Input((28, 28, 1)),
            L.Conv2D(16, 3, activation="relu", name="conv1"),
            L.MaxPooling2D(),
            L.Conv2D(32, 3, activation="relu", name="conv2"),
            L.MaxPooling2D(),
            L.Flatten(),
            L.Dense(128, activation="relu", name="fc1"),
            L.Dense(10, name="fc2"),
        ]
    )


def compile_model(model: keras.Model) -> None:
    model.compile(
        keras.optimizers.Adam(1e-3),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )


def prune(model: keras.Model, steps: int, sparsity: float | None, m_by_n: tuple[int, int] | None) -> keras.Model:
    """TFMOT's per-layer route: clone the model, wrapping every layer but the first convolution."""
    S = ste.sparsity
    frequency = max(1, steps // 20)
    if m_by_n is not None:
        settings: dict[str, Any] = {
            "pruning_schedule": S.ConstantSparsity(0.5, 0, frequency=frequency),
            "sparsity_m_by_n": m_by_n,
        }
    else:
        assert sparsity is not None
        settings = {"pruning_schedule": S.PolynomialDecay(0.0, sparsity, 0, int(0.6 * steps), frequency=frequency)}

    def wrap(layer: keras.layers.Layer) -> keras.layers.Layer:
        copy = type(layer).from_config(layer.get_config())
        if layer.weights:
            copy.build_from_config(layer.get_build_config())
            copy.set_weights(layer.get_weights())
        if layer.name == "conv1" or not isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense)):
            return copy
        return S.prune_low_magnitude(copy, **settings)

    return keras.models.clone_model(model, clone_function=wrap)


def sizes(model: keras.Model) -> dict[str, int]:
    """Raw and gzipped sizes of the float TFLite model, ste.to_tflite's, and the EXPERIMENTAL_SPARSITY one."""
    out: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "saved")
        model.export(path, verbose=False)
        float_bytes = tf.lite.TFLiteConverter.from_saved_model(path).convert()
        converter = tf.lite.TFLiteConverter.from_saved_model(path)
        converter.optimizations = [tf.lite.Optimize.EXPERIMENTAL_SPARSITY]
        try:
            sparse_bytes: bytes | None = converter.convert()
        except Exception:  # the converter refuses it: reported as absent
            sparse_bytes = None
    int8_bytes = ste.to_tflite(model)
    for name, data in (("float", float_bytes), ("int8", int8_bytes), ("sparse", sparse_bytes)):
        if data is not None:
            out[name] = len(data)
            out[f"{name}_gz"] = len(gzip.compress(data, 9))
    return out


def zeros(model: keras.Model) -> float:
    kernels = [layer.kernel.numpy() for layer in model.layers if layer.name in ("conv2", "fc1", "fc2")]
    return float(sum((k == 0).sum() for k in kernels) / sum(k.size for k in kernels))


def run(epochs: int, prune_epochs: int, train: int, batch: int) -> list[dict[str, Any]]:
    x, y, x_test, y_test, source = load(train)
    print(f"data: {source}, {len(x)} training and {len(x_test)} test images; batch {batch}")
    base = cnn()
    compile_model(base)
    base.fit(x, y, batch_size=batch, epochs=epochs, verbose=0)
    steps = prune_epochs * int(np.ceil(len(x) / batch))
    rows = [
        {"row": "dense", "accuracy": base.evaluate(x_test, y_test, verbose=0)[1], "zeros": zeros(base), **sizes(base)}
    ]
    for name, sparsity, pattern in (("50 %", 0.5, None), ("80 %", 0.8, None), ("2:4", None, (2, 4))):
        pruned = prune(base, steps, sparsity, pattern)
        compile_model(pruned)
        callbacks = [ste.sparsity.UpdatePruningStep()]
        pruned.fit(x, y, batch_size=batch, epochs=prune_epochs, verbose=0, callbacks=callbacks)
        stripped = ste.sparsity.strip_pruning(pruned)
        compile_model(stripped)
        accuracy = stripped.evaluate(x_test, y_test, verbose=0)[1]
        rows.append({"row": name, "accuracy": accuracy, "zeros": zeros(stripped), **sizes(stripped)})
    return rows


def report(rows: list[dict[str, Any]]) -> str:
    dense = rows[0]
    columns = ["float", "float_gz", "int8", "int8_gz", "sparse", "sparse_gz"]
    lines = ["| row | accuracy | zeros | " + " | ".join(columns) + " |", "|---" * (3 + len(columns)) + "|"]
    for row in rows:
        cells = []
        for column in columns:
            if column not in row:
                cells.append("refused")
                continue
            ratio = row[column] / dense[column] if column in dense else float("nan")
            cells.append(f"{row[column]:,} ({ratio:.2f}×)")
        lines.append(f"| {row['row']} | {row['accuracy']:.4f} | {row['zeros']:.3f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--epochs", type=int, default=2, help="float training epochs")
    parser.add_argument("--prune-epochs", type=int, default=2, help="pruning fine-tuning epochs")
    parser.add_argument("--train", type=int, default=20000, help="training images")
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args(argv)
    print(report(run(args.epochs, args.prune_epochs, args.train, args.batch)))


if __name__ == "__main__":
    main()
