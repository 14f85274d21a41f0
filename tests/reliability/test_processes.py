"""Tests that need fresh Python processes: exports that outlive the package, multi-worker training, determinism.

The subprocesses are started early in the session by the ``process_jobs`` fixture (tests/reliability/conftest.py,
processes.py); these tests only wait for them and check their results.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest

import ste

from . import models
from .processes import ROOT, Scaler, _forward_and_gradients, _Jobs

Jobs = tuple[_Jobs, Path, dict[str, Any]]


def test_exports_load_and_differentiate_in_a_process_without_ste(process_jobs: Jobs) -> None:
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


def _worker_results(process_jobs: Jobs) -> list[dict[str, Any]]:
    runner, tmp, _ = process_jobs
    runner.wait("worker0")
    runner.wait("worker1")
    return [json.loads((tmp / f"worker{i}.json").read_text()) for i in range(2)]


LSQ_STEP = "sequential/lsq/step"


def test_multi_worker_training_ends_with_identical_weights(process_jobs: Jobs) -> None:
    """Identical on both workers (LSQ's step is also checked on its own below, with a clearer failure)."""
    results = _worker_results(process_jobs)
    assert [r["task"] for r in results] == [0, 1]
    first, second = (r["hex"] for r in results)
    assert first == second, "the workers' weights differ"
    assert len(results[0]["losses"]) == 8 and np.all(np.isfinite(results[0]["losses"]))
    changed = [k for k in results[0]["final"] if not np.array_equal(results[0]["final"][k], results[0]["initial"][k])]
    expected = {"sequential/dense_in/kernel", "sequential/clip/alpha", "sequential/dense_out/kernel"}
    if models.HAS_QUANTIZERS:  # learned clipping level (PACT) and step (LSQ) train under the strategy too
        expected |= {LSQ_STEP, "sequential/pact/alpha"}
    assert expected <= set(changed), sorted(changed)


@pytest.mark.skipif(not models.HAS_QUANTIZERS, reason="needs ste.quantizers.LSQ")
def test_multi_worker_lsq_step_is_identical(process_jobs: Jobs) -> None:
    results = _worker_results(process_jobs)
    assert results[0]["hex"][LSQ_STEP] == results[1]["hex"][LSQ_STEP]


def test_multi_worker_training_matches_one_device(process_jobs: Jobs) -> None:
    """Each worker also ran the same steps on one device (same global batches): the weights agree (LSQ included:
    its initial step from the whole first global batch, its gradient scale with the global N)."""
    results = _worker_results(process_jobs)
    for result in results:
        assert result["one_device"].keys() == result["final"].keys()
        for key, value in result["final"].items():
            np.testing.assert_allclose(value, result["one_device"][key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_seeded_runs_are_bit_identical(process_jobs: Jobs) -> None:
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
SNNTORCH_VENV = Path(os.environ.get("STE_SNNTORCH_VENV", "/work/venvs/snntorch"))


def _snntorch(action: str, graph: Path, x: np.ndarray, tmp: Path) -> np.ndarray:
    np.save(tmp / "x.npy", x)
    script = ROOT / "tests" / "spiking" / "snntorch_peer.py"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    argv = [
        str(SNNTORCH_VENV / "bin" / "python"),
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
    if not (SNNTORCH_VENV / "bin" / "python").exists():
        pytest.skip(
            f"no snnTorch venv at {SNNTORCH_VENV} (set STE_SNNTORCH_VENV; docs/spiking.md says how to make one)"
        )
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
