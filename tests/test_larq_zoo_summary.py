"""ste.summary on larq-zoo's architectures against larq.models.summary (larq 0.14) and larq-zoo's published figures.

The models are rebuilt by examples/larq_zoo.py through ``ste.larq``; the same builders, run with larq 0.14 on
tf-keras, produced tests/data/larq_zoo_summary.json (command in that file's ``_source``). ste counts every variable;
its deployment view folds batch normalization as larq does, and must then equal larq's figures exactly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import load_example, run_python

ROOT = Path(__file__).resolve().parents[1]
LARQ = json.loads((ROOT / "tests" / "data" / "larq_zoo_summary.json").read_text())


ZOO = load_example("larq_zoo")
# larq-zoo published its figures with different larq versions: QuickNet's and MeliusNet's with today's count (batch
# norm folded, the deployment view); the literature models' with an older larq that counted every BN variable.
PUBLISHED_VIEW = {"quicknet_small": "deployment", "meliusnet22": "deployment"}
ONE_PER_FAMILY = [
    "quicknet_small",
    "birealnet",
    "binary_resnet_e18",
    "binary_densenet28",
    "xnornet",
    "dorefanet",
    "binary_alexnet",
    "meliusnet22",
]
FIELDS = (
    "macs",
    "deployment_params",
    "deployment_memory_bytes",
    "total_params",
    "deployment_params_total",
    "memory_bytes",
    "trainable_params",
    "non_trainable_params",
)

# The models are built and summarized in a fresh process (8 ImageNet models: ~15 s there, ~45 s inside the suite's
# process); it writes the figures below to summaries.json, and the quicknet_small lines printed by larq's and ste's
# summaries. The module's tests share one run (pytest-xdist runs a file's tests in one worker).
_SCRIPT = f"""
import json, sys
import keras
import ste, ste.larq as lq
from tests.helpers import load_example
zoo, figures = load_example("larq_zoo"), {{}}
for name in {ONE_PER_FAMILY!r}:
    keras.backend.clear_session()
    model = zoo.BUILDERS[name](lq, keras)
    summary = ste.summary(model, print_fn=None)
    figures[name] = {{field: getattr(summary, field) for field in {FIELDS!r}}}
    figures[name]["keras_count_params"] = model.count_params()
keras.backend.clear_session()
printed = []
model = zoo.BUILDERS["quicknet_small"](lq, keras)
profile = lq.models.summary(model, print_fn=printed.append)
figures["quicknet_small_larq"] = [profile.weight_count(), lq.utils.memory_as_readable_str(profile.memory)]
ste.summary(model, print_fn=printed.append)
figures["quicknet_small_printed"] = printed
json.dump(figures, open("summaries.json", "w"))
"""


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    directory = tmp_path_factory.mktemp("larq_zoo")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    run_python(["-c", _SCRIPT], directory, env=env)
    return json.loads((directory / "summaries.json").read_text())


def _by_bits(figures: dict[str, int]) -> dict[int, int]:
    return {int(bits): count for bits, count in figures.items()}


@pytest.mark.parametrize("name", ONE_PER_FAMILY)
def test_agrees_with_larq_summary(figures, name):
    summary, larq = figures[name], LARQ[name]
    assert _by_bits(summary["macs"]) == _by_bits(larq["macs_by_bits"])
    assert _by_bits(summary["deployment_params"]) == _by_bits(larq["params_by_bits"])
    assert summary["deployment_memory_bytes"] * 8 == larq["memory_bits"]
    # ste counts every variable: what Keras counts (in both Keras versions)
    assert summary["total_params"] == summary["keras_count_params"] == larq["keras_count_params"]
    folded = summary["total_params"] - summary["deployment_params_total"]  # batch norm's gamma and beta, trainable
    assert summary["trainable_params"] - folded == larq["trainable_params"]
    assert summary["non_trainable_params"] == larq["non_trainable_params"]


@pytest.mark.parametrize("name", ONE_PER_FAMILY)
def test_reproduces_larq_zoos_published_figures(figures, name):
    summary = figures[name]
    params, memory = ZOO.PUBLISHED[name]
    if PUBLISHED_VIEW.get(name) == "deployment":
        count, size = summary["deployment_params_total"], summary["deployment_memory_bytes"]
    else:
        count, size = summary["total_params"], summary["memory_bytes"]
    assert count == params
    assert f"{size / 2**20:.2f}" == memory.split()[0]  # larq-zoo writes MiB as "MB"


def test_quicknet_small_prints_the_published_numbers(figures):
    printed = figures["quicknet_small_printed"]
    # larq's conventions: batch norm folded
    assert figures["quicknet_small_larq"] == [12_655_688, "4.00 MiB"]
    size_line = next(line for line in printed[1].splitlines() if line.startswith("| Model size "))
    assert size_line.split()[-3:] == ["4.00", "MiB", "|"]
    summary = figures["quicknet_small"]  # ste's: every variable, and larq's count too
    assert (summary["deployment_params_total"], f"{summary['deployment_memory_bytes'] / 2**20:.2f}") == (
        12_655_688,
        "4.00",
    )
    assert "12,655,688 parameters, 4.00 MiB" in printed[2]
    assert summary["total_params"] == 12_664_344  # + 8,656 = the gamma and beta of QuickNetSmall's batch norms
