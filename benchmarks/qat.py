"""Quantization-aware training with ``ste.quantize_model`` against TFMOT 0.8, side by side.

The network, data split, optimizer, batch and epochs are those of ``examples/qat_digits.py`` (its ``float_model``
and ``compile_model``, built with Keras 3 for ste and with ``tf.keras`` for TFMOT). The float network is trained
once, in this process; its weights and the data split go to both sides through one ``.npz`` file, so that the two
fine-tune the same float model. Then, for every repeat (each with its own shuffling seed), both sides start in fresh
processes at once and run their timed epochs in turn, one side's epoch while the other waits (the order swapped
every round: A B, B A, …), so that both see the same load on a shared machine:

* ste: ``ste.quantize_model(model, strict=True)`` on Keras 3, converted by ``ste.to_tflite``;
* TFMOT: ``tfmot.quantization.keras.quantize_model(model)`` on tf-keras (``TF_USE_LEGACY_KERAS=1``, its own venv),
  converted by ``tf.lite.TFLiteConverter.from_keras_model`` with ``optimizations=[tf.lite.Optimize.DEFAULT]``
  (TFMOT's documented path).

Each side compiles with the example's Adam and loss, ``fit``s for ``qat_epochs`` and reports: the median seconds of
one training step of ``fit`` (Keras's ``train_function``, a ``tf.function`` on both sides, no XLA on CPU; the time
between a callback's ``on_train_batch_begin`` and ``on_train_batch_end``, the first epoch left out as warm-up), the
same for the float network (a copy, fitted one untimed epoch before the QAT model as the process's warm-up and two
epochs after it: what each Keras costs without quantization), the QAT model's test accuracy, the int8 TFLite
model's test accuracy (``tf.lite.Interpreter`` on both sides) and file size.

With ``baseline`` (the path of another ste source tree, e.g. ``git worktree add ../ste-main main``; a relative path
is read from the repository root), a third side, ``baseline``, runs the same steps with that tree's ste in this
venv: the ratio of this tree's QAT step to it measures a change, side by side, in alternating epochs.

As a script, in either venv (this module imports only the standard library at the top)::

    python benchmarks/qat.py '{"side": "tfmot", "data": "digits.npz", "qat_epochs": 10, "batch": 32, "seed": 0}'

prints one ``RESULT {json}`` line (with ``"lockstep": true`` it also waits for ``go`` on stdin before every timed
epoch and before its evaluation, and prints ``WAIT`` and ``EPOCH DONE`` around them).
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["run"]

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "qat_digits.py"
FLOAT_LEARNING_RATE, QAT_LEARNING_RATE = 3e-3, 5e-4  # as examples/qat_digits.py's main()
INT8_KERNELS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")
FLOAT_EPOCHS = 2  # the float copy's timed epochs


def _example() -> Any:
    """examples/qat_digits.py as a module (examples/ is not a package; it imports ste only in its ``main``)."""
    spec = importlib.util.spec_from_file_location("examples_qat_digits", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


WAIT, GO, DONE = "WAIT", "go", "EPOCH DONE"  # the lockstep protocol on stdout / stdin (see _lockstep)


def _barrier(lockstep: bool) -> None:
    """Say that this side is ready and wait for the parent's go (a no-op outside lockstep)."""
    if lockstep:
        print(WAIT, flush=True)
        if sys.stdin.readline().strip() != GO:
            raise SystemExit("benchmarks/qat.py: the parent process went away")


def _timed_fit(
    keras: Any, model: Any, x: Any, y: Any, epochs: int, batch: int, lockstep: bool = False
) -> dict[str, Any]:
    """``model.fit``'s step times after the first epoch (after the first two steps if there is one epoch only).

    ``median_s`` and its quartiles: one ``train_function`` call (from ``on_train_batch_begin`` to
    ``on_train_batch_end``); ``epoch_step_s``: the median over epochs of an epoch's wall time per step (with what
    ``fit`` does between the steps).
    """

    class StepTimer(keras.callbacks.Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.epoch, self.start, self.epoch_start = 0, 0.0, 0.0
            self.steps: list[tuple[int, int, float]] = []
            self.epochs: list[float] = []

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            _barrier(lockstep)  # our turn comes when the other side's epoch is over
            self.epoch, self.epoch_start = epoch, time.perf_counter()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self.epochs.append(time.perf_counter() - self.epoch_start)
            if lockstep:
                print(DONE, flush=True)

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.steps.append((self.epoch, batch, time.perf_counter() - self.start))

    timer = StepTimer()
    model.fit(x, y, epochs=epochs, batch_size=batch, verbose=0, callbacks=[timer])
    first = 1 if epochs > 1 else 0
    steps = [t for epoch, step, t in timer.steps if epoch >= first and (first or step >= 2)]
    per_epoch = len(timer.steps) // epochs
    q = statistics.quantiles(steps, n=4) if len(steps) >= 2 else [steps[0]] * 3
    return {
        "median_s": statistics.median(steps),
        "q1_s": q[0],
        "q3_s": q[2],
        "samples": len(steps),
        "epoch_step_s": statistics.median(t / per_epoch for t in timer.epochs[first:]),
    }


def _interpreter(tf: Any, flatbuffer: bytes, x: Any) -> Any:
    interpreter = tf.lite.Interpreter(model_content=flatbuffer)
    inp = interpreter.get_input_details()[0]
    interpreter.resize_tensor_input(inp["index"], list(x.shape))
    interpreter.allocate_tensors()
    return interpreter


def _tflite_figures(tf: Any, flatbuffer: bytes, x: Any, y: Any) -> dict[str, Any]:
    """Test accuracy, size, and how many conv / matmul kernels take int8 inputs."""
    import numpy as np

    interpreter = _interpreter(tf, flatbuffer, x)
    inp, out = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    interpreter.set_tensor(inp["index"], x)
    interpreter.invoke()
    accuracy = float(np.mean(np.argmax(interpreter.get_tensor(out["index"]), axis=1) == y))
    dtypes = {t["index"]: t["dtype"] for t in interpreter.get_tensor_details()}
    kernels = [op for op in interpreter._get_ops_details() if op["op_name"] in INT8_KERNELS]
    int8 = [op for op in kernels if dtypes[op["inputs"][0]] == np.int8 and dtypes[op["inputs"][1]] == np.int8]
    return {"int8_accuracy": accuracy, "tflite_bytes": len(flatbuffer), "int8_kernels": [len(int8), len(kernels)]}


def _side(config: dict[str, Any]) -> dict[str, Any]:
    """One side's QAT fine-tuning, in a fresh process of its own venv."""
    import numpy as np
    import tensorflow as tf

    example = _example()
    if config["side"] in ("ste", "baseline"):
        import keras

        import ste

        quantize = lambda m: ste.quantize_model(m, strict=True)  # noqa: E731
        version = f"ste {ste.__version__}, Keras {keras.__version__}"
    else:
        import tensorflow_model_optimization as tfmot
        import tf_keras

        keras = tf.keras  # tf_keras, under TF_USE_LEGACY_KERAS=1
        quantize = tfmot.quantization.keras.quantize_model
        version = f"TFMOT {tfmot.__version__}, tf-keras {tf_keras.__version__}"
    data = np.load(config["data"])
    x_train, y_train, x_test, y_test = (data[k] for k in ("x_train", "y_train", "x_test", "y_test"))
    weights = [data[f"weight_{i}"] for i in range(int(data["weights"]))]
    batch, epochs = config["batch"], config["qat_epochs"]
    keras.utils.set_random_seed(config["seed"])

    model = example.float_model(keras)
    model.set_weights(weights)
    twin = keras.models.clone_model(model)  # the float network's own step, on a copy
    twin.set_weights(weights)
    example.compile_model(twin, QAT_LEARNING_RATE, keras)
    # the first fit of a process runs slow for a while (tf-keras: 15 ms a step against 8 ms for the same model fitted
    # again later): one untimed epoch of the copy first, so that both timed fits below run in a warm process
    twin.fit(x_train, y_train, epochs=1, batch_size=batch, verbose=0)

    qat = quantize(model)
    example.compile_model(qat, QAT_LEARNING_RATE, keras)
    started = time.perf_counter()
    qat_steps = _timed_fit(keras, qat, x_train, y_train, epochs, batch, config.get("lockstep", False))
    fit_seconds = time.perf_counter() - started
    float_steps = _timed_fit(keras, twin, x_train, y_train, FLOAT_EPOCHS, batch, config.get("lockstep", False))
    _barrier(config.get("lockstep", False))  # the evaluation and conversion below must not overlap a timed epoch
    qat_accuracy = float(qat.evaluate(x_test, y_test, verbose=0)[1])
    if config["side"] in ("ste", "baseline"):
        flatbuffer = ste.to_tflite(qat)
    else:
        converter = tf.lite.TFLiteConverter.from_keras_model(qat)
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        flatbuffer = bytes(converter.convert())
    return {
        "side": config["side"],
        "versions": f"{version}, TensorFlow {tf.__version__}",
        "architecture": [[layer.__class__.__name__, int(layer.count_params())] for layer in model.layers],
        "jit_compile": bool(getattr(qat, "jit_compile", False)),
        "float_step": float_steps,
        "qat_step": qat_steps,
        "qat_fit_seconds": fit_seconds,
        "qat_accuracy": qat_accuracy,
        **_tflite_figures(tf, flatbuffer, x_test, y_test),
    }


def _float_stage(example: Any, epochs: int, train_samples: int | None, path: str) -> dict[str, Any]:
    """Train the example's float network here and write it and the data split to ``path`` for both sides."""
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    x_train, x_test, y_train, y_test = example.load()
    if train_samples:
        x_train, y_train = x_train[:train_samples], y_train[:train_samples]
    model = example.float_model()
    example.compile_model(model, FLOAT_LEARNING_RATE)
    model.fit(x_train, y_train, epochs=epochs, batch_size=example.BATCH, verbose=0)
    weights = model.get_weights()
    arrays = {f"weight_{i}": w for i, w in enumerate(weights)}
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test, weights=len(weights), **arrays)
    return {
        "accuracy": float(model.evaluate(x_test, y_test, verbose=0)[1]),
        "tflite_bytes": len(example.float_tflite(model)),
        "architecture": [[layer.__class__.__name__, int(layer.count_params())] for layer in model.layers],
        "train_samples": len(y_train),
        "test_samples": len(y_test),
    }


def _command(
    side: str, venv: str | None, config: dict[str, Any], baseline: str | None = None
) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    if side in ("ste", "baseline"):
        python, env["PYTHONPATH"] = sys.executable, str(ROOT if side == "ste" else baseline)
    else:
        python, env["PYTHONPATH"], env["TF_USE_LEGACY_KERAS"] = str(Path(str(venv)) / "bin" / "python"), "", "1"
    return [python, str(Path(__file__)), json.dumps({**config, "side": side})], env


def _read_until(process: Any, token: str, lines: list[str]) -> None:
    while True:
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"{process.args[:2]} exited before {token!r} (exit code {process.wait()})")
        if line.strip() == token:
            return
        lines.append(line)


def _lockstep(commands: dict[str, tuple[list[str], dict[str, str]]], epochs: int, timeout: float) -> dict[str, Any]:
    """Run the sides at once, their timed epochs one at a time in turn (A B, B A, …): each timed epoch has the
    machine's other load but not the other side's, and both see the same load, which drifts on a shared machine."""
    from ._subprocess import parse_result

    names = list(commands)
    lines: dict[str, list[str]] = {name: [] for name in names}
    with tempfile.TemporaryFile("w+") as errors:
        processes = {
            name: subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, text=True, env=env, cwd=str(ROOT)
            )
            for name, (argv, env) in commands.items()
        }
        try:
            for index in range(epochs + 1):
                for name in names:
                    _read_until(processes[name], WAIT, lines[name])
                if index == epochs:  # the last barrier: every side goes on to its untimed evaluation together
                    order = names
                else:
                    order = names if index % 2 == 0 else names[::-1]
                for name in order:
                    processes[name].stdin.write(GO + "\n")
                    processes[name].stdin.flush()
                    if index < epochs:
                        _read_until(processes[name], DONE, lines[name])
            for name, process in processes.items():
                out, _ = process.communicate(timeout=timeout)
                lines[name].append(out)
                if process.returncode:
                    errors.seek(0)
                    raise RuntimeError(f"{name} side failed ({process.returncode}): {errors.read()[-3000:]}")
        finally:
            for process in processes.values():
                if process.poll() is None:
                    process.kill()
    return {name: parse_result("".join(lines[name])) for name in names}


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def median(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    return {
        "qat_step_s": statistics.median(r["qat_step"]["median_s"] for r in runs),
        "qat_epoch_step_s": statistics.median(r["qat_step"]["epoch_step_s"] for r in runs),
        "float_step_s": statistics.median(r["float_step"]["median_s"] for r in runs),
        "qat_accuracy": median("qat_accuracy"),
        "int8_accuracy": median("int8_accuracy"),
        "tflite_bytes": int(median("tflite_bytes")),
        "versions": runs[0]["versions"],
        "int8_kernels": runs[0]["int8_kernels"],
        "jit_compile": runs[0]["jit_compile"],
    }


def run(
    epochs: int,
    qat_epochs: int,
    repeats: int,
    train_samples: int | None = None,
    tfmot_venv: str | None = None,
    timeout: float = 1800,
    baseline: str | None = None,
) -> dict[str, Any]:
    from ._timing import load_average

    example = _example()
    sides = ["ste", "tfmot"] if tfmot_venv else ["ste"]
    if baseline:
        sides.append("baseline")
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory() as directory:
        data = os.path.join(directory, "digits.npz")
        float_figures = _float_stage(example, epochs, train_samples, data)
        for repeat in range(repeats):
            config = {"data": data, "qat_epochs": qat_epochs, "batch": example.BATCH, "seed": repeat, "lockstep": True}
            order = sides if repeat % 2 == 0 else sides[::-1]  # who starts each round of epochs
            load = load_average()
            entries = _lockstep(
                {side: _command(side, tfmot_venv, config, baseline) for side in order},
                qat_epochs + FLOAT_EPOCHS,
                timeout,
            )
            for side, entry in entries.items():
                if entry["architecture"] != float_figures["architecture"]:
                    raise RuntimeError(f"{side} built another network: {entry['architecture']}")
                runs[side].append({**entry, "repeat": repeat, "load_before": load})
    result: dict[str, Any] = {
        "epochs": epochs,
        "qat_epochs": qat_epochs,
        "batch": example.BATCH,
        "repeats": repeats,
        "float": float_figures,
        "runs": runs,
        "summary": {side: _summary(entries) for side, entries in runs.items()},
    }
    if baseline:
        ratios = [a["qat_step"]["median_s"] / b["qat_step"]["median_s"] for a, b in zip(runs["ste"], runs["baseline"])]
        floats = [
            a["float_step"]["median_s"] / b["float_step"]["median_s"] for a, b in zip(runs["ste"], runs["baseline"])
        ]
        result["baseline_ratios"] = {
            "qat_step": statistics.median(ratios),
            "qat_step_range": [min(ratios), max(ratios)],
            "float_step": statistics.median(floats),
        }
    if not tfmot_venv:
        result["tfmot_skipped"] = "TFMOT not run: pass --tfmot-venv PATH (a venv with tf-keras and TFMOT 0.8)"
        return result
    pairs = [(a["qat_step"]["median_s"], b["qat_step"]["median_s"]) for a, b in zip(runs["ste"], runs["tfmot"])]
    ratios = [a / b for a, b in pairs]
    differences = [100 * (a["int8_accuracy"] - b["int8_accuracy"]) for a, b in zip(runs["ste"], runs["tfmot"])]
    ste_summary, tfmot_summary = result["summary"]["ste"], result["summary"]["tfmot"]
    result["ratios"] = {
        "qat_step": statistics.median(ratios),
        "qat_step_range": [min(ratios), max(ratios)],
        "qat_epoch_step": ste_summary["qat_epoch_step_s"] / tfmot_summary["qat_epoch_step_s"],
        "float_step": ste_summary["float_step_s"] / tfmot_summary["float_step_s"],
        "int8_accuracy_points": statistics.median(differences),
        "int8_accuracy_points_range": [min(differences), max(differences)],
        "tflite_bytes": ste_summary["tflite_bytes"] / tfmot_summary["tflite_bytes"],
    }
    return result


if __name__ == "__main__":
    print("RESULT " + json.dumps(_side(json.loads(sys.argv[1]))))
