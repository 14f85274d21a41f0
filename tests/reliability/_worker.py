"""Subprocess entry points for test_processes.py (not a test module).

    python _worker.py scaleout OUT.json BACKUP MARKER  # one MultiWorkerMirroredStrategy worker (TF_CONFIG from env)
    python _worker.py reference OUT.json BACKUP        # the same trainings in one process
    python _worker.py resume OUT.json BACKUP...        # continue from backups (workers when TF_CONFIG is set)
    python _worker.py determinism OUT.json SEED     # a seeded training run with op determinism enabled
    python _worker.py load KERAS_DIR MODULE_DIR INPUTS.npz OUT.npz   # load exports WITHOUT ever importing ste

Results are written to files; stdout/stderr are only for diagnostics.
"""

from __future__ import annotations

import importlib.abc
import json
import os
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))


def _hex_weights(model: Any) -> dict[str, str]:
    import numpy as np

    return {v.path: np.asarray(v.numpy()).tobytes().hex() for v in model.weights}


def _dump(out: str, payload: Any) -> None:
    """Write JSON atomically (the test may read it while this process goes on)."""
    with open(out + ".part", "w") as f:
        json.dump(payload, f)
    os.replace(out + ".part", out)


def _task() -> int:
    return int(json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {}).get("index", 0))


class _HangMidEpoch:
    """Worker 1, in the middle of epoch ``epoch``: writes ``marker`` and waits to be killed by the test."""

    def __new__(cls, marker: str, epoch: int, batch: int) -> Any:
        import keras

        class Hang(keras.callbacks.Callback):  # type: ignore[misc]
            def on_epoch_begin(self, e: int, logs: Any = None) -> None:
                self.epoch = e

            def on_train_batch_end(self, b: int, logs: Any = None) -> None:
                if _task() == 1 and self.epoch == epoch and b == batch:
                    open(marker, "w").close()
                    import time

                    # until the test kills it, however late the session reaches that test (a loaded 38-minute run
                    # reached it 620 s after the marker, when a 600 s sleep had already ended); the session's end
                    # kills it otherwise (the fixture in processes.py)
                    while True:
                        time.sleep(60)

        return Hang()


FAULT_EPOCHS = 3


def _backup_fit(strategy: Any, backup: str, epochs: int, *extra: Any, delete: bool = True) -> dict[str, Any]:
    import ste

    sys.path.insert(0, HERE)
    import scaleout

    restore = ste.callbacks.BackupAndRestore(backup, delete_checkpoint=delete)
    return scaleout.as_lists(scaleout.fit("binary", strategy, epochs=epochs, extra_callbacks=(restore, *extra)))


def scaleout_worker(out: str, backup: str, marker: str) -> None:
    """One of two MultiWorkerMirroredStrategy workers (TF_CONFIG from env): every net by fit and by a custom loop
    (results in OUT), then the fault run: fit with BackupAndRestore until worker 1 stops mid-epoch to be killed."""
    import tensorflow as tf

    import ste

    sys.path.insert(0, HERE)
    import scaleout

    ste.set_bit_masks(True)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    results: dict[str, Any] = {"task": _task()}
    for kind in scaleout.NETS:
        results[kind] = {
            "fit": scaleout.as_lists(scaleout.fit(kind, strategy)),
            "loop": scaleout.as_lists(scaleout.custom_loop(kind, strategy)),
        }
    results["fit_fixes_installed"] = ste._patches.installed()["multi_worker_fit"]  # by the first layer of ste
    _dump(out, results)
    _backup_fit(strategy, backup, FAULT_EPOCHS, _HangMidEpoch(marker, FAULT_EPOCHS - 1, 4))
    raise SystemExit("the fault run was expected to be killed mid-epoch")


def reference(out: str, backup: str) -> None:
    """One process, no strategy: every net by fit and by the custom loop; the uninterrupted fault run; and a
    checkpoint of one process after FAULT_EPOCHS - 1 epochs (kept in BACKUP) for two workers to continue."""
    import ste

    sys.path.insert(0, HERE)
    import scaleout

    ste.set_bit_masks(True)
    results: dict[str, Any] = {}
    for kind in scaleout.NETS:
        results[kind] = {
            "fit": scaleout.as_lists(scaleout.fit(kind, None)),
            "loop": scaleout.as_lists(scaleout.custom_loop(kind, None)),
        }
    results["uninterrupted"] = scaleout.as_lists(scaleout.fit("binary", None, epochs=FAULT_EPOCHS))
    _backup_fit(None, backup, FAULT_EPOCHS - 1, delete=False)
    _dump(out, results)


def resume(out: str, *backups: str) -> None:
    """Continue the fault run from each backup directory in turn (under MultiWorkerMirroredStrategy when TF_CONFIG
    is set, else in one process), FAULT_EPOCHS epochs in all."""
    import tensorflow as tf

    import ste

    ste.set_bit_masks(True)
    strategy = tf.distribute.MultiWorkerMirroredStrategy() if "TF_CONFIG" in os.environ else None
    _dump(out, {"task": _task(), "runs": [_backup_fit(strategy, backup, FAULT_EPOCHS) for backup in backups]})


def determinism(out: str, seed: int) -> None:
    import keras
    import tensorflow as tf

    sys.path.insert(0, HERE)
    import models

    tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(seed)  # before the layers exist: Dropout/GaussianNoise draw their seeds when built
    model = models.compile_model(
        models.make_model(seed, extra_layers=(keras.layers.Dropout(0.2), keras.layers.GaussianNoise(0.1)))
    )
    keras.utils.set_random_seed(seed)
    x, y = models.make_data(96)
    model.fit(x, y, batch_size=16, epochs=2, shuffle=True, verbose=0)
    prediction = model.predict(x[:8], verbose=0)
    with open(out, "w") as f:
        json.dump({"hex": _hex_weights(model), "prediction": prediction.tobytes().hex()}, f)


class _BlockSte(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name == "ste" or name.startswith("ste."):
            raise ImportError(f"this process must not import ste (tried to import {name!r})")
        return None


def load(keras_dir: str, module_dir: str, inputs: str, out: str) -> None:
    sys.meta_path.insert(0, _BlockSte())
    import numpy as np
    import tensorflow as tf

    data = np.load(inputs)
    results: dict[str, Any] = {}

    exported = tf.saved_model.load(keras_dir)
    x = tf.constant(data["keras_x"])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = exported.serve(x)
    results["keras_y"] = y.numpy()
    results["keras_gx"] = tape.gradient(y, x, output_gradients=tf.constant(data["keras_dy"])).numpy()

    module = tf.saved_model.load(module_dir)
    x = tf.constant(data["module_x"])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = module(x)
    gx, gw = tape.gradient(y, [x, module.w], output_gradients=tf.constant(data["module_dy"]))
    results.update(module_y=y.numpy(), module_gx=gx.numpy(), module_gw=gw.numpy())
    assert "ste" not in sys.modules and not any(name.startswith("ste.") for name in sys.modules)
    results["ste_imported"] = np.array(False)
    np.savez(out, **results)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    mode, *args = sys.argv[1:]
    if mode == "scaleout":
        scaleout_worker(*args)
    elif mode == "reference":
        reference(*args)
    elif mode == "resume":
        resume(*args)
    elif mode == "determinism":
        determinism(args[0], int(args[1]))
    elif mode == "load":
        load(*args)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
