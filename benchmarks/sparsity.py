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

``--tfmot-venv PATH`` (a virtual environment with tensorflow-model-optimization and tf-keras) runs the same rows with
TFMOT in a subprocess (``TF_USE_LEGACY_KERAS=1``): the same network, data, schedules, batch and epochs, TFMOT's
``prune_low_magnitude`` on the same layers through ``clone_model``, ``strip_pruning``, and the converter on the
stripped model. Each side also reports the median time of one pruning training step (between a callback's
``on_train_batch_begin`` and ``on_train_batch_end``, the first 5 steps left out); the two sides run one after the
other, so the step-time ratio is indicative only. This module imports only numpy and the standard library at the
top, so that it runs in either environment (``python benchmarks/sparsity.py --side tfmot ...``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

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


def cnn(keras: Any) -> Any:
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


def compile_model(keras: Any, model: Any) -> None:
    model.compile(
        keras.optimizers.Adam(1e-3),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )


def prune(keras: Any, S: Any, model: Any, steps: int, sparsity: float | None, m_by_n: tuple[int, int] | None) -> Any:
    """TFMOT's per-layer route: clone the model, wrapping every layer but the first convolution (``S`` is
    ``ste.sparsity`` or ``tfmot.sparsity.keras``)."""
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


def sizes(model: Any, side: str) -> dict[str, int]:
    """Raw and gzipped sizes of the float TFLite model, the int8-weight one (``ste.to_tflite``; TFMOT's side:
    ``Optimize.DEFAULT``) and the EXPERIMENTAL_SPARSITY one."""
    import tensorflow as tf

    out: dict[str, int] = {}

    def convert(optimization: Any) -> bytes | None:
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "saved")
            if side == "ste":
                model.export(path, verbose=False)
            else:
                tf.saved_model.save(model, path)
            converter = tf.lite.TFLiteConverter.from_saved_model(path)
            if optimization is not None:
                converter.optimizations = [optimization]
            try:
                return bytes(converter.convert())
            except Exception:  # the converter refuses it: reported as absent
                return None

    float_bytes = convert(None)
    sparse_bytes = convert(tf.lite.Optimize.EXPERIMENTAL_SPARSITY)
    if side == "ste":
        import ste

        int8_bytes: bytes | None = ste.to_tflite(model)
    else:
        int8_bytes = convert(tf.lite.Optimize.DEFAULT)
    for name, data in (("float", float_bytes), ("int8", int8_bytes), ("sparse", sparse_bytes)):
        if data is not None:
            out[name] = len(data)
            out[f"{name}_gz"] = len(gzip.compress(data, 9))
    return out


def zeros(model: Any) -> float:
    kernels = [layer.kernel.numpy() for layer in model.layers if layer.name in ("conv2", "fc1", "fc2")]
    return float(sum((k == 0).sum() for k in kernels) / sum(k.size for k in kernels))


class StepTimer:
    """Median seconds of one training step (``on_train_batch_begin`` to ``on_train_batch_end``), first 5 left out."""

    def __init__(self, base: Any) -> None:
        self.times: list[float] = []
        self.base = base

    def callback(self) -> Any:
        timer = self

        class _Timer(self.base):  # type: ignore[misc,name-defined]
            def on_train_batch_begin(self, batch: Any, logs: Any = None) -> None:
                timer.start = time.perf_counter()

            def on_train_batch_end(self, batch: Any, logs: Any = None) -> None:
                timer.times.append(time.perf_counter() - timer.start)

        return _Timer()

    def median(self) -> float:
        return statistics.median(self.times[5:] or self.times)


def run(side: str, epochs: int, prune_epochs: int, train: int, batch: int) -> list[dict[str, Any]]:
    """The rows of one side: ``"ste"`` (Keras 3) or ``"tfmot"`` (tf-keras, TFMOT)."""
    if side == "ste":
        import keras

        import ste

        S: Any = ste.sparsity
    else:
        import tensorflow as tf
        import tensorflow_model_optimization as tfmot

        keras, S = tf.keras, tfmot.sparsity.keras
    x, y, x_test, y_test, source = load(train)
    print(f"{side}: {source}, {len(x)} training and {len(x_test)} test images; batch {batch}", file=sys.stderr)
    base = cnn(keras)
    compile_model(keras, base)
    base.fit(x, y, batch_size=batch, epochs=epochs, verbose=0)
    steps = prune_epochs * int(np.ceil(len(x) / batch))
    dense = {"row": "dense", "accuracy": base.evaluate(x_test, y_test, verbose=0)[1], "zeros": zeros(base)}
    rows = [{**dense, **sizes(base, side)}]
    for name, sparsity, pattern in (("50 %", 0.5, None), ("80 %", 0.8, None), ("2:4", None, (2, 4))):
        pruned = prune(keras, S, base, steps, sparsity, pattern)
        compile_model(keras, pruned)
        timer = StepTimer(keras.callbacks.Callback)
        callbacks = [S.UpdatePruningStep(), timer.callback()]
        pruned.fit(x, y, batch_size=batch, epochs=prune_epochs, verbose=0, callbacks=callbacks)
        stripped = S.strip_pruning(pruned)
        compile_model(keras, stripped)
        accuracy = stripped.evaluate(x_test, y_test, verbose=0)[1]
        row = {"row": name, "accuracy": accuracy, "zeros": zeros(stripped), "step_s": timer.median()}
        rows.append({**row, **sizes(stripped, side)})
    return rows


def run_tfmot(venv: str, epochs: int, prune_epochs: int, train: int, batch: int) -> list[dict[str, Any]]:
    """The TFMOT side, in ``venv``'s Python with ``TF_USE_LEGACY_KERAS=1``."""
    python = os.path.join(venv, "bin", "python")
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": ""}
    arguments = ["--side", "tfmot", "--epochs", str(epochs), "--prune-epochs", str(prune_epochs)]
    arguments += ["--train", str(train), "--batch", str(batch)]
    done = subprocess.run(
        [python, os.path.abspath(__file__), *arguments], env=env, capture_output=True, text=True, check=False
    )
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return list(json.loads(line[len("RESULT ") :]))
    raise RuntimeError(f"the TFMOT side failed:\n{done.stderr[-3000:]}")


def report(rows: list[dict[str, Any]], title: str = "ste") -> str:
    dense = rows[0]
    columns = ["float", "float_gz", "int8", "int8_gz", "sparse", "sparse_gz"]
    lines = [f"{title}:", "| row | accuracy | zeros | step (ms) | " + " | ".join(columns) + " |"]
    lines.append("|---" * (4 + len(columns)) + "|")
    for row in rows:
        cells = []
        for column in columns:
            if column not in row:
                cells.append("refused")
                continue
            ratio = row[column] / dense[column] if column in dense else float("nan")
            cells.append(f"{row[column]:,} ({ratio:.2f}×)")
        step = f"{1000 * row['step_s']:.1f}" if "step_s" in row else ""
        lines.append(
            f"| {row['row']} | {row['accuracy']:.4f} | {row['zeros']:.3f} | {step} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def side_by_side(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> str:
    lines = ["ste vs TFMOT:", "| row | accuracy ste − TFMOT (points) | int8 gzip ste/TFMOT | step time ste/TFMOT |"]
    lines.append("|---|---|---|---|")
    for a, b in zip(ours, theirs):
        step = f"{a['step_s'] / b['step_s']:.2f}×" if "step_s" in a and "step_s" in b else ""
        gz = f"{a['int8_gz'] / b['int8_gz']:.2f}×" if "int8_gz" in a and "int8_gz" in b else ""
        lines.append(f"| {a['row']} | {100 * (a['accuracy'] - b['accuracy']):+.2f} | {gz} | {step} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--epochs", type=int, default=2, help="float training epochs")
    parser.add_argument("--prune-epochs", type=int, default=2, help="pruning fine-tuning epochs")
    parser.add_argument("--train", type=int, default=20000, help="training images")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--tfmot-venv", default=None, help="a venv with TFMOT and tf-keras: run TFMOT's side too")
    parser.add_argument("--side", choices=["ste", "tfmot"], default="ste", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes_args = (args.epochs, args.prune_epochs, args.train, args.batch)
    if args.side == "tfmot":  # the subprocess of --tfmot-venv
        print("RESULT " + json.dumps(run("tfmot", *sizes_args), default=float))
        return
    ours = run("ste", *sizes_args)
    print(report(ours))
    if args.tfmot_venv:
        theirs = run_tfmot(args.tfmot_venv, *sizes_args)
        print(report(theirs, "TFMOT"))
        print(side_by_side(ours, theirs))


if __name__ == "__main__":
    main()
