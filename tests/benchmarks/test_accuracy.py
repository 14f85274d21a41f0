"""``python -m benchmarks.accuracy``: bad input fails in one line before training, ``--quick`` runs end to end (with
the real Fashion-MNIST only: it is skipped where the data is not installed, never downloaded), and the results page
and the README agree with the JSON they are generated from."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import _fashion, accuracy, results_page  # noqa: E402


def _one_line_exit(argv: list[str], capsys: pytest.CaptureFixture[str], *needles: str) -> None:
    with pytest.raises(SystemExit) as info:
        accuracy.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("benchmarks.accuracy: "), err
    for needle in needles:
        assert needle in err, err


def test_unknown_row_is_one_line_naming_the_rows(capsys: pytest.CaptureFixture[str]) -> None:
    _one_line_exit(["binary_nett", "--quick"], capsys, "'binary_nett'", "binary_cnn", "int8_qat", "low_bit")


def test_a_venv_without_python_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _one_line_exit(["binary_cnn", "--larq-venv", str(tmp_path)], capsys, "--larq-venv", "bin/python")


def test_a_side_not_of_the_row_is_one_line_naming_the_sides(capsys: pytest.CaptureFixture[str]) -> None:
    _one_line_exit(["pruning", "--sides", "ste_2_4,ste_3_4"], capsys, "ste_3_4", "tfmot_2_4")


def test_bad_data_folder_is_one_line_before_training(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / (_fashion.FILES["x_train"] + ".gz")).write_bytes(b"")
    _one_line_exit(["int8_qat", "--data", str(tmp_path)], capsys, "lacks", "dataset-fashion-mnist")


def _have_data() -> bool:
    cache = _fashion.keras_cache()
    return _fashion.DEBIAN.is_dir() or all(_fashion._file(cache, name) for name in _fashion.FILES.values())


@pytest.mark.skipif(not _have_data(), reason="Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)")
@pytest.mark.parametrize("row", ["binary_cnn", "int8_qat", "pruning", "clustering"])
def test_quick_row_writes_json_png_and_prints_it(tmp_path: Path, row: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "benchmarks.accuracy", row, "--quick", "--out", str(tmp_path)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / f"{row}.json").read_text())
    assert (tmp_path / f"{row}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result["quick"] is True and result["command"] == f"python -m benchmarks.accuracy {row} --quick"
    for key in ("date", "cpu", "tensorflow", "load_average"):
        assert result[key]
    side = result["sides"][{"pruning": "ste_50", "clustering": "ste_16"}.get(row, "ste")]
    assert len(side["curve"]) == 1 and 0.0 <= side["test_accuracy"] <= 1.0
    assert side["test_accuracy"] == side["curve"][-1]["test_accuracy"]
    assert f"test accuracy {100 * side['test_accuracy']:.2f} %" in done.stdout
    assert "_gzip_vs_dense" not in done.stdout  # the summary's keys are printed in words
    if row == "binary_cnn":  # a quick run has no larq side, so no goal against larq
        assert "goal" not in result["summary"] and "goal" not in done.stdout
    if row == "int8_qat":
        assert 0.0 <= side["int8_accuracy"] <= 1.0 and 0.0 <= side["keras_tflite_agreement"] <= 1.0
        assert side["int8_kernels"][0] == side["int8_kernels"][1] > 0  # every conv / dense kernel runs in int8
    if row in ("pruning", "clustering"):  # the stripped kernels hold what was asked, and gzip shrinks the file
        if row == "pruning":
            assert side["zeros"] == pytest.approx(0.5, abs=0.01)
            # one byte a kernel weight (conv2 3·3·16·32, fc1 800·128, fc2 128·10), a float32 threshold and an int64
            # step per wrapper
            assert side["pruning_state_bytes"] == 3 * 3 * 16 * 32 + 800 * 128 + 128 * 10 + 3 * (4 + 8)
        else:
            assert side["distinct_values"] <= 16
        assert side["tflite"]["float_gz"] < 0.8 * result["float_stage"]["tflite"]["float_gz"]
        assert f"float TFLite {side['tflite']['float']:,} B, gzip {side['tflite']['float_gz']:,} B" in done.stdout


def _quick(row: str, out: Path, *extra: str) -> tuple[dict[str, Any], str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "benchmarks.accuracy", row, "--quick", "--out", str(out), *extra]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / f"{row}.json").read_text()), done.stdout


SNNTORCH_VENV = os.environ.get("STE_SNNTORCH_VENV", "")


@pytest.mark.skipif(not _have_data(), reason="Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)")
@pytest.mark.parametrize("row", ["spiking_mlp", "spiking_cnn"])
def test_quick_spiking_row_without_its_peer_says_which_option_to_set(tmp_path: Path, row: str) -> None:
    result, stdout = _quick(row, tmp_path)
    assert result["skipped_sides"] == {"snntorch": "no --snntorch-venv"}
    side = result["sides"]["ste"]
    assert len(side["curve"]) == 1 and 0.0 <= side["test_accuracy"] <= 1.0
    assert "ste.spiking.fuse" in side["form"] and "Fused" in side["form"]
    assert f"test accuracy {100 * side['test_accuracy']:.2f} %" in stdout
    assert side["median_step_s"] > 0 and side["peak_bytes"] > 0


@pytest.mark.skipif(not _have_data(), reason="Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)")
@pytest.mark.skipif(
    not SNNTORCH_VENV, reason="set STE_SNNTORCH_VENV to a venv with torch, snnTorch and numpy (docs/results.md)"
)
@pytest.mark.parametrize("row", ["spiking_mlp", "spiking_cnn"])
def test_quick_spiking_row_computes_snntorchs_function(tmp_path: Path, row: str) -> None:
    """snnTorch is the reference: from the same weights, the untrained ste network gives snnTorch's loss, output
    spikes and gradient norms (through every layer's surrogate) on the same images."""
    result, _ = _quick(row, tmp_path, "--snntorch-venv", SNNTORCH_VENV)
    ours, theirs = result["sides"]["ste"]["initial"], result["sides"]["snntorch"]["initial"]
    assert ours["output_spikes"] == theirs["output_spikes"]
    assert ours["loss"] == pytest.approx(theirs["loss"], rel=1e-5)
    assert len(ours["gradient_norms"]) == len(theirs["gradient_norms"]) == (4 if row == "spiking_mlp" else 6)
    assert ours["gradient_norms"] == pytest.approx(theirs["gradient_norms"], rel=1e-4)
    assert min(theirs["gradient_norms"]) > 0  # a gradient reaches every weight: the check covers the surrogates
    assert {"accuracy_gap_points", "step_time_ratio", "peak_memory_ratio"} <= set(result["summary"])


def test_results_page_and_readme_are_generated_from_the_json() -> None:
    assert results_page.main(["--check"]) == 0, "run python -m benchmarks.results_page"


def test_readme_figures_are_the_json_figures() -> None:
    """Read back every percentage on the README's result lines and find it in the JSON of its row (independently of
    the generator's formatting code)."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split(results_page.START, 1)[1].split(results_page.END, 1)[0]
    found = results_page.results()
    rows = {
        "Binarized CNN": "binary_cnn",
        "Int8 QAT": "int8_qat",
        "quantize_model schemes": "low_bit",
        "Spiking MLP": "spiking_mlp",
        "Spiking CNN": "spiking_cnn",
        "Pruning": "pruning",
        "Clustering": "clustering",
        "KerasHub ViT": "vit",
    }
    lines = [line for line in block.splitlines() if line.startswith("- ")]
    assert len(lines) == len(found)
    for line in lines:
        name = next(row for prefix, row in rows.items() if line.startswith("- " + prefix))
        r = found[name]
        figures = {
            round(100 * f[k], 2)
            for f in r["sides"].values()
            for k in ("test_accuracy", "int8_accuracy", "stripped_accuracy")
            if k in f
        }
        if r.get("float_stage"):
            figures.add(round(100 * r["float_stage"]["test_accuracy"], 2))
        figures |= {round(100 * spread["median"], 2) for spread in r["summary"].get("accuracy", {}).values()}
        quoted = [float(v) for v in re.findall(r"(\d+\.\d+) %", line)]
        assert quoted and all(v in figures for v in quoted), (line, figures)
        assert f"({r['epochs']} " in line


def test_the_page_describes_each_network_with_its_parameter_count() -> None:
    """The parameter counts on the results page are those of the layers it names, counted by hand: weights and biases,
    batch norm's 4 (3 without scale) per channel, the flattened size from 'same' and 'valid' convolutions and 2×2
    pools."""
    binary = 3 * 3 * 32 + 3 * 32 + 3 * 3 * 32 * 64 + 3 * 64 + 3 * 3 * 64 * 64 + 3 * 64 + (3 * 3 * 64) * 10 + 10
    small = 3 * 3 * 32 + 4 * 32 + 3 * 3 * 32 + 4 * 32 + 32 * 64 + 4 * 64 + (7 * 7 * 64) * 10 + 10
    sparse = (3 * 3 * 16 + 16) + (3 * 3 * 16 * 32 + 32) + (5 * 5 * 32 * 128 + 128) + (128 * 10 + 10)
    page = (ROOT / "docs" / "results.md").read_text()
    sections = {s.split("\n", 1)[0]: s for s in page.split("\n## ")[1:]}
    for row, count in {"binary_cnn": binary, "int8_qat": small, "low_bit": small, "pruning": sparse}.items():
        section = sections[results_page.TITLES[row]]
        assert f"{count:,} parameters" in section, row
        assert "**Budget.**" in section and "**Network.**" in section
    for row in ("pruning", "clustering", "int8_qat"):  # the float start trained fewer epochs than the sides
        assert "**the float start is not**" in sections[results_page.TITLES[row]]


def test_the_spiking_and_vit_sections_describe_their_networks() -> None:
    """Counted by hand: the spiking MLP's two Dense layers, the spiking CNN's two 5×5 convolutions (28 → 24 → 12 → 8 →
    4 pixels) and its Dense head; the ViT's own count, 139,018 (the comment on benchmarks/_vit_accuracy.VIT)."""
    mlp = 784 * 256 + 256 + 256 * 10 + 10
    cnn = 5 * 5 * 1 * 8 + 8 + 5 * 5 * 8 * 16 + 16 + 4 * 4 * 16 * 10 + 10
    page = (ROOT / "docs" / "results.md").read_text()
    sections = {s.split("\n", 1)[0]: s for s in page.split("\n## ")[1:]}
    for row, count in {"spiking_mlp": mlp, "spiking_cnn": cnn, "vit": 139_018}.items():
        section = sections[results_page.TITLES[row]]
        assert "**Network.**" in section and f"{count:,} parameters" in section, row
        assert "**Float" in section, row  # what stays float
    vit = sections[results_page.TITLES["vit"]]
    assert "{'" not in vit and "kernel(s)" not in vit  # no Python dict printed, no "kernel(s)"
    assert "float32 kernels that hold three values" in vit


def test_the_vit_chart_names_each_side() -> None:
    """Every ste side of the ViT row has the same versions, so a label made of them says nothing: each legend entry
    names its side's setting, and no two are equal."""
    r = json.loads((ROOT / "benchmarks" / "results" / "accuracy" / "vit.json").read_text())
    labels = {side: accuracy.side_label("vit", side, f.get("versions", "")) for side, f in r["sides"].items()}
    assert len(set(labels.values())) == len(labels), labels
    for side, label in labels.items():
        setting = side.split("_", 1)[-1].replace("_", ":")
        assert setting in label and "0.1.0" not in label, (side, label)


def test_without_matplotlib_the_json_is_saved_and_the_plot_said_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = json.loads((ROOT / "benchmarks" / "results" / "accuracy" / "pruning.json").read_text())
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    said = accuracy.save(result, tmp_path)
    assert "skipped" in said and "matplotlib" in said
    assert json.loads((tmp_path / "pruning.json").read_text()) == result
    assert not (tmp_path / "pruning.png").exists()
    monkeypatch.undo()  # matplotlib back
    assert accuracy.save(result, tmp_path).endswith("pruning.png")
    assert (tmp_path / "pruning.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_load_is_printed_as_text() -> None:
    text = accuracy.load_text({"before": [1.5, 1, 1], "during": {"min": 0.5, "median": 2.0, "max": 3.25}, "after": []})
    assert text == "1-minute load average 1.50 before, 0.50–3.25 during (median 2.00)"
    assert "{" not in text


def test_quick_is_documented_as_a_smoke_test() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.accuracy", "--help"], cwd=ROOT, capture_output=True, text=True
    )
    assert "--quick" in done.stdout and "smoke test" in done.stdout and "means nothing" in " ".join(done.stdout.split())
    assert "smoke test" in (ROOT / "docs" / "results.md").read_text().lower()
    assert "--quick" in (ROOT / "docs" / "performance.md").read_text()


def _int8_result(float_curve: list[float]) -> dict[str, Any]:
    return {
        "row": "int8_qat",
        "epochs": 2,
        "float_stage": {
            "curve": [{"epoch": i + 1, "test_accuracy": a} for i, a in enumerate(float_curve)],
            "test_accuracy": float_curve[-1],
        },
        "sides": {
            "ste": {"int8_accuracy": 0.9124, "keras_tflite_agreement": 0.9995},
            "tfmot": {"int8_accuracy": 0.9123},
        },
        "summary": {
            "int8_minus_float_points": 100 * (0.9124 - float_curve[-1]),
            "int8_gap_points": 0.01,
            "step_time_ratio": 1.0,
            "peak_memory_ratio": 1.0,
            "goal_met": False,
        },
    }


def test_int8_above_float_is_explained_by_the_float_curve_it_has() -> None:
    """The page says why int8 beats float from the float start's own curve: a start that peaked early is not called
    'still improving'; one that rose to its last epoch is."""
    peaked = " ".join(results_page._verdict(_int8_result([0.70, 0.88, 0.8869, 0.8812, 0.8767, 0.8776])))
    assert "still" not in peaked
    assert "peaked at 88.69 % after epoch 3 of 6 and ended at 87.76 %" in peaked
    assert "TFMOT's int8 model, from the same start, gains alike (91.23 %)" in peaked
    rising = " ".join(results_page._verdict(_int8_result([0.70, 0.85, 0.87])))
    assert "still rising after its 3 epochs" in rising and "peaked" not in rising


def test_a_slower_compression_step_says_what_the_cpu_time_shows() -> None:
    """A setting where ste's step is slower than TFMOT's gets its CPU-time figure and an explicit 'no cause known'."""
    r = {
        "row": "pruning",
        "epochs": 2,
        "sides": {"ste_2_4": {}, "tfmot_2_4": {}},
        "summary": {
            "2_4_accuracy_gap_points": 0.1,
            "2_4_step_time_ratio": 1.22,
            "2_4_cpu_per_step_ratio": 0.97,
            "2_4_peak_memory_ratio": 1.01,
            "2_4_gzip_ratio": 1.0,
            "ste_2_4_gzip_vs_dense": 0.61,
        },
    }
    text = " ".join(results_page._verdict(r))
    assert "(×1.22); its CPU time per step was not higher (×0.97)" in text
    assert "the run points to no cause specific to ste" in text


def _binary_result(ste_ms: float, larq_ms: float, float_ms: float) -> dict[str, Any]:
    side = lambda ms, cpu: {"test_accuracy": 0.893, "median_step_s": ms / 1000, "cpu_per_step_s": cpu / 1000}  # noqa: E731
    return {
        "row": "binary_cnn",
        "epochs": 6,
        "sides": {"ste": side(ste_ms, 2 * ste_ms), "larq": side(larq_ms, 2 * larq_ms), "float": side(float_ms, 100)},
        "summary": {
            "accuracy_gap_points": 0.0,
            "step_time_ratio": ste_ms / larq_ms,
            "peak_memory_ratio": 0.9,
            "goal_met": True,
        },
    }


def test_a_slower_binarized_step_is_set_beside_float_keras_3s_own_step() -> None:
    """The page splits ste's step over larq's into Keras 3's float step over larq's and ste's over that float step,
    and names the larger part; a step within 5 % of larq's gets no such paragraph."""
    keras = " ".join(results_page._verdict(_binary_result(89.0, 80.0, 86.4)))
    assert "(step time ×1.11; its CPU time per step was higher too (×1.11))" in keras
    assert "took ×1.08 larq's step in the same run, and ste's binarized network ×1.03 that float step" in keras
    assert "most of the gap is Keras 3's training step" in keras
    binarization = " ".join(results_page._verdict(_binary_result(96.0, 80.0, 82.0)))
    assert "took ×1.02 larq's step" in binarization and "×1.17 that float step" in binarization
    assert "the binarization itself costs more" in binarization
    assert "slower than larq" not in " ".join(results_page._verdict(_binary_result(82.0, 80.0, 86.0)))


def _have_hub() -> bool:
    import importlib.util

    return importlib.util.find_spec("keras_hub") is not None


def test_a_row_whose_library_is_missing_is_one_line_naming_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(accuracy.ROWS["vit"], "requires", ("keras_hub_not_here", "keras-hub (pip install keras-hub)"))
    _one_line_exit(["vit", "--quick"], capsys, "the vit row needs keras-hub", "pip install keras-hub")


def test_sides_made_by_another_sides_process_are_gathered_in_the_rows_order() -> None:
    """Keras's post-training sides come out of the float side's process; where that process could not build its side,
    they say so instead of vanishing."""
    derived = accuracy.ROWS["vit"]["derived"]
    sides = dict.fromkeys(["float", "keras_int8", "ste_int8", "keras_int4"])
    made = {
        "ste_int8": {"test_accuracy": 0.8},
        "float": {"test_accuracy": 0.7, "derived": {"keras_int8": {"test_accuracy": 0.6}}},
    }
    gathered = accuracy._gather(made, sides, derived)
    assert list(gathered) == ["float", "keras_int8", "ste_int8", "keras_int4"]
    assert "derived" not in gathered["float"] and gathered["keras_int8"] == {"test_accuracy": 0.6}
    assert "float side" in gathered["keras_int4"]["pending"]
    pending = accuracy._gather({"float": {"pending": "ParameterError: no"}}, {"keras_int8": None}, derived)
    assert pending["keras_int8"]["pending"] == "float side: ParameterError: no"


def test_vit_summary_is_qat_minus_ptq_per_seed_in_points() -> None:
    def run(qat: float, ptq: float) -> dict[str, Any]:
        return {
            "keras_int8": {"test_accuracy": ptq},
            "ste_int8": {"test_accuracy": qat},
            "ste_int4": {"pending": "not yet"},
            "ste_2_4": {"test_accuracy": 0.9, "stripped_accuracy": 0.5},
        }

    summary = accuracy._vit_summary([run(0.85, 0.84), run(0.86, 0.87), run(0.88, 0.85)])
    gaps = summary["int8_qat_minus_ptq_points"]
    assert gaps["values"] == pytest.approx([1.0, -1.0, 3.0])
    assert (gaps["median"], gaps["min"], gaps["max"]) == pytest.approx((1.0, -1.0, 3.0))
    assert "int4_qat_minus_ptq_points" not in summary and summary["pending"] == {"ste_int4": "not yet"}
    assert summary["accuracy"]["ste_2_4"]["median"] == 0.5  # a pruned side counts its stripped model
    assert summary["goal_met"] is True


@pytest.mark.skipif(not _have_data(), reason="Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)")
@pytest.mark.skipif(not _have_hub(), reason="keras-hub is not installed (pip install keras-hub)")
def test_quick_vit_row_reports_every_side_or_why_it_is_pending(tmp_path: Path) -> None:
    result, stdout = _quick("vit", tmp_path)
    sides = result["sides"]
    assert list(sides) == list(accuracy.ROWS["vit"]["sides"])
    for side, f in sides.items():
        if "pending" in f:  # a side this ste cannot build yet says so, with the error, and the rest of the row ran
            assert f["pending"] and f"{side:11s} PENDING: {f['pending']}" in stdout
            continue
        assert f["flatbuffers"], side
        for t in f["flatbuffers"]:
            assert "refused" in t or 0 < t["gzip_bytes"] < t["bytes"] + 64, (side, t)
    for side in ("float", "keras_int8", "keras_int4", "ste_int8", "ste_int4", "ste_2_4"):
        assert "pending" not in sides[side], sides[side]
    # ste's int8 flatbuffer runs every FULLY_CONNECTED and BATCH_MATMUL on int8 inputs and int8 weights
    types = sides["ste_int8"]["flatbuffers"][0]["kernel_op_types"]
    for op in ("FULLY_CONNECTED", "BATCH_MATMUL"):
        assert set(types[op]) == {"INT8 x INT8"}, types
    # 2 of every 4 weights along the input channels (an EinsumDense's contracted axis) of every pruned kernel are zero
    # after stripping, the attention projections' included
    pruned = sides["ste_2_4"]
    assert "attention_left_dense" not in pruned
    assert any("/mha/" in path for path in pruned["kernel_zeros"])
    for path, zeros in pruned["kernel_zeros"].items():
        assert zeros == 0.5, path
    summary = result["summary"]
    gap = 100 * (sides["ste_int8"]["test_accuracy"] - sides["keras_int8"]["test_accuracy"])
    assert summary["int8_qat_minus_ptq_points"]["median"] == pytest.approx(gap)
    assert "ViTBackbone" in sides["float"]["network"] and "num_layers=1" in sides["float"]["network"]


def test_every_chart_text_is_at_least_11_px_on_a_390_px_phone() -> None:
    """The committed charts of docs/results.md, shown PHONE_COLUMN_PX wide on a 390 px phone: every text of the figure
    the JSON draws (title, axis labels, ticks, legend), at its font size in points × PLOT_DPI / 72 pixels in the PNG
    and scaled by the column's width over the committed PNG's width, is at least 11 px tall."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    images = ROOT / "docs" / "img" / "results"
    for path in sorted((ROOT / "benchmarks" / "results" / "accuracy").glob("*.json")):
        png = (images / f"{path.stem}.png").read_bytes()
        width = int.from_bytes(png[16:20], "big")  # the IHDR chunk: width, then height
        fig = accuracy.figure(json.loads(path.read_text()))
        fig.canvas.draw()  # the tick labels exist once the figure is drawn
        sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
        plt.close(fig)
        smallest = min(sizes) * accuracy.PLOT_DPI / 72 * min(1.0, accuracy.PHONE_COLUMN_PX / width)
        assert smallest >= 11, f"{path.stem}.png: {smallest:.1f} px text at 390 px ({width} px wide, {min(sizes)} pt)"
