"""Tests that need fresh Python processes: exports that outlive the package, multi-worker training, determinism.

The ``process_jobs`` fixture starts the subprocesses (processes.py) when the first test that needs them runs; these
tests only wait for them and check their results (pytest-xdist runs a file's tests in one worker, so the processes
start once).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest

import ste

from . import _worker, scaleout
from .processes import ROOT, Jobs, Scaler, _env, _forward_and_gradients, start_jobs, start_workers

Started = tuple[Jobs, Path, dict[str, Any]]


@pytest.fixture(scope="module")
def process_jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Started]:
    yield from start_jobs(tmp_path_factory)


def test_exports_load_and_differentiate_in_a_process_without_ste(process_jobs: Started) -> None:
    runner, tmp, expected = process_jobs
    runner.wait("loader")
    loaded = np.load(tmp / "loaded.npz")
    assert not bool(loaded["ste_imported"])
    keras_y, keras_gx = expected["keras"]
    np.testing.assert_allclose(loaded["keras_y"], keras_y, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(loaded["keras_gx"], keras_gx, rtol=1e-6, atol=1e-6)
    assert np.any(keras_gx != 0.0)  # the input gradient exists only through the custom rules
    module_y, module_gx, module_gw = expected["module"]
    np.testing.assert_allclose(loaded["module_y"], module_y, rtol=1e-6)
    np.testing.assert_allclose(loaded["module_gx"], module_gx, rtol=1e-6)
    np.testing.assert_allclose(loaded["module_gw"], module_gw, rtol=1e-6)


def test_the_expected_module_gradients_are_the_documented_ones() -> None:
    """Independent numpy check of what the loaded module must reproduce (sign forward, sigmoid surrogate)."""
    x = np.array([[0.3, -0.2, 1.7, -3.0], [0.0, 0.9, -0.6, 2.2]])
    dy = np.array([[1.0, -0.5, 0.25, 2.0], [0.5, 1.0, -1.0, 1.5]])
    w = np.array([0.5, -1.5, 2.0, 0.25])

    def d(z: np.ndarray) -> np.ndarray:
        s = 1.0 / (1.0 + np.exp(-2.0 * z))
        return 2.0 * s * (1.0 - s)

    a = np.where(x >= 0, 1.0, -1.0)
    y_np = np.round(a * w) + np.where(0.5 * x >= 0, 1.0, -1.0)
    gx_np = dy * w * d(x) + dy * d(0.5 * x) * 0.5
    gw_np = np.sum(dy * a, axis=0)
    scaler = Scaler()
    y, gx, gw = _forward_and_gradients(scaler, x.astype(np.float32), dy.astype(np.float32), [scaler.w])
    np.testing.assert_allclose(y, y_np)
    np.testing.assert_allclose(gx, gx_np, rtol=1e-5)
    np.testing.assert_allclose(gw, gw_np, rtol=1e-6)


def _worker_results(process_jobs: Started) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The two workers' results (written before their fault run) and the one-process reference."""
    runner, tmp, _ = process_jobs
    for index in range(2):
        runner.wait_for_file(f"worker{index}", tmp / f"worker{index}.json")
    runner.wait("reference")
    workers = [json.loads((tmp / f"worker{i}.json").read_text()) for i in range(2)]
    return workers, json.loads((tmp / "reference.json").read_text())


@pytest.mark.parametrize("loop", ["fit", "loop"], ids=["fit", "custom-loop"])
@pytest.mark.parametrize("kind", scaleout.NETS)
def test_two_workers_train_as_one_process(process_jobs: Started, kind: str, loop: str) -> None:
    """2 MultiWorkerMirroredStrategy workers, global batch 16 (8 per worker): after 10 steps (the custom loop: 11,
    the last global batch 6 examples) the weights and the logs (loss, flip ratios) equal one process's with the
    same global batches, to 1e-5 (float32). Both workers hold identical weights."""
    workers, single = _worker_results(process_jobs)
    assert [w["task"] for w in workers] == [0, 1]
    assert workers[0]["fit_fixes_installed"], "Keras's fit runs without ste's multi-worker fixes"
    first, second = (w[kind][loop] for w in workers)
    assert first["weights"] == second["weights"], "the workers' weights differ"
    scaleout.assert_same(first, single[kind][loop])
    initial = scaleout.weights_of(scaleout.make_net(kind))
    for key, value in initial.items():
        if not key.endswith(("initialized", "moving_mean", "moving_variance")):
            assert not np.array_equal(value, single[kind][loop]["weights"][key]), f"{key} did not train"
    if kind == "binary":
        flips = [k for k in single[kind][loop]["logs"] if k.startswith("flip_ratio")]
        assert len(flips) == 2 and all(single[kind][loop]["logs"][k] > 0 for k in flips)


def test_a_killed_worker_resumes_with_backup_and_restore(process_jobs: Started) -> None:
    """Worker 1 stops in the middle of the last epoch; the test kills both workers by PID. Resumed from the
    chief's backup (ste.callbacks.BackupAndRestore, at the epoch boundary) by two new workers, and by one process,
    training ends as the uninterrupted run: optimizer state (Bop's momentum, Adam's moments), LSQ's step, the
    flip-ratio state and the scheduler's position (Bop's gamma by step) all restored. A checkpoint of one process
    continues identically in two workers."""
    runner, tmp, _ = process_jobs
    _worker_results(process_jobs)  # the equivalence runs are done: the fault run is under way
    deadline = time.monotonic() + 240
    while not (tmp / "hanging").exists():
        assert time.monotonic() < deadline, "worker 1 never reached the middle of its last epoch"
        assert runner.procs["worker1"].poll() is None, runner.output("worker1")
        time.sleep(0.2)
    assert runner.kill("worker1") == -signal.SIGKILL  # killed mid-epoch, by its PID
    runner.kill("worker0")  # its next collective would wait for worker 1
    metadata = json.loads((tmp / "backup" / "training_metadata.json").read_text())
    assert metadata["epoch"] == _worker.FAULT_EPOCHS - 1  # the chief's backup: the last completed epoch
    assert (tmp / "backup_worker1" / "latest.weights.h5").exists()  # worker 1 wrote its own directory
    for copy in ("two_to_two", "two_to_one"):
        shutil.copytree(tmp / "backup", tmp / copy)
    shutil.copytree(tmp / "one_process_backup", tmp / "one_to_two")
    start_workers(runner, "resumed", ["resume", "{out}", str(tmp / "two_to_two"), str(tmp / "one_to_two")], tmp)
    runner.start("resumed_alone", ["resume", str(tmp / "alone.json"), str(tmp / "two_to_one")], _env(), tmp, 300.0)
    for name in ("resumed0", "resumed1", "resumed_alone"):
        runner.wait(name)
    uninterrupted = json.loads((tmp / "reference.json").read_text())["uninterrupted"]
    two = [json.loads((tmp / f"resumed{i}.json").read_text())["runs"] for i in range(2)]
    alone = json.loads((tmp / "alone.json").read_text())["runs"][0]
    for name, run in [("2 -> 2", two[0][0]), ("1 -> 2", two[0][1]), ("2 -> 1", alone)]:
        try:
            scaleout.assert_same(run, uninterrupted)
        except AssertionError as error:
            raise AssertionError(f"resumed {name} differs from the uninterrupted run: {error}") from None
    assert two[0] == two[1], "the resumed workers' weights differ"
    assert "flip_ratio/conv1" in uninterrupted["logs"] and "gamma" in uninterrupted["logs"]


def test_seeded_runs_are_bit_identical(process_jobs: Started) -> None:
    runner, tmp, _ = process_jobs
    runner.wait("determinism0")
    runner.wait("determinism1")
    first, second = (json.loads((tmp / f"determinism{i}.json").read_text()) for i in range(2))
    assert first["hex"] == second["hex"]
    assert first["prediction"] == second["prediction"]


def test_worker_helpers_import_this_checkout() -> None:
    assert Path(ste.__file__).resolve().is_relative_to(ROOT), "tests must run against this checkout's ste"
    assert keras.__version__.startswith("3.")


#: a venv with snnTorch 1.0, torch, nir and nirtorch (docs/spiking.md, "NIR"); the comparison skips without it
SNNTORCH_VENV = Path(os.environ["STE_SNNTORCH_VENV"]) if os.environ.get("STE_SNNTORCH_VENV") else None


def _venv_python(venv: Path | None) -> Path:
    assert venv is not None, "the test skips without STE_SNNTORCH_VENV"
    return venv / "bin" / "python"


def _snntorch(action: str, graph: Path, x: np.ndarray, tmp: Path) -> np.ndarray:
    np.save(tmp / "x.npy", x)
    script = ROOT / "tests" / "spiking" / "snntorch_peer.py"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    argv = [
        str(_venv_python(SNNTORCH_VENV)),
        str(script),
        action,
        str(graph),
        str(tmp / "x.npy"),
        str(tmp / "s.npy"),
    ]
    subprocess.run(argv, check=True, capture_output=True, timeout=600, env=env, cwd=tmp)
    spikes: np.ndarray = np.load(tmp / "s.npy")
    return spikes


def test_nir_spike_trains_equal_snntorchs_both_ways(tmp_path: Path) -> None:
    """snnTorch's export_to_nir loaded by from_nir(dt=1e-4), and an ste model's to_nir loaded by snnTorch's
    import_from_nir, give the spike trains of the other framework exactly (weights in 1/8 steps, binary inputs)."""
    nir = pytest.importorskip("nir", reason="needs the optional extra: pip install 'ste[nir]'")
    if SNNTORCH_VENV is None:
        pytest.skip("no snnTorch venv: set STE_SNNTORCH_VENV to one (docs/spiking.md says how to make it)")
    if not (SNNTORCH_VENV / "bin" / "python").exists():
        pytest.skip(f"no Python in STE_SNNTORCH_VENV={SNNTORCH_VENV} (docs/spiking.md says how to make the venv)")
    x = (np.random.default_rng(5).random((3, 40, 6)) < 0.5).astype("float32")
    exported = tmp_path / "snntorch.nir"
    theirs = _snntorch("export", exported, x, tmp_path)
    ours = ste.spiking.from_nir(exported, dt=1e-4)(x).numpy()
    np.testing.assert_array_equal(ours, theirs)
    assert 0 < ours.mean() < 1

    rng = np.random.default_rng(12)
    model = keras.Sequential(
        [
            keras.Input((None, 6)),
            keras.layers.Dense(8),
            ste.spiking.LIF(beta=0.8, reset="zero", threshold=0.5),
            keras.layers.Dense(4),
            ste.spiking.LIF(beta=0.625, reset="zero"),
        ]
    )
    model.set_weights([rng.integers(-8, 9, w.shape) / 8 for w in model.get_weights()])
    written = tmp_path / "ste.nir"
    nir.write(written, ste.spiking.to_nir(model, dt=1e-4))
    ours = model(x).numpy()
    np.testing.assert_array_equal(_snntorch("import", written, x, tmp_path), ours)
    assert 0 < ours.mean() < 1
