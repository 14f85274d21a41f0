"""Tests that need fresh Python processes: exports that outlive the package, multi-worker training, determinism.

The subprocesses are started early in the session by the ``process_jobs`` fixture (tests/reliability/conftest.py,
processes.py); these tests only wait for them and check their results.
"""

from __future__ import annotations

import json
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
