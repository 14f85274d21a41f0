"""The subprocesses of test_processes.py, and :class:`Jobs`, which starts them and kills them by process id.

All subprocesses (two MultiWorkerMirroredStrategy workers and the same trainings in one process, two seeded
training runs, one export loader) start together, when the first test that needs them asks for the ``process_jobs``
fixture, so that their TensorFlow start-ups overlap with each other; the tests wait for them. The fault test kills
the workers mid-epoch by process id and starts the runs that resume from their backups. Every process has a time
limit and is killed when the module's tests are done, whatever happened.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import ste
from tests.references import tf_sign

from . import models

WORKER = Path(__file__).with_name("_worker.py")
ROOT = Path(__file__).resolve().parents[2]  # the repository: subprocesses import this checkout's ste
# Time limits, a safety net, not a speed check: the multi-worker and reference trainings take 1-3 min alone; all the
# jobs run at once, so on a loaded machine every job is slower (the export loader ran out of 150 s at load 13).
TIMEOUT = 480.0


class Jobs:
    """Named ``python PROGRAM ...`` subprocesses, with output in log files (never a pipe that could fill up) and a
    deadline counted from their start; a test can wait for one, wait for a file it writes, or kill it by its id."""

    def __init__(self, *program: str | Path) -> None:
        self.program = [str(part) for part in program]  # what follows ``python``: a script, or ``-m`` and a module
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}  # stdout
        self.errors: dict[str, Path] = {}  # stderr
        self.deadlines: dict[str, float] = {}

    def start(self, name: str, args: list[str], env: dict[str, str], cwd: Path, timeout: float = TIMEOUT) -> None:
        """``python PROGRAM ARGS`` in ``cwd``; its stdout and stderr go to ``name.log`` and ``name.err`` there."""
        self.logs[name], self.errors[name] = (cwd / f"{name}.{kind}" for kind in ("log", "err"))
        with open(self.logs[name], "wb") as out, open(self.errors[name], "wb") as err:
            self.procs[name] = subprocess.Popen(
                [sys.executable, *self.program, *args],
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        self.deadlines[name] = time.monotonic() + timeout

    def output(self, name: str) -> str:
        """The end of job ``name``'s stdout and stderr (for failure messages)."""
        out, err = (path.read_text(errors="replace")[-3000:] for path in (self.logs[name], self.errors[name]))
        return f"stdout:\n{out}\nstderr:\n{err}"

    def wait(self, name: str) -> None:
        proc = self.procs[name]
        try:
            proc.wait(timeout=max(1.0, self.deadlines[name] - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail(f"subprocess {name} did not finish within its time limit")
        assert proc.returncode == 0, f"subprocess {name} failed:\n{self.output(name)}"

    def wait_for_file(self, name: str, path: Path) -> None:
        """Until ``path`` exists (written by job ``name``, which goes on running), within the job's time limit."""
        proc = self.procs[name]
        while not path.exists():
            if proc.poll() is not None and not path.exists():
                pytest.fail(
                    f"subprocess {name} ended (code {proc.returncode}) before writing {path.name}:\n{self.output(name)}"
                )
            if time.monotonic() > self.deadlines[name]:
                self.kill(name)
                pytest.fail(f"subprocess {name} did not write {path.name} within its time limit")
            time.sleep(0.2)

    def kill(self, name: str) -> int | None:
        """Kill job ``name`` by its process id (if still running); its exit code."""
        proc = self.procs[name]
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        return proc.wait(timeout=30)

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


def _free_ports(n: int) -> list[int]:
    sockets = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "PYTHONPATH")}
    env.update({"PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "", **extra})
    return env


# -- the exported artefacts (built here, with ste; loaded in a process without it) -----------------------------

sigmoid_sign = ste.forward(tf_sign).backward("sigmoid_surrogate(beta=2.0)")


@ste.forward
def rounded_scale(a: tf.Tensor, w: tf.Tensor) -> tf.Tensor:
    return tf.round(a * w)


@rounded_scale.backward
def rounded_scale(dy: tf.Tensor, a: tf.Tensor, w: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    return dy * w, tf.reduce_sum(dy * a, axis=0)


class Scaler(tf.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = tf.Variable([0.5, -1.5, 2.0, 0.25], name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        return rounded_scale(sigmoid_sign(x), self.w) + sigmoid_sign(x * 0.5)


def _forward_and_gradients(fn: Any, x: np.ndarray, dy: np.ndarray, variables: list[Any]) -> list[np.ndarray]:
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = fn(xt)
    grads = tape.gradient(y, [xt, *variables], output_gradients=tf.constant(dy))
    return [y.numpy(), *(g.numpy() for g in grads)]


def start_workers(jobs: Jobs, prefix: str, args: list[str], cwd: Path) -> None:
    """Two MultiWorkerMirroredStrategy workers ``<prefix>0`` and ``<prefix>1`` on free ports of 127.0.0.1; ``{out}``
    in ``args`` becomes each worker's own ``<prefix><i>.json``."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in _free_ports(2)]}
    for index in range(2):
        config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        own = [a.replace("{out}", str(cwd / f"{prefix}{index}.json")) for a in args]
        jobs.start(f"{prefix}{index}", own, _env(TF_CONFIG=config), cwd)


def start_jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Jobs, Path, dict[str, Any]]]:
    """Start every subprocess; yields (jobs, their directory, the values the loaded exports must reproduce)."""
    tmp = tmp_path_factory.mktemp("processes")
    jobs = Jobs(WORKER)
    try:
        # multi-worker training: two workers on 127.0.0.1, started first (they take longest), and the same
        # trainings in one process (the reference)
        start_workers(jobs, "worker", ["scaleout", "{out}", str(tmp / "backup"), str(tmp / "hanging")], tmp)
        jobs.start(
            "reference", ["reference", str(tmp / "reference.json"), str(tmp / "one_process_backup")], _env(), tmp
        )
        # two seeded runs with op determinism (in subprocesses: the setting is global and cannot be undone)
        for run in range(2):
            jobs.start(f"determinism{run}", ["determinism", str(tmp / f"determinism{run}.json"), "7"], _env(), tmp)

        # exports, made here with ste
        rng = np.random.default_rng(0)
        expected: dict[str, Any] = {}
        bits_dense = ste.layers.QuantDense(  # binary input kept as bits in the backward pass (issue 13)
            16, input_quantizer="sign", kernel_quantizer="sign", kernel_constraint="weight_clip", name="bits_dense"
        )
        model = models.make_model(3, extra_layers=(bits_dense,))
        keras_x = rng.normal(size=(5, 8)).astype(np.float32)
        keras_dy = rng.normal(size=(5, 3)).astype(np.float32)
        model(keras_x)
        model.export(str(tmp / "keras_export"), verbose=False)
        expected["keras"] = _forward_and_gradients(model, keras_x, keras_dy, [])
        scaler = Scaler()
        tf.saved_model.save(scaler, str(tmp / "module_export"))
        module_x = np.array([[0.3, -0.2, 1.7, -3.0], [0.0, 0.9, -0.6, 2.2]], np.float32)
        module_dy = np.array([[1.0, -0.5, 0.25, 2.0], [0.5, 1.0, -1.0, 1.5]], np.float32)
        expected["module"] = _forward_and_gradients(scaler, module_x, module_dy, [scaler.w])
        np.savez(tmp / "inputs.npz", keras_x=keras_x, keras_dy=keras_dy, module_x=module_x, module_dy=module_dy)
        loader_args = ["load", str(tmp / "keras_export"), str(tmp / "module_export"), str(tmp / "inputs.npz")]
        jobs.start("loader", [*loader_args, str(tmp / "loaded.npz")], _env(PYTHONPATH=""), tmp)
        yield jobs, tmp, expected
    finally:
        jobs.kill_all()
