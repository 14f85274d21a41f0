"""The benchmark suite runs in smoke mode and writes a well-formed report (no timing is asserted: issue 6).

The suite runs as a user runs it, ``python -m benchmarks.run --smoke``, in a fresh process: its memory figures need
TensorFlow's BFC allocator, which must be chosen before TensorFlow is imported (this test process imported it long
ago, without it on CPUs where oneDNN is off: issue 18).
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import run as bench  # noqa: E402
from benchmarks._variants import RULES, VARIANTS  # noqa: E402
from tests.helpers import run_python  # noqa: E402


def _with_root(env: dict[str, str]) -> dict[str, str]:
    return {**env, "PYTHONPATH": str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """One smoke run (a minute or more) for the module's tests: pytest-xdist runs a file's tests in one worker."""
    directory = tmp_path_factory.mktemp("benchmarks")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPU_ALLOCATOR_USE_BFC"}  # as on a fresh shell
    run_python(
        ["-m", "benchmarks.run", "--smoke", "--out", directory / "results"],
        directory,
        env=_with_root(env),
        cwd=ROOT,
        timeout=900,
    )
    results = directory / "results"
    stamped = sorted(p.name for p in results.iterdir())
    assert any(name.startswith("smoke-") and name.endswith(".json") for name in stamped), stamped
    return json.loads((results / "latest.json").read_text()), (results / "latest.md").read_text()


def _positive(value: float) -> bool:
    return isinstance(value, float) and math.isfinite(value) and value > 0


def test_json_has_every_section_with_positive_timings(report: tuple[dict[str, Any], str]) -> None:
    results, _ = report
    assert results["mode"] == "smoke"
    assert results["command"] == "python -m benchmarks.run --smoke"
    assert set(bench.SECTIONS) <= set(results)
    assert results["machine"]["tensorflow"]
    cells = results["elementwise"]["cells"]
    assert {(c["rule"], c["jit_compile"]) for c in cells} == {(r, j) for r in RULES for j in (False, True)}
    for cell in cells:
        assert set(cell["results"]) == set(VARIANTS)
        assert cell["results"]["custom_gradient"]["ratio"] == 1.0
        for entry in cell["results"].values():
            assert _positive(entry["median_s"]) and _positive(entry["ratio"])
            assert entry["samples"] == results["config"]["elementwise"]["rounds"]
    for call in ("forward", "forward_backward"):
        assert set(results["latency"][call]["results"]) == {
            "custom_gradient",
            "ste",
            "custom_gradient copy (A/A)",
            "tf.sign (no custom gradient)",
        }
    assert _positive(results["training"]["results"]["ste"]["median_s"])
    qat = results["qat"]  # the ste side only: no --tfmot-venv here
    assert set(qat["summary"]) == {"ste"} and "--tfmot-venv" in qat["tfmot_skipped"]
    assert _positive(qat["summary"]["ste"]["qat_step_s"]) and qat["summary"]["ste"]["tflite_bytes"] > 0
    assert qat["runs"]["ste"][0]["architecture"] == qat["float"]["architecture"]


def test_tracing_and_memory_sections_are_counts(report: tuple[dict[str, Any], str]) -> None:
    results, _ = report
    calls = results["config"]["tracing"]["calls"]
    for entry in results["tracing"]["retracing"].values():
        assert entry["calls"] == calls
        assert isinstance(entry["tracing_count"], int) and entry["tracing_count"] >= 1
    chains = results["memory"]["chains"]
    assert "tf.identity" in chains
    for row in chains.values():
        assert set(row) == {"eager", "function"}
        for entry in row.values():
            assert entry["allocator_peak"] > 0  # the statistics are there: every chain allocates
    between = results["memory"]["between_mask_ratio_function"]
    assert set(between) == {"y·0.999", "bias add", "keras Rescaling(0.999, offset=0.001)"}
    for ratios in between.values():
        assert set(ratios) == {"ste default (keeps a bit mask)", "custom_gradient"}
        assert all(_positive(r) for r in ratios.values())


def test_markdown_has_targets_and_one_row_per_cell(report: tuple[dict[str, Any], str]) -> None:
    results, table = report
    assert "Reproduce: `python -m benchmarks.run --smoke`" in table
    assert "| target | measured | met |" in table
    rows = [line for line in table.splitlines() if line.startswith(("| float32 |", "| float32, XLA |"))]
    assert len(rows) == len(results["elementwise"]["cells"])
    for line in table.splitlines():
        if line.startswith("|"):
            assert line.endswith("|"), line
    for heading in ("### 1.", "### 2.", "### 3.", "### 4.", "### 5.", "### 8."):
        assert heading in table


def test_update_docs_replaces_only_the_marked_block(tmp_path: Path) -> None:
    doc = tmp_path / "performance.md"
    doc.write_text(f"# Performance\n\nprose\n\n{bench.START}\nold table\n{bench.END}\n\nmore prose\n")
    bench.update_docs("| new | table |\n", doc)
    text = doc.read_text()
    assert "old table" not in text
    assert text.startswith("# Performance\n\nprose\n\n")
    assert text.endswith(f"{bench.END}\n\nmore prose\n")
    assert "| new | table |" in text


def test_a_process_without_allocator_statistics_says_what_to_do(tmp_path: Path) -> None:
    """Where TensorFlow was imported without the BFC allocator (on a CPU with oneDNN off), the suite exits with one
    line naming the variable to set, not a traceback (issue 18). Where oneDNN is on, the statistics exist anyway."""
    env = dict(os.environ, TF_CPU_ALLOCATOR_USE_BFC="false", TF_ENABLE_ONEDNN_OPTS="0", TF_CPP_MIN_LOG_LEVEL="3")
    code = "from benchmarks._allocator import require_statistics; require_statistics(); print('available')"
    done = run_python(["-c", code], tmp_path, env=_with_root(env), cwd=ROOT, timeout=300, check=False)
    if done.returncode == 0:
        assert done.stdout.strip() == "available"
        pytest.skip("this TensorFlow keeps CPU allocator statistics even without TF_CPU_ALLOCATOR_USE_BFC")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("benchmarks: ") and "TF_CPU_ALLOCATOR_USE_BFC=true" in last, done.stderr
    assert "Traceback" not in done.stderr
