"""Accuracy on Fashion-MNIST, ste side by side with its peers: one command per row.

    python -m benchmarks.accuracy binary_cnn --larq-venv VENV      # ste vs larq 0.14 vs float Keras 3
    python -m benchmarks.accuracy int8_qat --tfmot-venv VENV       # ste.quantize_model + to_tflite vs TFMOT 0.8
    python -m benchmarks.accuracy low_bit                          # ternary and binary schemes of quantize_model
    python -m benchmarks.accuracy spiking_mlp --snntorch-venv VENV # ste.spiking vs snnTorch (tutorial 5's network)
    python -m benchmarks.accuracy spiking_cnn --snntorch-venv VENV # ste.spiking vs snnTorch (tutorial 6's network)
    python -m benchmarks.accuracy pruning --tfmot-venv VENV        # ste.sparsity vs TFMOT: 50 %, 80 %, 2:4
    python -m benchmarks.accuracy clustering --tfmot-venv VENV     # ste.clustering vs TFMOT: 16 and 32 clusters
    python -m benchmarks.accuracy vit                              # KerasHub ViT: Keras's PTQ vs ste's QAT, 2:4
    python -m benchmarks.accuracy binary_cnn --quick               # a smoke test (about a minute, no peers)

``--quick`` is a smoke test: 512 training and 500 test images, one epoch, no peers (pruning and clustering at one
setting, 50 % and 16 clusters), written under
``benchmarks/results/accuracy/quick/``. It checks that a row runs end to end; its accuracy (often 20-70 %) means
nothing. Without matplotlib a run still writes its JSON and says the plot was skipped.

Options: ``--epochs N``, ``--data DIR`` (Fashion-MNIST's IDX files; otherwise ``benchmarks._fashion`` looks in the
Debian package's folder, then Keras's cache, then downloads with Keras), ``--out DIR``, ``--train N`` (the first
``N`` training images only: shorter epochs, for a side-by-side of step time and memory in a few minutes, e.g.
``pruning --train 12800 --epochs 5 --float-epochs 1``), ``--sides A,B`` (a subset of the row's sides) and
``--seeds N`` (fine-tune every side with seeds 0 … N−1 from the same float start, one lockstep run per seed: the
spread of the accuracies).

Every side of a row runs in a fresh process (the peers with their own venv's Python, ``TF_USE_LEGACY_KERAS=1``),
all at once, in lockstep: one side trains an epoch and evaluates while the others wait, in an order that reverses
every epoch, so that each side's step times see the same load on a shared machine and the ratios between them are
fair. Each side starts from the same seed, data, batch (128), optimizer and epochs. For ``int8_qat`` and ``low_bit``
the float network is trained once, here, and every side fine-tunes those same weights; so do ``pruning`` and
``clustering``, whose sides (``ste_50``, ``tfmot_50``, …, ``ste_16``, …) each prune or cluster a copy with
``benchmarks.sparsity.prune`` (every layer but the first convolution) or ``cluster_weights`` (k-means++), fine-tune it,
strip it and report its TFLite sizes raw and gzipped (``benchmarks.sparsity.sizes``: float, int8 weights, and
``EXPERIMENTAL_SPARSITY`` where the converter accepts it). ``vit`` (keras-hub needed) fine-tunes a small KerasHub ViT
as float, with ste's int8, int4 weight-only and ternary QAT, and with ste's 2:4 pruning; the float side's process
also quantizes its fine-tuned model with Keras's own post-training ``model.quantize("int8" | "int4")``
(``benchmarks/_vit_accuracy.py``). Every side also reports its process's CPU time per training step, which a loaded
machine disturbs less than wall time.

Writes ``NAME.json`` (date, CPU, TensorFlow version, command, load average, every side's per-epoch test accuracy,
step time and allocator peak) and ``NAME.png`` (the accuracy curves) to ``benchmarks/results/accuracy/`` (``quick/``
under it for ``--quick``), and prints the row. ``python -m benchmarks.results_page`` turns the JSON into
docs/results.md and the README's lines.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from ._allocator import environment

__all__ = ["ROWS", "main"]

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "accuracy"
WORKER = Path(__file__).resolve().parent / "_accuracy_worker.py"
SEED = 0
LIBS = ("ste", "tfmot")
QUICK = {"train": 512, "test": 500, "epochs": 1, "float_epochs": 1}  # the reference sides ("float") are left out
QUICK_NOTE = (
    "--quick is a smoke test: 512 training images and one epoch check that the row runs end to end; its accuracy "
    "means nothing (a full run takes 15-90 minutes)."
)

# sides: name -> the venv option it needs (None: this venv); epochs / float_epochs: the full run's defaults, sized
# so that a row fits in 30 minutes on 2 loaded cores
ROWS: dict[str, dict[str, Any]] = {
    "binary_cnn": {
        "sides": {"ste": None, "larq": "larq_venv", "float": None},
        "peer": "larq",
        "epochs": 6,
        "learning_rate": 1e-3,
    },
    "int8_qat": {
        "sides": {"ste": None, "tfmot": "tfmot_venv"},
        "peer": "tfmot",
        "epochs": 2,
        "float_epochs": 6,
        "learning_rate": 2e-4,
        "float_learning_rate": 2e-3,
    },
    "pruning": {  # PolynomialDecay(0 -> s) over the first 60 % of the steps, or 2:4 (benchmarks.sparsity.prune)
        "sides": {f"{lib}_{s}": (None if lib == "ste" else "tfmot_venv") for s in ("50", "80", "2_4") for lib in LIBS},
        "peer": "tfmot",
        "quick_sides": ["ste_50"],
        "epochs": 2,
        "float_epochs": 3,
        "learning_rate": 5e-4,
        "float_learning_rate": 1e-3,
    },
    "clustering": {  # k-means++ centroids, every layer
        "sides": {f"{lib}_{k}": (None if lib == "ste" else "tfmot_venv") for k in ("16", "32") for lib in LIBS},
        "peer": "tfmot",
        "quick_sides": ["ste_16"],
        "epochs": 2,
        "float_epochs": 3,
        "learning_rate": 1e-4,
        "float_learning_rate": 1e-3,
    },
    "low_bit": {
        "sides": {"ternary": None, "binary": None},
        "peer": None,
        "epochs": 4,
        "float_epochs": 6,
        "learning_rate": 5e-4,
        "float_learning_rate": 2e-3,
    },
}
# The KerasHub ViT: its own worker (benchmarks/_vit_accuracy.py); keras_int8 and keras_int4 come from the float side's
# process (post-training quantization of its fine-tuned model)
ROWS["vit"] = {
    "sides": {
        side: None for side in ("float", "keras_int8", "ste_int8", "keras_int4", "ste_int4", "ste_ternary", "ste_2_4")
    },
    "derived": {"keras_int8": "float", "keras_int4": "float"},
    "quick_sides": ["float", "keras_int8", "ste_int8", "keras_int4", "ste_int4", "ste_ternary", "ste_2_4"],
    "peer": None,
    "epochs": 2,
    "float_epochs": 4,
    "seeds": 2,
    "learning_rate": 2e-4,
    "float_learning_rate": 1e-3,
    "worker": "_vit_accuracy.py",
    "quick_network": {"patch_size": 7, "num_layers": 1, "num_heads": 2, "hidden_dim": 16, "mlp_dim": 32},
    "requires": ("keras_hub", "keras-hub (pip install keras-hub; 0.32 tested)"),
}
# The spiking rows: their own worker (benchmarks/_spiking_accuracy.py, which both ste's and snnTorch's venv run) and
# networks (its NETS); the learning rates are those of snnTorch's tutorials 5 and 6
ROWS.update(
    {
        "spiking_mlp": {
            "sides": {"ste": None, "snntorch": "snntorch_venv"},
            "peer": "snntorch",
            "epochs": 2,
            "learning_rate": 5e-4,
            "worker": "_spiking_accuracy.py",
        },
        "spiking_cnn": {
            "sides": {"ste": None, "snntorch": "snntorch_venv"},
            "peer": "snntorch",
            "epochs": 2,
            "learning_rate": 1e-2,
            "worker": "_spiking_accuracy.py",
        },
    }
)


def _fail(message: str) -> None:
    """One line on stderr and exit status 2, before anything trains."""
    print(f"benchmarks.accuracy: {message}", file=sys.stderr)
    raise SystemExit(2)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.accuracy", description=__doc__.split("\n")[0])
    parser.add_argument("name", help=f"the row: one of {', '.join(ROWS)}")
    parser.add_argument("--epochs", type=int, default=None, help="training epochs of every side (the QAT epochs)")
    parser.add_argument("--float-epochs", type=int, default=None, help="int8_qat, low_bit: epochs of the float start")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke test: 512 training and 500 test images, one epoch, no peers (pruning and clustering at one "
        "setting), results under quick/; "
        "checks that the row runs end to end in about a minute, its accuracy means nothing",
    )
    parser.add_argument("--train", type=int, default=None, help="train on the first N images only (shorter epochs)")
    parser.add_argument("--sides", default=None, help="some of the row's sides, e.g. ste_2_4,tfmot_2_4")
    parser.add_argument("--seeds", type=int, default=None, help="fine-tune every side with N seeds (their spread)")
    parser.add_argument("--data", default=None, help="a folder with Fashion-MNIST's four IDX files")
    parser.add_argument("--larq-venv", default=None, help="a venv with larq 0.14 and tf-keras (binary_cnn's peer)")
    parser.add_argument("--tfmot-venv", default=None, help="a venv with TFMOT 0.8 and tf-keras (int8_qat's peer)")
    parser.add_argument("--snntorch-venv", default=None, help="a venv with torch and snnTorch (the spiking rows' peer)")
    parser.add_argument("--out", default=None, help="the results folder (default benchmarks/results/accuracy)")
    args = parser.parse_args(argv)
    if args.name not in ROWS:
        _fail(
            f"unknown row {args.name!r}; expected one of {', '.join(ROWS)} (e.g. python -m benchmarks.accuracy "
            f"{next(iter(ROWS))} --quick)."
        )
    if args.sides is not None:
        unknown = sorted(set(args.sides.split(",")) - set(ROWS[args.name]["sides"]))
        if unknown:
            _fail(
                f"--sides names {', '.join(unknown)}, not sides of {args.name}; expected some of "
                f"{', '.join(ROWS[args.name]['sides'])}, comma-separated."
            )
    for option in ("epochs", "float_epochs", "train", "seeds"):
        value = getattr(args, option)
        if value is not None and value < 1:
            _fail(f"--{option.replace('_', '-')} must be at least 1, got {value}.")
    if "requires" in ROWS[args.name]:
        import importlib.util

        module, what = ROWS[args.name]["requires"]
        if importlib.util.find_spec(module) is None:
            _fail(f"the {args.name} row needs {what}, which this Python cannot import; install it, or run another row.")
    for option in ("larq_venv", "tfmot_venv", "snntorch_venv"):
        venv = getattr(args, option)
        if venv is not None and not (Path(venv) / "bin" / "python").is_file():
            _fail(
                f"--{option.replace('_', '-')} {venv} has no bin/python; pass the folder of a virtual "
                "environment (see docs/results.md for how to make one)."
            )
    return args


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def _float_stage(data: Any, spec: dict[str, Any], epochs: int, path: str) -> dict[str, Any]:
    """Train the row's network (the CNN, or the ViT of the row's worker) in float here (Keras 3) and write its weights
    and the data to ``path`` for every side."""
    import importlib

    import _accuracy_worker as worker  # the caller put benchmarks/ on sys.path
    import keras
    import numpy as np

    x_train, x_test = ((a.astype("float32") / 255.0)[..., None] for a in (data.x_train, data.x_test))
    keras.utils.set_random_seed(SEED)
    network = importlib.import_module(spec.get("worker", "_accuracy_worker.py")[: -len(".py")]).network
    model = network(keras, spec["row"], spec["size"]) if spec.get("size") else network(keras, spec["row"])
    worker.compile_model(keras, model, spec["float_learning_rate"])
    curve = []
    for epoch in range(epochs):
        model.fit(x_train, data.y_train.astype("int32"), epochs=1, batch_size=worker.BATCH, verbose=0)
        accuracy = float(model.evaluate(x_test, data.y_test.astype("int32"), batch_size=1000, verbose=0)[1])
        curve.append({"epoch": epoch + 1, "test_accuracy": accuracy})
    dense_sizes = None
    if spec["row"] in worker.COMPRESSION:  # the dense model's TFLite sizes: what pruning and clustering shrink
        import sparsity

        dense_sizes = sparsity.sizes(model, "ste")
    weights = model.get_weights()
    arrays = {f"weight_{i}": w for i, w in enumerate(weights)}
    np.savez(
        path,
        x_train=data.x_train,
        y_train=data.y_train,
        x_test=data.x_test,
        y_test=data.y_test,
        weights=len(weights),
        **arrays,
    )
    stage = {"curve": curve, "test_accuracy": curve[-1]["test_accuracy"], "parameters": int(model.count_params())}
    return {**stage, "tflite": dense_sizes} if dense_sizes else stage


def _command_line(args: argparse.Namespace) -> str:
    """The command as a user types it, without machine paths (a venv or data folder is shown by its option)."""
    parts = ["python -m benchmarks.accuracy", args.name]
    if args.epochs is not None:
        parts.append(f"--epochs {args.epochs}")
    if args.float_epochs is not None:
        parts.append(f"--float-epochs {args.float_epochs}")
    if args.train is not None:
        parts.append(f"--train {args.train}")
    if args.sides is not None:
        parts.append(f"--sides {args.sides}")
    if args.seeds is not None:
        parts.append(f"--seeds {args.seeds}")
    if args.quick:
        parts.append("--quick")
    for option in ("larq_venv", "tfmot_venv", "snntorch_venv", "data"):
        if getattr(args, option) is not None:
            flag = option.replace("_", "-")
            parts.append(f"--{flag} {flag.split('-')[0].upper()}_VENV" if "venv" in option else "--data DIR")
    return " ".join(parts)


def _compression_summary(sides: dict[str, Any], float_stage: Any) -> dict[str, Any]:
    """Per setting: ste's accuracy minus TFMOT's (points), step time, CPU time per step and allocator peak as ratios
    to TFMOT's, each side's gzipped float TFLite size as a fraction of the dense model's."""
    out: dict[str, Any] = {}
    dense_gz = (float_stage or {}).get("tflite", {}).get("float_gz")
    met = []
    for side, f in sides.items():
        library, setting = side.split("_", 1)
        if dense_gz:
            out[f"{side}_gzip_vs_dense"] = f["tflite"]["float_gz"] / dense_gz
        peer = sides.get(f"tfmot_{setting}")
        if library != "ste" or peer is None:
            continue
        gap = 100 * (f["stripped_accuracy"] - peer["stripped_accuracy"])
        out[f"{setting}_accuracy_gap_points"] = gap
        out[f"{setting}_step_time_ratio"] = f["median_step_s"] / peer["median_step_s"]
        if f.get("epoch_step_s") and peer.get("epoch_step_s"):  # epoch by epoch: the two sides ran in turn
            ratios = [a / b for a, b in zip(f["epoch_step_s"], peer["epoch_step_s"])]
            out[f"{setting}_step_time_ratio_by_epoch"] = ratios
            out[f"{setting}_step_time_ratio_median_epoch"] = statistics.median(ratios)
        if "pruning_state_bytes" in f and peer.get("pruning_state_bytes"):
            out[f"{setting}_pruning_state_ratio"] = f["pruning_state_bytes"] / peer["pruning_state_bytes"]
        out[f"{setting}_cpu_per_step_ratio"] = f["cpu_per_step_s"] / peer["cpu_per_step_s"]
        out[f"{setting}_peak_memory_ratio"] = f["peak_bytes"] / peer["peak_bytes"]
        out[f"{setting}_gzip_ratio"] = f["tflite"]["float_gz"] / peer["tflite"]["float_gz"]
        met.append(gap >= -0.3)
    if met:
        out["goal"] = "ste's accuracy at least TFMOT's minus 0.3 points in every setting"
        out["goal_met"] = all(met)
    return out


def _gather(results: dict[str, Any], sides: dict[str, Any], derived: dict[str, str]) -> dict[str, Any]:
    """The chosen sides of one lockstep run, in the row's order: the processes' own, and those a process made for
    another side (``derived``: e.g. Keras's post-training quantization of the float side's model)."""
    made = {}
    for owner in set(derived.values()) & set(results):
        made.update(results[owner].pop("derived", {}))
    gathered = {}
    for side in sides:
        if side in results:
            gathered[side] = results[side]
        elif side in made:
            gathered[side] = made[side]
        else:
            reason = results.get(derived.get(side, ""), {}).get("pending", "its process did not make it")
            gathered[side] = {"side": side, "pending": f"{derived.get(side)} side: {reason}"}
    return gathered


def deployed_accuracy(figures: dict[str, Any]) -> float:
    """The test accuracy of the model a side deploys, in Keras: the stripped model's for a pruned side."""
    return float(figures.get("stripped_accuracy", figures["test_accuracy"]))


def _spread(values: list[float]) -> dict[str, Any]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "values": values}


def _vit_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Over the seeds: each side's deployed accuracy, ste's QAT minus Keras's PTQ at equal bits (points), the sides
    still pending, and whether QAT matched or beat PTQ."""
    done = [{side: f for side, f in run.items() if "pending" not in f} for run in runs]
    out: dict[str, Any] = {
        "accuracy": {
            side: _spread([deployed_accuracy(run[side]) for run in done if side in run])
            for side in runs[0]
            if any(side in run for run in done)
        },
        "pending": {side: f["pending"] for side, f in runs[0].items() if "pending" in f},
    }
    met = []
    for bits in ("int8", "int4"):
        qat, ptq = f"ste_{bits}", f"keras_{bits}"
        gaps = [
            100 * (deployed_accuracy(run[qat]) - deployed_accuracy(run[ptq])) for run in done if {qat, ptq} <= set(run)
        ]
        if gaps:
            out[f"{bits}_qat_minus_ptq_points"] = _spread(gaps)
            met.append(statistics.median(gaps) >= 0.0)
    out["goal"] = "at equal bits, ste's QAT accuracy at least Keras's post-training quantization's (median over seeds)"
    out["goal_met"] = all(met) if met else None
    return out


def _summary(name: str, spec: dict[str, Any], sides: dict[str, Any], float_stage: Any) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    first = next(iter(spec["sides"]))
    peer = spec["peer"]
    if peer and peer in sides:
        summary["accuracy_gap_points"] = 100 * (sides[first]["test_accuracy"] - sides[peer]["test_accuracy"])
        summary["step_time_ratio"] = sides[first]["median_step_s"] / sides[peer]["median_step_s"]
        summary["peak_memory_ratio"] = sides[first]["peak_bytes"] / sides[peer]["peak_bytes"]
    if name in ("pruning", "clustering"):
        summary.update(_compression_summary(sides, float_stage))
    if name == "binary_cnn":
        if "accuracy_gap_points" in summary:  # the goal is against larq: without its side there is none
            summary["goal"] = "ste's accuracy at least larq's minus 0.3 points"
            summary["goal_met"] = summary["accuracy_gap_points"] >= -0.3
    if name == "int8_qat":
        ste_side = sides["ste"]
        summary["int8_minus_float_points"] = 100 * (ste_side["int8_accuracy"] - float_stage["test_accuracy"])
        summary["goal"] = (
            "int8 TFLite within 0.2 points of float; at least 99 % of predictions equal between the Keras QAT model "
            "and int8 TFLite; at least TFMOT's int8 accuracy minus 0.2 points"
        )
        met = [abs(summary["int8_minus_float_points"]) <= 0.2, ste_side["keras_tflite_agreement"] >= 0.99]
        if "tfmot" in sides:
            summary["int8_gap_points"] = 100 * (ste_side["int8_accuracy"] - sides["tfmot"]["int8_accuracy"])
            met.append(summary["int8_gap_points"] >= -0.2)
        summary["goal_met"] = all(met)
    return summary


# what the float stage of each row is, in the chart's legend
FLOAT_LABELS = {
    "int8_qat": "float, before QAT",
    "low_bit": "float, before QAT",
    "pruning": "dense float, before pruning",
    "clustering": "dense float, before clustering",
    "vit": "float start, before fine-tuning",
}
# one style per side, in the row's order: a peer's curve drawn exactly on ste's stays visible (hollow, larger marker,
# dashed) under ste's (filled, smaller marker, solid)
STYLES = (
    {"marker": "o", "linestyle": "-", "markersize": 5, "linewidth": 2.6},
    {"marker": "s", "linestyle": "--", "markersize": 9, "markerfacecolor": "none", "markeredgewidth": 1.5},
    {"marker": "^", "linestyle": "-", "markersize": 6, "linewidth": 2.6},
    {"marker": "D", "linestyle": ":", "markersize": 9, "markerfacecolor": "none", "markeredgewidth": 1.5},
    {"marker": "v", "linestyle": "-", "markersize": 6, "linewidth": 2.6},
    {"marker": "P", "linestyle": "--", "markersize": 9, "markerfacecolor": "none", "markeredgewidth": 1.5},
    {"marker": "X", "linestyle": "-", "markersize": 6, "linewidth": 2.6},
)


#: the ViT row's sides as a reader names them (every ste side has the same versions: they cannot name it)
VIT_LABELS = {
    "float": "float, fine-tuned",
    "ste_int8": "ste int8 QAT",
    "ste_int4": "ste int4 QAT (weights)",
    "ste_ternary": "ste ternary QAT",
    "ste_2_4": "ste 2:4 pruning",
    "keras_int8": "Keras int8 PTQ",
    "keras_int4": "Keras int4 PTQ",
}


def side_label(row: str, side: str, versions: str = "") -> str:
    """A side as a reader names it: "ste, 50 %", "TFMOT, 2:4", "ste, 16 clusters", "larq 0.14.0", "ste int8 QAT"."""
    if row == "vit" and side in VIT_LABELS:
        return VIT_LABELS[side]
    library, _, setting = side.partition("_")
    name = {"tfmot": "TFMOT", "snntorch": "snnTorch"}.get(library, library)
    if row in ("pruning", "clustering") and setting:
        if row == "clustering":
            amount = f"{setting} clusters"
        else:
            amount = setting.replace("_", ":") if "_" in setting else f"{setting} %"
        return f"{name}, {amount}"
    first = versions.split(",")[0]
    if first.lower().startswith(name.lower()):
        return first
    return f"{side} ({first})" if first else side


def load_text(load: dict[str, Any]) -> str:
    """The load averages of a run as a phrase: "load average 0.4 before, 1.2–2.3 during (median 1.8), 1.1 after"."""
    parts = []
    if load.get("before"):
        parts.append(f"{load['before'][0]:.2f} before")
    during = load.get("during") or {}
    if during:
        parts.append(f"{during['min']:.2f}–{during['max']:.2f} during (median {during['median']:.2f})")
    if load.get("after"):
        parts.append(f"{load['after'][0]:.2f} after")
    return "1-minute load average " + ", ".join(parts) if parts else "load average not recorded"


# The charts are drawn at PLOT_DPI and shown on a 390 px phone in a text column PHONE_COLUMN_PX wide (Material's 0.8 rem
# margins): a PNG wider than that is scaled down, and its smallest text with it (tests/benchmarks check the size)
PLOT_DPI = 110
PHONE_COLUMN_PX = 358
# a legend of two columns when every label is at most this long; longer labels go one per line, so that the legend
# never widens the image beyond its axes (and so shrinks every text on a phone)
LEGEND_TWO_COLUMNS_MAX_CHARS = 22


def figure(result: dict[str, Any]) -> Any:
    """The test accuracy per epoch of every side (and of the float stage), legend under the axes, integer epochs, as a
    matplotlib figure: 5.2 inches wide, text 13-14 pt. Raises ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    curves = []
    offset = 0
    if result.get("float_stage"):
        curve = result["float_stage"]["curve"]
        style = {"color": "0.45", "marker": ".", "linestyle": ":", "markersize": 8}
        curves.append((FLOAT_LABELS.get(result["row"], "float"), curve, 0, style))
        offset = len(curve)
    drawn = [(side, f) for side, f in result["sides"].items() if "curve" in f]  # post-training or pending: no curve
    deployed = any("int8_accuracy" in f for _, f in drawn)  # the curves are Keras's; the int8 TFLite figure is apart
    for index, (side, f) in enumerate(drawn):
        label = side_label(result["row"], side, f.get("versions", ""))
        label = f"{label}, Keras accuracy" if deployed else label
        curves.append((label, f["curve"], offset, {**STYLES[index % len(STYLES)], "color": f"C{index}"}))
    limits, clipped = _compared_range(result, curves, offset)
    if clipped:  # the float start's entry says what it does not show, on a line of its own (a narrow legend)
        curves[0] = (f"{curves[0][0]}\n({clipped})", *curves[0][1:])
    lines = [line for label, *_ in curves for line in label.split("\n")]
    columns = 2 if max(len(line) for line in lines) <= LEGEND_TWO_COLUMNS_MAX_CHARS else 1
    with plt.rc_context({"font.size": 14}):
        legend_rows = (len(lines) + columns - 1) // columns
        fig, axis = plt.subplots(figsize=(5.2, 3.9 + 0.3 * legend_rows))
        for label, curve, start, style in curves:
            epochs = [start + p["epoch"] for p in curve]
            style = {"linewidth": 1.8, **style}
            axis.plot(epochs, [100 * p["test_accuracy"] for p in curve], label=label, **style)
        if limits:
            axis.set_ylim(*limits)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.tick_params(labelsize=14)  # also the ticks made when the figure is drawn, after this context
        axis.set_xlabel("epoch (float first, then fine-tuning)" if offset else "epoch")
        axis.set_ylabel("test accuracy (%)")
        axis.set_title(f"{result['row']}: test accuracy{' (quick smoke run)' if result['quick'] else ''}", fontsize=14)
        axis.grid(alpha=0.3)
        # under the axes, never over the data
        axis.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=columns, frameon=False, fontsize=13)
        fig.tight_layout()
    return fig


def _compared_range(result: dict[str, Any], curves: list[Any], offset: int) -> tuple[tuple[float, float] | None, str]:
    """The y axis spans the compared sides (with the float start's last epoch when that does not more than double the
    span), so that the float start's first epochs do not squeeze the sides into a corner. Returns the y limits (None:
    matplotlib's own) and what the float start's legend entry says about its values below the axis."""
    if not offset:
        return None, ""
    sides = [100 * p["test_accuracy"] for _, curve, start, _ in curves if start for p in curve]
    stage = [100 * p["test_accuracy"] for p in result["float_stage"]["curve"]]
    if not sides:
        return None, ""
    low, high = min(sides), max(sides)
    if max(high, stage[-1]) - min(low, stage[-1]) <= 2 * (high - low):
        low, high = min(low, stage[-1]), max(high, stage[-1])
    pad = max(0.3, 0.08 * (high - low))
    bottom = low - pad
    below = [value for value in stage if value < bottom]
    if not below:
        return None, ""
    limits = (bottom, max([high, *(v for v in stage if v >= bottom)]) + pad)
    if len(below) == 1:
        return limits, f"epoch {stage.index(below[0]) + 1}: {below[0]:.1f} %, off the axis"
    return limits, f"{min(below):.1f}–{max(below):.1f} %, off the axis"


def plot(result: dict[str, Any], path: Path) -> None:
    """:func:`figure`, saved as a PNG at :data:`PLOT_DPI` (530 to 560 px wide: its smallest text is about 12 px tall
    when a 390 px phone shows it :data:`PHONE_COLUMN_PX` wide). Raises ImportError without matplotlib."""
    import matplotlib.pyplot as plt

    fig = figure(result)
    fig.savefig(path, dpi=PLOT_DPI, bbox_inches="tight")
    plt.close(fig)


def save(result: dict[str, Any], out: Path) -> str:
    """Writes ``NAME.json``, then ``NAME.png`` where matplotlib is installed; says where the plot went, or why not."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{result['row']}.json").write_text(json.dumps(result, indent=1) + "\n")
    try:
        plot(result, out / f"{result['row']}.png")
    except ImportError:
        return "skipped, matplotlib is not installed (the JSON has the curves; pip install matplotlib to draw them)"
    return str(out / f"{result['row']}.png")


def _print_row(result: dict[str, Any]) -> None:
    print(
        f"{result['row']} ({'quick, ' if result['quick'] else ''}{result['epochs']} "
        f"epoch{'' if result['epochs'] == 1 else 's'}, "
        f"{result['train_samples']} training images; {load_text(result['load_average'])}):"
    )
    if result.get("float_stage"):
        label = FLOAT_LABELS.get(result["row"], "float")
        print(f"  {label}: test accuracy {100 * result['float_stage']['test_accuracy']:.2f} %")
    for side, f in result["sides"].items():
        extra = ""
        if "int8_accuracy" in f:
            extra = (
                f", int8 TFLite {100 * f['int8_accuracy']:.2f} %, agreement {100 * f['keras_tflite_agreement']:.2f} %"
            )
        if "tflite" in f:
            t = f["tflite"]
            extra = (
                f", stripped {100 * f['stripped_accuracy']:.2f} %, "
                + (f"zeros {f['zeros']:.3f}" if "zeros" in f else f"{f['distinct_values']} values")
                + f", float TFLite {t['float']:,} B, gzip {t['float_gz']:,} B, int8 gzip {_bytes(t.get('int8_gz'))}, "
                f"sparse gzip {_bytes(t.get('sparse_gz', 'refused'))}"
            )
        if "pruning_state_bytes" in f:
            extra += f", pruning state {f['pruning_state_bytes']:,} B"
        if "packed_bytes" in f:
            extra = f", packed {f['packed_bytes']} B of {f['float32_bytes']} B float32"
        print(
            f"  {side:9s} test accuracy {100 * f['test_accuracy']:.2f} %, step {1000 * f['median_step_s']:.1f} ms, "
            f"peak {f['peak_bytes'] / 2**20:.1f} MiB{extra}  [{f['versions']}]"
        )
    for key, value in result["summary"].items():
        print(f"  {_summary_label(key)}: {round(value, 4) if isinstance(value, float) else value}")


def _bytes(value: Any) -> str:
    """A size in bytes with thousands separators, or the reason there is none (``refused``)."""
    return f"{value:,} B" if isinstance(value, int) else str(value)


def _summary_label(key: str) -> str:
    """A summary key in words: ``ste_50_gzip_vs_dense`` is "ste_50: gzipped float TFLite ÷ the dense model's"."""
    if key.endswith("_gzip_vs_dense"):
        return f"{key.removesuffix('_gzip_vs_dense')}: gzipped float TFLite ÷ the dense model's"
    return key


def _flatbuffer_line(t: dict[str, Any]) -> str:
    if "refused" in t:
        return f"refused ({t['refused']})"
    accuracy = (
        f"TFLite {100 * t['tflite_accuracy']:.2f} %" if "tflite_accuracy" in t else f"not run ({t['interpreter']})"
    )
    return f"{t['bytes']:,} B, gzip {t['gzip_bytes']:,} B, {accuracy}"


def _print_vit(result: dict[str, Any]) -> None:
    """The vit row: each side's deployed accuracy (over the seeds), flatbuffers and step time; the summary."""
    epochs, seeds = result["epochs"], len(result.get("seeds", [0]))
    print(
        f"vit ({'quick, ' if result['quick'] else ''}{epochs} epoch{'' if epochs == 1 else 's'} from the float start, "
        f"{seeds} seed{'' if seeds == 1 else 's'}, {result['train_samples']} training images, "
        f"{load_text(result['load_average'])}):"
    )
    if result.get("float_stage"):
        print(f"  float start: test accuracy {100 * result['float_stage']['test_accuracy']:.2f} %")
    accuracy = result["summary"].get("accuracy", {})
    for side, f in result["sides"].items():
        if "pending" in f:
            print(f"  {side:11s} PENDING: {f['pending']}")
            continue
        spread = accuracy.get(side)
        text = f"  {side:11s} test accuracy {100 * deployed_accuracy(f):.2f} %"
        if spread and len(spread["values"]) > 1:
            text += f" (seeds: {', '.join(f'{100 * v:.2f}' for v in spread['values'])})"
        if "median_step_s" in f:
            text += f", step {1000 * f['median_step_s']:.1f} ms"
        print(text + f"  [{f.get('recipe', '')}]")
        for t in f.get("flatbuffers", []):
            print(f"      {t['converter']}: {_flatbuffer_line(t)}")
    for key, value in result["summary"].items():
        if key != "accuracy":
            print(f"  {key}: {value}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = _parse(argv)
    spec = ROWS[args.name]
    from ._fashion import FashionDataError, load

    try:
        data = load(args.data)
    except FashionDataError as error:
        _fail(str(error))
    if args.quick:
        data = type(data)(
            data.x_train[: QUICK["train"]],
            data.y_train[: QUICK["train"]],
            data.x_test[: QUICK["test"]],
            data.y_test[: QUICK["test"]],
            data.source,
        )
    if args.train is not None:
        data = type(data)(data.x_train[: args.train], data.y_train[: args.train], data.x_test, data.y_test, data.source)
    epochs = args.epochs or (QUICK["epochs"] if args.quick else spec["epochs"])
    seeds = args.seeds or (1 if args.quick else spec.get("seeds", 1))
    chosen = spec["sides"] if args.sides is None else args.sides.split(",")
    quick_sides = spec.get("quick_sides", [side for side in spec["sides"] if side != "float"])
    sides = {
        side: option
        for side, option in spec["sides"].items()
        if (option is None or getattr(args, option)) and side in chosen and not (args.quick and side not in quick_sides)
    }
    derived = spec.get("derived", {})  # side -> the side whose process makes it
    owners = {derived[side] for side in sides if side in derived}
    processes = {side: option for side, option in spec["sides"].items() if side in owners or side in sides}
    processes = {side: option for side, option in processes.items() if side not in derived}
    skipped = {
        side: "--sides"
        if side not in chosen
        else "--quick"
        if args.quick and option is None
        else f"no --{str(option).replace('_', '-')}"
        for side, option in spec["sides"].items()
        if side not in sides
    }

    import tensorflow as tf

    from ._timing import LoadSampler, load_average
    from .qat import _lockstep

    started = datetime.datetime.now(datetime.UTC)
    load_before = load_average()
    with tempfile.TemporaryDirectory() as directory, LoadSampler(10.0) as sampler:
        path = str(Path(directory) / "data.npz")
        float_stage = None
        if "float_epochs" in spec:
            float_epochs = args.float_epochs or (QUICK["float_epochs"] if args.quick else spec["float_epochs"])
            sys.path.insert(0, str(WORKER.parent))
            try:
                size = spec.get("quick_network") if args.quick else None  # the ViT's size in --quick
                float_stage = _float_stage(data, {**spec, "row": args.name, "size": size}, float_epochs, path)
            finally:
                sys.path.remove(str(WORKER.parent))
        else:
            import numpy as np

            np.savez(path, x_train=data.x_train, y_train=data.y_train, x_test=data.x_test, y_test=data.y_test)
        runs = []
        for seed in range(SEED, SEED + seeds):  # one lockstep run per seed, every side from the same float start
            commands = {}
            for side, option in processes.items():
                config = {
                    "row": args.name,
                    "side": side,
                    "data": path,
                    "epochs": epochs,
                    "seed": seed,
                    "learning_rate": spec["learning_rate"],
                    "lockstep": True,
                    "steps_per_epoch": -(-len(data.y_train) // 128),
                    "derived": [name for name in sides if derived.get(name) == side],
                }
                if args.quick and "quick_network" in spec:
                    config["size"] = spec["quick_network"]
                env = environment({**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
                if option is None:
                    python = sys.executable
                    env["PYTHONPATH"] = str(ROOT)
                else:
                    python = str(Path(getattr(args, option)) / "bin" / "python")
                    env["PYTHONPATH"], env["TF_USE_LEGACY_KERAS"] = "", "1"
                worker = WORKER.parent / spec["worker"] if "worker" in spec else WORKER
                commands[side] = ([python, str(worker), json.dumps(config)], env)
            runs.append(_gather(_lockstep(commands, epochs, timeout=3600.0), sides, derived))
        results = runs[0]
    import keras

    import ste

    result: dict[str, Any] = {
        "row": args.name,
        "date": started.strftime("%Y-%m-%d"),
        "started_utc": started.isoformat(timespec="seconds"),
        "minutes": round((datetime.datetime.now(datetime.UTC) - started).total_seconds() / 60, 1),
        "cpu": _cpu(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "ste": ste.__version__,
        "command": _command_line(args),
        "quick": args.quick,
        "epochs": epochs,
        "batch": 128,
        "learning_rate": spec["learning_rate"],
        "float_learning_rate": spec.get("float_learning_rate"),
        "seed": SEED,
        "data": data.source if not data.source.startswith("/") else "Fashion-MNIST IDX files",
        "train_samples": len(data.y_train),
        "test_samples": len(data.y_test),
        "load_average": {"before": load_before, "during": sampler.summary(), "after": load_average()},
        "float_stage": float_stage,
        "sides": results,
        "skipped_sides": skipped,
    }
    if seeds > 1:
        result["seeds"] = list(range(SEED, SEED + seeds))
        result["more_seeds"] = runs[1:]  # "sides" holds the first seed's run
    result["summary"] = _summary(args.name, spec, results, float_stage)
    if args.name == "vit":
        result["summary"].update(_vit_summary(runs))
    out = Path(args.out) if args.out else OUT / ("quick" if args.quick else "")
    plotted = save(result, out)
    (_print_vit if args.name == "vit" else _print_row)(result)
    print(f"  results: {out / args.name}.json; plot {plotted}")
    if args.quick:
        print(f"  {QUICK_NOTE}")
    return result


if __name__ == "__main__":
    main()
