"""``python -m benchmarks.training_cost --smoke``: QAT's and pruning's training step beside the float step runs end to
end and reports what it measured (no timing is asserted: ratios are measured, never tested)."""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.helpers import run_python  # noqa: E402

HAVE_HUB = importlib.util.find_spec("keras_hub") is not None


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    directory = tmp_path_factory.mktemp("training_cost")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = run_python(
        ["-m", "benchmarks.training_cost", "--smoke", "--profile", "1", "--out", directory],
        directory,
        env=env,
        cwd=ROOT,
        timeout=900,
    )
    return json.loads((directory / "training_cost.json").read_text()), done.stdout


def test_every_network_has_each_variants_steps_and_ratios_per_round(smoke: tuple[dict[str, Any], str]) -> None:
    results, _ = smoke
    assert results["command"] == "python -m benchmarks.training_cost --smoke --profile 1"
    assert results["targets"] == {"qat": 1.5, "prune": 1.15}
    for name in ("vit", "cnn") if HAVE_HUB else ("cnn",):
        r = results["networks"][name]
        rounds = results["config"]["rounds"]
        assert set(r["per_round_ms"]) == {"float", "qat", "prune"}
        assert all(len(v) == rounds and min(v) > 0 for v in r["per_round_ms"].values())
        for variant in ("qat", "prune"):  # the ratio is the median of the per-round ratios, recomputed here
            ratios = [a / b for a, b in zip(r["per_round_ms"][variant], r["per_round_ms"]["float"])]
            assert r["ratio"][variant]["median"] == pytest.approx(statistics.median(ratios), rel=1e-3)
            assert r["ratio"][variant]["min"] == pytest.approx(min(ratios), rel=1e-3)
            assert r["targets_met"][variant] == (r["ratio"][variant]["median"] <= results["targets"][variant])
        profile = r["profile"]
        assert set(profile) == {"float", "qat", "prune"}
        assert profile["qat"]["op_types_ms"] and len(profile["qat"]["most_added_ms"]) <= 8


@pytest.mark.skipif(HAVE_HUB, reason="keras-hub is installed: the ViT is measured, not skipped")
def test_without_keras_hub_the_vit_is_skipped_saying_what_to_install(smoke: tuple[dict[str, Any], str]) -> None:
    results, stdout = smoke
    assert "pip install keras-hub" in results["networks"]["vit"]["skipped"]
    assert "| vit | skipped: keras-hub is not installed" in stdout


def test_the_table_has_one_line_per_network(smoke: tuple[dict[str, Any], str]) -> None:
    results, stdout = smoke
    lines = [line for line in stdout.splitlines() if line.startswith("| vit") or line.startswith("| cnn")]
    assert len(lines) == 2
    cnn = results["networks"]["cnn"]
    assert f"**{cnn['ratio']['qat']['median']:.2f}×**" in next(line for line in lines if line.startswith("| cnn"))
