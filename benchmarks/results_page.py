"""docs/results.md and the README's result lines, generated from ``benchmarks/results/accuracy/*.json`` only.

    python -m benchmarks.results_page            # rewrite docs/results.md, the README lines, and the charts (drawn
                                                 # from the JSON into docs/img/results/ and benchmarks/results/)
    python -m benchmarks.results_page --check    # exit 1 if either file differs from what the JSON gives

The README's lines sit between ``<!-- results:start -->`` and ``<!-- results:end -->``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

__all__ = ["main", "page", "readme_lines", "results"]

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "accuracy"
PAGE = ROOT / "docs" / "results.md"
IMAGES = ROOT / "docs" / "img" / "results"
README = ROOT / "README.md"
START, END = "<!-- results:start -->", "<!-- results:end -->"
ORDER = ("binary_cnn", "int8_qat", "low_bit", "pruning", "clustering")
COMPRESSION = ("pruning", "clustering")
TITLES = {
    "binary_cnn": "Binarized CNN: ste against larq 0.14 and float Keras 3",
    "int8_qat": "Int8 quantization-aware training: ste against TFMOT 0.8",
    "low_bit": "Ternary (BitNet b1.58) and binary schemes through quantize_model",
    "pruning": "Pruning (50 %, 80 %, 2:4): ste.sparsity against TFMOT 0.8",
    "clustering": "Weight clustering (16 and 32 clusters): ste.clustering against TFMOT 0.8",
}
SPIKING = ("spiking_mlp", "spiking_cnn")
ORDER += (*SPIKING, "vit")
TITLES["vit"] = "A KerasHub ViT: Keras's post-training quantization against ste's QAT, and 2:4 pruning"
TITLES.update(
    {
        "spiking_mlp": "Spiking MLP (snnTorch's tutorial 5): ste against snnTorch",
        "spiking_cnn": "Spiking CNN (snnTorch's tutorial 6): ste against snnTorch",
    }
)
FASHION = "https://github.com/zalandoresearch/fashion-mnist#benchmark"
ANCHORS = f"""\
## Published anchors

| model | Fashion-MNIST test accuracy | source |
|---|---|---|
| 2-conv CNNs without augmentation (pooling; some with batch norm) | 0.876–0.934 | [Fashion-MNIST README]({FASHION}) |
| 2-conv CNNs with augmentation (flips, translation, rotation) | 0.919–0.939 | [Fashion-MNIST README]({FASHION}) |
| MobileNet (with augmentation) | 0.950 | [Fashion-MNIST README]({FASHION}) |
| ResNet18 (with augmentation) | 0.949 | [Fashion-MNIST README]({FASHION}) |
| WRN40-4 (with augmentation) | 0.967 | [Fashion-MNIST README]({FASHION}) |

The README's table collects submitted results, which its maintainers say they have not verified; ste's rows train
without augmentation.

The peers publish no Fashion-MNIST figure for these networks. Their own published norms, which the goals below
follow:

- TFMOT, int8 quantization-aware training on ImageNet (float → int8): MobileNetV1 71.03 → 71.06 %, ResNet-50 76.3 →
  76.1 %, MobileNetV2 70.77 → 70.01 %
  ([TFMOT, "Quantization aware training"](https://www.tensorflow.org/model_optimization/guide/quantization/training)).
- larq's "BinaryNet on MNIST" example, the layout of `binary_cnn`, reaches "approximately 98 %" on MNIST digits (an
  easier set than Fashion-MNIST) ([larq, "Introduction to BNNs with Larq"](https://docs.larq.dev/larq/tutorials/mnist/)).
"""


FUSED_LINK = "spiking.md#fused-layers-spikingdense-spikingconv2d-and-fused"
# Each row's network as benchmarks/_accuracy_worker.py and benchmarks/sparsity.py build it; the parameter count is the
# JSON's (Keras's count_params(), batch-norm statistics included), which tests/benchmarks/test_accuracy.py checks
# against the built networks
SMALL_CNN = (
    "Conv2D 32 3×3 → batch norm → ReLU → max-pool → DepthwiseConv2D 3×3 → batch norm → ReLU → Conv2D 64 1×1 → "
    "batch norm → ReLU → max-pool → Dense 10 (`small_cnn`, a MobileNet-style separable block)"
)
SPARSITY_CNN = (
    "Conv2D 16 3×3 → ReLU → max-pool → Conv2D 32 3×3 → ReLU → max-pool → Dense 128 → ReLU → Dense 10 "
    "(`benchmarks.sparsity.cnn`)"
)
NETWORKS = {
    "binary_cnn": (
        'larq\'s "BinaryNet on MNIST" layout: a float stem (Conv2D 32 3×3 → batch norm → max-pool), two binary '
        "blocks (QuantConv2D 64 3×3 with the sign of its input and of its kernel and a weight clip → max-pool → batch "
        "norm) and a float Dense 10 head. **Float:** the first convolution, the batch norms and the head; **binary:** "
        "the two 3×3 convolutions of the blocks. The float side has `Conv2D` in the blocks"
    ),
    "int8_qat": (
        f"{SMALL_CNN}. **int8:** every convolution and the Dense layer (weights and activations), batch norm folded "
        "into the convolutions, as TFMOT's default scheme does"
    ),
    "low_bit": (
        f"{SMALL_CNN}. **Ternary or binary:** the 1×1 convolution's kernel only; **8 bits:** the first convolution "
        "and the Dense head (`keep_ends=True`) and the depthwise convolution"
    ),
    "pruning": (
        f"{SPARSITY_CNN}. **Pruned:** conv2, fc1 and fc2 (TFMOT's per-layer route, `prune_low_magnitude` on each); "
        "**dense:** the first convolution. 50 % and 80 % follow PolynomialDecay from 0 over the first 60 % of the "
        "steps; 2:4 is ConstantSparsity(0.5) with `sparsity_m_by_n=(2, 4)`"
    ),
    "clustering": (
        f"{SPARSITY_CNN}. **Clustered:** every kernel (`cluster_weights` on the whole model, k-means++ centroids); "
        "biases stay float"
    ),
}
#: the spiking rows: their layers come from the JSON (the side's ``network``), then this
SPIKING_NETWORK = (
    "**Float:** every weight and bias (float32; no layer is quantized); the LIF layers turn membrane potentials into "
    "0/1 spikes, and their β and ϑ are not trained"
)
VIT_NETWORK = (
    "KerasHub's `ViTBackbone`: 7 × 7 patches of 4 × 4 pixels and a class token (50 tokens), 4 encoder blocks of 4 "
    "attention heads, 64 channels, an MLP of 128. What each side changes: `ste_int8` makes every Dense and "
    "EinsumDense (the attention projections), the patch-embedding convolution and the attention matmuls int8, "
    "weights and activations; `ste_int4` gives the Dense and EinsumDense weights 4 bits, activations float; "
    "`ste_ternary` makes the 24 attention projections and MLP layers ternary and keeps the patch embedding and the "
    "head at 8 bits; `ste_2_4` prunes the 25 Dense and EinsumDense kernels 2:4; Keras's `model.quantize` sides "
    "quantize the Dense and EinsumDense weights (int8 also each Dense's input, per token). **Float in every side:** "
    "the layer normalizations, the softmax, the position embedding and the class token"
)


def _learning_rates(r: dict[str, Any]) -> tuple[float | None, float | None]:
    """The fine-tuning and float start's learning rates: the JSON's, else the row's settings (older results)."""
    from .accuracy import ROWS

    spec = ROWS.get(r["row"], {})
    rate = r.get("learning_rate") or spec.get("learning_rate")
    return rate, r.get("float_learning_rate") or spec.get("float_learning_rate")


def _network(r: dict[str, Any]) -> str:
    """The row's **Network.** paragraph: the layers, what stays float, and the float model's parameter count."""
    row, sides = r["row"], r["sides"]
    first = sides.get("float") or next(iter(sides.values()))
    count = (r.get("float_stage") or {}).get("parameters") or first.get("parameters")
    if row in NETWORKS:
        text = NETWORKS[row]
    elif row in SPIKING:
        text = f"{first['network']}. {SPIKING_NETWORK}"
    elif row == "vit":
        text = f"{first['network']}: {VIT_NETWORK}"
    else:
        return ""
    return f"**Network.** {text}. {count:,} parameters (the float model's `count_params()`)."


def _network_and_budget(r: dict[str, Any]) -> list[str]:
    """What the network is (layers, what stays float, parameters) and what each row trained, saying where rows are
    not on equal terms."""
    row = r["row"]
    rate, float_rate = _learning_rates(r)
    stage = r.get("float_stage")
    lines = [_network(r)] if _network(r) else []
    adam = f"Adam ({rate:g})" if rate else "Adam"
    if not stage:
        lines.append(
            f"**Budget.** Every side trains {_epochs(r['epochs'])} from the same initial weights with {adam}, batch "
            f"{r['batch']}, seed {r['seed']}: the rows are on equal terms."
        )
        return [line + "\n" for line in lines]
    start = len(stage["curve"])
    what = {"int8_qat": "QAT", "low_bit": "QAT", "pruning": "pruning", "clustering": "clustering"}.get(row, "tuning")
    lines.append(
        f"**Budget.** The float start trains {_epochs(start)} with Adam ({float_rate:g}); every side then trains "
        f"{_epochs(r['epochs'], what + ' ')} from those weights with {adam}, batch {r['batch']}, seed {r['seed']}. The "
        f"sides are on equal terms with each other; **the float start is not**: it trained {_epochs(start)}, the "
        f"sides {start + r['epochs']} in all, so a side above the float start may owe its gain to the "
        f"{_epochs(r['epochs'], 'extra ')}, not to {'quantization' if what == 'QAT' else what}."
    )
    return [line + "\n" for line in lines]


def results(folder: Path = RESULTS) -> dict[str, dict[str, Any]]:
    """The full (not ``--quick``) results, by row name."""
    found = {}
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        if not data.get("quick"):
            found[data["row"]] = data
    return found


def _epochs(n: int, what: str = "") -> str:
    return f"{n} {what}{'epoch' if n == 1 else 'epochs'}"


def _pct(value: float) -> str:
    return f"{100 * value:.2f} %"


def _provenance(r: dict[str, Any]) -> str:
    load = r["load_average"].get("during") or {}
    during = (
        f"load average {load['min']:.2f}–{load['max']:.2f} (median {load['median']:.2f})"
        if load
        else "load not recorded"
    )
    epochs = _epochs(r["epochs"])
    if r.get("float_stage"):
        tuned = "fine-tuning " if r["row"] in COMPRESSION or r["row"] == "vit" else "QAT "
        epochs = f"{_epochs(len(r['float_stage']['curve']), 'float ')}, then {_epochs(r['epochs'], tuned)}"
    if len(r.get("seeds", [])) > 1:
        epochs += f" (each of the seeds {', '.join(map(str, r['seeds']))})"
    return (
        f"Measured {r['date']} on {r['cpu']}, TensorFlow {r['tensorflow']}, Keras {r['keras']}, ste {r['ste']}; "
        f"{epochs}, batch {r['batch']}, seed {r['seed']}, {r['train_samples']} training and "
        f"{r['test_samples']} test images; {r['minutes']} min in all, {during}. Command: `{r['command']}`."
    )


def _size(t: dict[str, Any], key: str) -> str:
    return f"{t[key]:,} B" if key in t else "refused"


def table(head: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table: the header, the rule, one line per row (short rows are padded with empty cells)."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cells in rows:
        cells = [*cells, *[""] * (len(head) - len(cells))]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _versions(r: dict[str, Any]) -> list[str]:
    """The versions of every side, one phrase per distinct set of versions (a line under the tables)."""
    by_versions: dict[str, list[str]] = {}
    for side, f in r["sides"].items():
        if f.get("versions"):
            by_versions.setdefault(f["versions"], []).append(side)
    if not by_versions:
        return []
    parts = [f"{', '.join(sides)}: {versions}" for versions, sides in by_versions.items()]
    return ["Versions: " + "; ".join(parts) + ".", ""]


def _skipped_rows(r: dict[str, Any]) -> list[list[str]]:
    return [[side, f"not run ({why})"] for side, why in r.get("skipped_sides", {}).items()]


def _compression_table(r: dict[str, Any]) -> list[str]:
    """Two tables: each side's accuracy and what its stripped kernels and TFLite files hold; then its training step
    (step time, CPU time, allocator peak). The versions go under them."""
    held = "zeros in the pruned kernels" if r["row"] == "pruning" else "distinct values per kernel (most)"
    stage = r["float_stage"]
    dense = stage.get("tflite", {})

    def sizes(t: dict[str, Any]) -> list[str]:
        return [_size(t, key) for key in ("float", "float_gz", "int8_gz", "sparse_gz")]

    rows = [["dense float start", _pct(stage["test_accuracy"]), ""]]
    size_rows = [["dense float start", *sizes(dense)]]
    for side, f in r["sides"].items():
        value = f"{f['zeros']:.3f}" if "zeros" in f else str(f.get("distinct_values", ""))
        rows.append(
            [
                side,
                _pct(f["stripped_accuracy"]),
                value,
                f"{1000 * f['median_step_s']:.1f} ms",
                f"{1000 * f['cpu_per_step_s']:.1f} ms",
                f"{f['peak_bytes'] / 2**20:.1f} MiB",
            ]
        )
        size_rows.append([side, *sizes(f["tflite"])])
    rows += _skipped_rows(r)
    head = ["side", "test accuracy (stripped)", held, "median step", "CPU per step", "allocator peak"]
    sizes_head = ["side", "float .tflite", "gzip", "int8 .tflite, gzip", "sparse .tflite, gzip"]
    note = (
        "Sizes of the stripped model's TFLite files: float, int8 weights (`ste.to_tflite`; TFMOT's side "
        "`Optimize.DEFAULT`) and sparse (`optimizations=[tf.lite.Optimize.EXPERIMENTAL_SPARSITY]`)."
    )
    return [*table(head, rows), "", note, "", *table(sizes_head, size_rows)]


def _accuracy_cell(r: dict[str, Any], side: str, f: dict[str, Any]) -> str:
    """A side's deployed accuracy in Keras: the median over the seeds and their range where there are several."""
    spread = r["summary"].get("accuracy", {}).get(side)
    if spread and len(spread["values"]) > 1:
        return f"{_pct(spread['median'])} ({_pct(spread['min'])}–{_pct(spread['max'])})"
    return _pct(f.get("stripped_accuracy", f.get("test_accuracy", 0.0)))


#: a short name for each TFLite converter call of the ViT row (the table's column); the calls are listed under it
CONVERTERS = (
    ('model.export(path, format="litert")', "Keras LiteRT export"),
    ("model.export(path) + TFLiteConverter.from_saved_model, target_spec.supported_ops", "TF ops (Flex delegate)"),
    ("ste.to_tflite(model)", "ste.to_tflite"),
    ("model.export(path) + TFLiteConverter.from_saved_model, optimizations=[] (float)", "SavedModel, float"),
    ("the same, optimizations=[EXPERIMENTAL_SPARSITY]", "SavedModel, sparse"),
    ("the same, optimizations=[DEFAULT]", "SavedModel, int8 weights"),
)


def _converter_label(converter: str) -> str:
    return next((label for call, label in CONVERTERS if converter.startswith(call)), converter)


def _vit_converter_call(converter: str) -> str:
    """A converter's call as the list under the table gives it ("the same" spelled out)."""
    if converter.startswith("the same, "):
        return "model.export(path) + TFLiteConverter.from_saved_model, " + converter[len("the same, ") :]
    return converter


def _vit_table(r: dict[str, Any]) -> list[str]:
    """One line per flatbuffer of each side (the side's first line carries its accuracy), with short cells: what each
    side is, each converter's call, and each refusal or error are in lists under the table."""
    seeds = len(r.get("seeds", [0]))
    what = f"median of {seeds} seeds (range)" if seeds > 1 else "seed 0"
    head = ["side", f"Keras test accuracy, {what}", "TFLite converter", ".tflite bytes", "gzip bytes"]
    head.append("TFLite test accuracy, seed 0")
    rows: list[list[str]] = []
    recipes = []
    calls: dict[str, str] = {}
    errors = []
    stage = r.get("float_stage")
    if stage:
        rows.append(["float start", _pct(stage["test_accuracy"])])
        recipes.append("- **float start**: trained first; the start of every side.")
    for side, f in r["sides"].items():
        name = f"`{side}`"
        recipe = f.get("recipe", "")
        recipes.append(f"- {name}: " + (f"`{recipe}`." if re.match(r"[\w.]+\(", recipe) else f"{recipe}."))
        if "pending" in f and "curve" not in f:
            rows.append([name, "pending (below)"])
            errors.append(f"- {name} is pending: {f['pending']}")
            continue
        first = [name, _accuracy_cell(r, side, f)]
        if "pending" in f:
            rows.append([*first, "pending (below)"])
            errors.append(f"- {name} is pending: {f['pending']}")
            continue
        for index, t in enumerate(f.get("flatbuffers", [])):
            head_cells = first if index == 0 else ["", ""]
            label = _converter_label(t["converter"])
            calls.setdefault(label, _vit_converter_call(t["converter"]))
            if "refused" in t:
                rows.append([*head_cells, label, "refused (below)"])
                errors.append(f"- {name}, {label}: the converter refused the model: {t['refused']}")
                continue
            if "tflite_accuracy" in t:
                accuracy = _pct(t["tflite_accuracy"])
            else:
                accuracy = "not run (below)"
                errors.append(f"- {name}, {label}: the TFLite interpreter did not run it: {t.get('interpreter', '')}")
            rows.append([*head_cells, label, f"{t['bytes']:,}", f"{t['gzip_bytes']:,}", accuracy])
    rows += _skipped_rows(r)
    out = [*table(head, rows), "", "**Sides.**", "", *recipes, "", "**TFLite converters.**", ""]
    out += [f"- {label}: `{call}`" for label, call in calls.items()]
    if errors:
        out += ["", "**Refused or not run.**", "", *errors]
    return out


def _int8_ops(t: dict[str, Any]) -> str:
    ops = t.get("kernel_ops", {})
    return ", ".join(f"{name} {ops[name][0]} of {ops[name][1]}" for name in sorted(ops))


def _op_types(t: dict[str, Any]) -> str:
    """The flatbuffer's matrix-product ops by (input × weight) type, e.g. ``FULLY_CONNECTED 25 INT8 x INT8``."""
    ops = t.get("kernel_op_types", {})
    return "; ".join(
        f"{name} " + ", ".join(f"{count} {pair}" for pair, count in sorted(ops[name].items())) for name in sorted(ops)
    )


def _constants(by_type: dict[str, int]) -> str:
    """A flatbuffer's constant bytes by type as text: ``FLOAT32 4,612 B, INT8 136,001 B``."""
    return ", ".join(f"{name} {count:,} B" for name, count in by_type.items()) or "none"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _ternary_deployed(f: dict[str, Any], t: dict[str, Any], float_file: dict[str, Any] | None) -> str:
    """What the ternary side's flatbuffer holds, and why: the kernels as float32 constants of three values."""
    float_ops = sum(
        count
        for ops in t.get("kernel_op_types", {}).values()
        for pair, count in ops.items()
        if pair == "FLOAT32 x FLOAT32"
    )
    done, total = t.get("int8_constants_ternary", [0, 0])
    text = (
        "**What `ste_ternary` deploys: float32 kernels that hold three values.** The TFLite converter makes a kernel "
        "int8 only where a fake-quant op gives its range, and TFLite has no 2-bit type; the ternary rule "
        "(sign(W)·γ) is plain arithmetic, so `ste.to_tflite` folds each ternary kernel into a float32 constant of its "
        f"three values −γ, 0 and γ ({_count(float_ops, 'matrix product')} FLOAT32 x FLOAT32 above; int8 constants "
        f"with at most 3 values: {done} of {total}). The accuracy in the table is that of these ternary weights, and "
        "on a device the products run in float32: the saving is in storage after compression"
    )
    if float_file:
        text += (
            f" (gzip {t['gzip_bytes']:,} B, {t['gzip_bytes'] / float_file['gzip_bytes']:.2f}× the float side's "
            f"{float_file['gzip_bytes']:,} B; uncompressed {t['bytes'] / float_file['bytes']:.2f}×)"
        )
    text += ", not in compute."
    if "ternary_kernels" in f:
        ternary, listed = f["ternary_kernels"]
        text += (
            f" `ste.export_quantized_weights(model, packed=True)`, which packs a ternary kernel in 2 bits per weight, "
            f"lists {_count(listed, 'kernel')} of this model ({ternary} ternary): it does not reach the backbone's "
            "layers, which `quantize_model` quantizes in place."
        )
    return text


def _vit_verdict(r: dict[str, Any]) -> list[str]:
    from .accuracy import ROWS  # the row's settings, for results written before the JSON recorded them

    s, sides = r["summary"], r["sides"]
    rates = {key: r.get(key, ROWS["vit"][key]) for key in ("learning_rate", "float_learning_rate")}
    stage = r.get("float_stage") or {}
    lines = [
        f"**Budget.** The float start trained {_epochs(len(stage.get('curve', [])))} with Adam "
        f"({rates['float_learning_rate']:g}); then every side, from those weights, {_epochs(r['epochs'])} with Adam "
        f"({rates['learning_rate']:g}), batch {r['batch']}, the same seed per run; Keras's post-training sides "
        "quantize the float side's fine-tuned model, so they had the same training. Accuracy is the deployed model's "
        "in Keras (the stripped model for 2:4); the flatbuffers' own is in the last column."
    ]
    for bits in ("int8", "int4"):
        gap = s.get(f"{bits}_qat_minus_ptq_points")
        if gap is None:
            why = sides.get(f"ste_{bits}", {}).get("pending") or sides.get(f"keras_{bits}", {}).get("pending")
            lines.append(
                f"{bits}: ste's QAT against Keras's post-training quantization not measured: {str(why).rstrip('.')}."
            )
            continue
        values = ", ".join(f"{v:+.2f}" for v in gap["values"])
        if gap["median"] > 0:
            verdict = f"is **above** it by {gap['median']:.2f} points"
        elif gap["median"] == 0:
            verdict = "matches it"
        else:
            verdict = f"**is below it** by {-gap['median']:.2f} points"
        if len(gap["values"]) == 1:
            lines.append(
                f"{bits}: ste's QAT minus Keras's post-training quantization: {gap['median']:+.2f} points, one seed "
                f"(the spread between seeds is not measured: `--seeds 2` or more): at equal bits ste's QAT {verdict}."
            )
            continue
        if gap["min"] < 0 <= gap["max"]:
            verdict += ", within the seeds' spread (the sign differs between seeds)"
        else:
            verdict += " in every seed"
        lines.append(
            f"{bits}: ste's QAT minus Keras's post-training quantization: {gap['median']:+.2f} points (median; per "
            f"seed {values}; range {gap['min']:+.2f} to {gap['max']:+.2f}): at equal bits ste's QAT {verdict}."
        )
    float_file = next((t for t in sides.get("float", {}).get("flatbuffers", []) if "bytes" in t), None)
    for side in ("ste_int8", "ste_int4", "ste_ternary"):
        f = sides.get(side, {})
        t = next((t for t in f.get("flatbuffers", []) if "kernel_ops" in t), None)
        if t:
            ops = (
                f"matrix-product ops by input × weight type: {_op_types(t)}"
                if "kernel_op_types" in t
                else f"ops with int8 inputs and weights: {_int8_ops(t)}"
            )
            text = f"`{side}`'s flatbuffer: {ops}; constants {_constants(t.get('constant_bytes', {}))}"
            if float_file:
                text += f"; the file is {t['bytes'] / float_file['bytes']:.2f}× the float side's"
            lines.append(text + ".")
            if side == "ste_ternary":
                lines.append(_ternary_deployed(f, t, float_file))
    for side in ("keras_int8", "keras_int4"):
        for t in sides.get(side, {}).get("flatbuffers", []):
            if "constant_bytes" in t and "refused" not in t:
                text = f"`{side}`, {_converter_label(t['converter'])}: constants {_constants(t['constant_bytes'])}"
                if float_file and "constant_bytes" in float_file:
                    text += f" (the float side's: {_constants(float_file['constant_bytes'])})"
                lines.append(text + ".")
    if "ste_2_4" in sides and "kernel_zeros" in sides["ste_2_4"]:
        f = sides["ste_2_4"]
        zeros = f["kernel_zeros"]
        attention = [z for path, z in zeros.items() if "/mha/" in path]
        text = (
            f"`ste_2_4`: fraction of zeros after stripping, in all {len(zeros)} Dense and EinsumDense kernels "
            f"{f['zeros']:.3f}; in the {len(zeros) - len(attention)} MLP and head kernels "
            f"{min(z for p, z in zeros.items() if '/mha/' not in p):.3f} at least"
        )
        if attention and f.get("attention_left_dense"):
            text += f", in the {len(attention)} attention projections {max(attention):.3f} at most"
        elif attention:
            text += (
                f", in the {len(attention)} attention projections (2 of every 4 along the contracted axis) "
                f"{min(attention):.3f} at least"
            )
        if f.get("attention_left_dense"):
            text += f". The attention projections stay dense: {f['attention_left_dense'].rstrip('.')}"
        lines.append(text + ".")
    return lines


def _setting_label(row: str, setting: str) -> str:
    if row == "clustering":
        return f"{setting} clusters"
    return setting.replace("_", ":") if "_" in setting else f"{setting} %"


def _compression_verdict(r: dict[str, Any]) -> list[str]:
    s = r["summary"]
    lines = []
    for side in r["sides"]:
        library, setting = side.split("_", 1)
        if library != "ste" or f"{setting}_accuracy_gap_points" not in s:
            continue
        label = _setting_label(r["row"], setting)
        gap, step = s[f"{setting}_accuracy_gap_points"], s[f"{setting}_step_time_ratio"]
        lines.append(
            f"{label}: ste {gap:+.2f} points against TFMOT (goal at least −0.3: "
            f"{'met' if gap >= -0.3 else 'NOT met'}); "
            f"gzipped float TFLite ste ÷ TFMOT {s[f'{setting}_gzip_ratio']:.2f}, ste ÷ dense "
            f"{s.get(f'{side}_gzip_vs_dense', float('nan')):.2f}; step time ste ÷ TFMOT {step:.2f} (CPU time per "
            f"step {s[f'{setting}_cpu_per_step_ratio']:.2f}), allocator peak {s[f'{setting}_peak_memory_ratio']:.2f}."
        )
        if step > 1.05:
            lines.append(
                f"**ste's {label} step was slower than TFMOT's here** (×{step:.2f}); "
                + _cpu_clause(s[f"{setting}_cpu_per_step_ratio"])
                + "; the run points to no cause specific to ste."
            )
    return lines


def _side_table(r: dict[str, Any]) -> list[str]:
    """The row's table (the compression and ViT rows have their own); versions go on a line under it."""
    if r["row"] in COMPRESSION:
        return _compression_table(r)
    if r["row"] == "vit":
        return _vit_table(r)
    row = r["row"]
    head = ["side", "test accuracy", "median step", "allocator peak"]
    if row == "int8_qat":
        head = ["side", "Keras QAT accuracy", "int8 TFLite accuracy", "same predictions", ".tflite bytes"]
        head += ["median step", "allocator peak"]
    if row == "low_bit":
        head += ["packed weights", "float32 weights"]
    if row in SPIKING:
        head = ["side", "test accuracy", "median step", "peak requested in a step", "untrained: loss"]
        head.append("untrained: output spikes")
    rows = []
    if r.get("float_stage"):
        rows.append(["float start", _pct(r["float_stage"]["test_accuracy"])])
    for side, f in r["sides"].items():
        step, peak = f"{1000 * f['median_step_s']:.1f} ms", f"{f['peak_bytes'] / 2**20:.1f} MiB"
        cells = [side, _pct(f["test_accuracy"]), step, peak]
        if row == "int8_qat":
            cells = [side, _pct(f["test_accuracy"]), _pct(f["int8_accuracy"]), _pct(f["keras_tflite_agreement"])]
            cells += [f"{f['tflite_bytes']:,}", step, peak]
        if row == "low_bit":
            cells += [f"{f['packed_bytes']:,} B", f"{f['float32_bytes']:,} B"]
        if row in SPIKING:
            cells += [f"{f['initial']['loss']:.6f}", f"{f['initial']['output_spikes']:,}"]
        rows.append(cells)
    return table(head, rows + _skipped_rows(r))


def _float_start(r: dict[str, Any]) -> str:
    """Why int8 beats float, from the float start's own curve in the JSON (not assumed) and the peer's int8 figure."""
    curve = [p["test_accuracy"] for p in r["float_stage"]["curve"]]
    best = max(range(len(curve)), key=curve.__getitem__)
    if best == len(curve) - 1:
        shape = f"its test accuracy was still rising after its {_epochs(len(curve))}"
    else:
        shape = (
            f"its test accuracy peaked at {_pct(curve[best])} after epoch {best + 1} of {len(curve)} and ended at "
            f"{_pct(curve[-1])}"
        )
    text = (
        "The goal assumes a converged float start, as in TFMOT's published figures; this one is not: "
        f"{shape}, and the QAT epochs train on from it."
    )
    tfmot = r["sides"].get("tfmot", {})
    if "int8_accuracy" in tfmot:
        text += (
            f" TFMOT's int8 model, from the same start, gains alike ({_pct(tfmot['int8_accuracy'])}), so the gain "
            "comes from that further training, not from ste's quantization."
        )
    return text


def _cpu_ratio(ste_side: dict[str, Any], peer: dict[str, Any]) -> float | None:
    """ste's CPU time per step over the peer's (``cpu_per_step_s`` of both sides), None where one is not recorded."""
    if "cpu_per_step_s" not in ste_side or "cpu_per_step_s" not in peer:
        return None
    return float(ste_side["cpu_per_step_s"] / peer["cpu_per_step_s"])


def _cpu_clause(cpu: float | None) -> str:
    """Whether a slower wall time came with more CPU time per step (``cpu``: ste's over the peer's)."""
    if cpu is None:
        return "its CPU time per step was not recorded"
    if cpu <= 1.02:
        return (
            f"its CPU time per step was {'not higher' if cpu <= 1.0 else 'about the same'} (×{cpu:.2f}), so the "
            "extra wall time is time its process spent waiting on a loaded machine (load average below)"
        )
    return f"its CPU time per step was higher too (×{cpu:.2f})"


def _binary_step(sides: dict[str, Any], ratio: float) -> str:
    """Why the binarized step is slower than larq's, from the float Keras 3 side of the same run where it ran."""
    float_side, ste_side, larq = sides.get("float"), sides["ste"], sides["larq"]
    text = f"**ste trained slower than larq here** (step time ×{ratio:.2f}; {_cpu_clause(_cpu_ratio(ste_side, larq))})."
    if float_side and "median_step_s" in float_side:
        keras3 = float_side["median_step_s"] / larq["median_step_s"]
        own = ste_side["median_step_s"] / float_side["median_step_s"]
        text += (
            f" Keras 3's own float network, same layers with `Conv2D` in the blocks, took ×{keras3:.2f} larq's step "
            f"in the same run, and ste's binarized network ×{own:.2f} that float step: "
            + (
                "most of the gap is Keras 3's training step against tf-keras's, not the binarization."
                if keras3 >= own
                else "the binarization itself costs more than Keras 3's own step."
            )
        )
    return (
        text + " The step-by-step comparison on another binarized network, in alternating rounds and with a profile "
        "per op class, is in [Performance](performance.md#binarized-training-against-larq)."
    )


def _verdict(r: dict[str, Any]) -> list[str]:
    s, sides = r["summary"], r["sides"]
    if r["row"] == "vit":
        return _vit_verdict(r)
    lines = _compression_verdict(r) if r["row"] in COMPRESSION else []
    if r["row"] == "binary_cnn" and "larq" in sides:
        lines.append(
            f"ste {_pct(sides['ste']['test_accuracy'])} against larq {_pct(sides['larq']['test_accuracy'])} "
            f"({s['accuracy_gap_points']:+.2f} points; goal: at least larq's minus 0.3 points — "
            f"{'met' if s['goal_met'] else 'NOT met'}). Step time ste ÷ larq {s['step_time_ratio']:.2f}, allocator "
            f"peak ste ÷ larq {s['peak_memory_ratio']:.2f}"
            + (" (side by side, epochs alternating)." if r["epochs"] > 1 else ".")
        )
        if "float" in sides:
            lines.append(f"Float Keras 3, same network: {_pct(sides['float']['test_accuracy'])}.")
        if s["step_time_ratio"] > 1.05:
            lines.append(_binary_step(sides, s["step_time_ratio"]))
    if r["row"] == "int8_qat":
        ste_side = sides["ste"]
        text = (
            f"ste's int8 TFLite model: {_pct(ste_side['int8_accuracy'])}, "
            f"{s['int8_minus_float_points']:+.2f} points from float (goal within 0.2); "
            f"{_pct(ste_side['keras_tflite_agreement'])} of test predictions equal to the Keras QAT model's "
            f"(goal at least 99 %)"
        )
        if "tfmot" in sides:
            text += (
                f"; TFMOT's int8 model {_pct(sides['tfmot']['int8_accuracy'])}, ste {s['int8_gap_points']:+.2f} "
                f"points (goal at least −0.2). QAT step time ste ÷ TFMOT {s['step_time_ratio']:.2f}, allocator "
                f"peak {s['peak_memory_ratio']:.2f}"
            )
        lines.append(text + f". {'All goals met' if s['goal_met'] else 'Not every goal is met'}.")
        if s["int8_minus_float_points"] > 0.2:
            lines.append(
                f"The int8 model is **better** than the float start by {s['int8_minus_float_points']:.2f} points, so "
                f"the within-0.2-points goal fails upwards. {_float_start(r)}"
            )
        if s.get("step_time_ratio", 0) > 1.05:
            lines.append(
                f"**ste's QAT step was slower than TFMOT's here** (×{s['step_time_ratio']:.2f}); "
                + _cpu_clause(_cpu_ratio(sides["ste"], sides.get("tfmot", {})))
                + "; the run points to no cause specific to ste."
            )

    if r["row"] in SPIKING:
        lines += _spiking_verdict(r)
    if r["epochs"] == 1 and len(sides) > 1:
        lines.append(
            "With one epoch per side the sides cannot alternate: each side's epoch ran in a different stretch of "
            "time, so the step-time and memory ratios of this run carry the machine's load changes (see the load "
            "average below) and are indicative only."
        )
    return lines


NOTES = {
    "low_bit": (
        "**Known cause of the binary scheme's result.** The binary scheme puts a sign on every quantized layer's "
        "input. In this network the inputs of the depthwise, pointwise and dense layers come from ReLUs, so they are "
        "≥ 0 and sign(x) (with sign(0) = +1) is the constant +1: those layers see no information and the network "
        "cannot learn (10 % is chance on 10 balanced classes). A binary network needs inputs centred on zero "
        "(batch norm before the sign, no ReLU), as `binary_cnn` has. The figure stays on this page until the scheme "
        "handles it."
    ),
}


def _spiking_verdict(r: dict[str, Any]) -> list[str]:
    s, sides = r["summary"], r["sides"]
    ste_side = sides["ste"]
    kinds = ", ".join(_in_model_order(ste_side["form"].split(": ", 1)[-1].split(", ")))
    lines = [
        "ste's side is written as docs/spiking.md says: a `keras.Sequential` of "
        "Keras layers and `ste.spiking.LIF`, handed to `ste.spiking.fuse` and trained with `model.fit`. After "
        f"`fuse` its layers are, in order, {kinds}: "
        + (
            "the convolutional part runs unfused (`ste.spiking.TimeDistributed` convolutions and max-pooling, `LIF` "
            "layers over whole sequences), because `ste.spiking.Fused` offers no pooling between convolutions, and "
            "the `Dense` → `LIF` head runs as one `ste.spiking.Fused` loop of `SpikingDense` layers, compiled with "
            "XLA."
            if r["row"] == "spiking_cnn"
            else "every `Dense` → `LIF` pair runs as one `ste.spiking.Fused` loop of `SpikingDense` layers, compiled "
            "with XLA."
        )
    ]
    if "snntorch" not in sides:
        return lines
    peer = sides["snntorch"]
    lines.append(
        f"snnTorch's side is its tutorials' loop over the steps, with {peer.get('threads', '?')} torch threads and "
        f"`OMP_WAIT_POLICY={peer.get('omp_wait_policy', '')}`: torch's OpenMP threads otherwise spin while they "
        "wait, which on the 2 loaded cores of these runs made its steps several times slower."
    )
    lines.append(
        f"ste {_pct(ste_side['test_accuracy'])} against snnTorch {_pct(peer['test_accuracy'])} after "
        f"{_epochs(r['epochs'])} ({s['accuracy_gap_points']:+.2f} points). Step time ste ÷ snnTorch "
        f"{s['step_time_ratio']:.2f}, peak memory of a step ste ÷ snnTorch {s['peak_memory_ratio']:.2f}."
    )
    a, b = ste_side["initial"], peer["initial"]
    gradients = list(zip(a.get("gradient_norms", []), b.get("gradient_norms", [])))
    apart = max((abs(x - y) / max(abs(x), abs(y), 1e-30) for x, y in gradients), default=0.0)
    same = abs(a["loss"] - b["loss"]) < 1e-4 and a["output_spikes"] == b["output_spikes"] and apart < 1e-3
    figures = (
        f"loss {a['loss']:.6f} and {b['loss']:.6f}, output spikes {a['output_spikes']:,} and {b['output_spikes']:,}, "
        f"the norms of the loss's gradient for each of the {len(gradients)} weights and biases at most "
        f"{apart:.1e} apart (relative)"
    )
    lines.append(
        "Both sides start from the same weights (drawn with numpy as torch's default initialization draws them) and "
        "see the same batches in the same order. Before training, on the first test images, the untrained networks "
        + (
            f"agree ({figures}): they compute the same function, forward and backward through the surrogates. From "
            "there on the sides differ only by float rounding (the order of sums), which flips a spike where a "
            "membrane is within rounding of the threshold."
            if same
            else f"differ ({figures})."
        )
    )
    if s["accuracy_gap_points"] < -0.3:
        gaps = ", ".join(
            f"{100 * (p['test_accuracy'] - q['test_accuracy']):+.2f}" for p, q in zip(ste_side["curve"], peer["curve"])
        )
        lines.append(
            f"**ste's accuracy is {-s['accuracy_gap_points']:.2f} points below snnTorch's after the last epoch.** "
            f"ste minus snnTorch after each epoch: {gaps} points. The two compute the same function from the same "
            "start; the runs part where float rounding flips a spike, and a gap of this size changes sign from "
            "epoch to epoch: more epochs (or seeds) are needed to tell the two apart."
        )
    if s["step_time_ratio"] > 1.05:
        text = f"**ste trained slower than snnTorch here** (step time ×{s['step_time_ratio']:.2f})."
        if r["row"] == "spiking_cnn":
            text += (
                " Its convolutional part runs unfused (`TimeDistributed` convolutions and max-pooling, `LIF` layers "
                "over whole sequences) because `ste.spiking.Fused` offers no pooling between convolutions; on a CPU "
                "without TensorFlow's oneDNN (AVX2, as here) the unfused convolutional network was slower than the "
                "fused one in the spiking speed benchmark too ([fused layers]("
                f"{FUSED_LINK})). No cause specific to "
                "this network shows in the run."
            )
        lines.append(text)
    if s["peak_memory_ratio"] > 1.05:
        lines.append(
            f"**ste's training step needs more memory than snnTorch's** (×{s['peak_memory_ratio']:.2f}). "
            + _spiking_memory(r)
        )
    return lines


# the layer kinds of benchmarks/_spiking_accuracy.py's fused networks, in the order the networks use them (the JSON's
# "form" lists them alphabetically)
SPIKING_LAYER_ORDER = ("Flatten", "RepeatVector", "Reshape", "TimeDistributed", "LIF", "Fused")


def _in_model_order(kinds: list[str]) -> list[str]:
    return sorted(kinds, key=lambda kind: SPIKING_LAYER_ORDER.index(kind) if kind in SPIKING_LAYER_ORDER else 99)


def _repeated_input_bytes(r: dict[str, Any]) -> int:
    """The float32 ``[batch, steps, 784]`` input that ste's Keras model makes by repeating the image over the steps."""
    steps = int(r["sides"]["ste"]["network"].split(" steps")[0].rsplit(" ", 1)[1])
    return int(r["batch"] * steps * 784 * 4)


def _spiking_memory(r: dict[str, Any]) -> str:
    """The known cause of ste's larger step, with the repeated input's size from the row's own shapes."""
    steps = int(r["sides"]["ste"]["network"].split(" steps")[0].rsplit(" ", 1)[1])
    repeated = _repeated_input_bytes(r)
    rest = (r["sides"]["ste"]["peak_bytes"] - repeated) / 2**20
    peer = r["sides"]["snntorch"]["peak_bytes"] / 2**20
    text = (
        "Known cause: with direct coding the Keras model repeats the image over the steps (`RepeatVector`), so each "
        f"step makes a `[batch, steps, ...]` float32 input of {r['batch']} × {steps} × 784 × 4 B = "
        f"{repeated / 2**20:.1f} MiB, where snnTorch's loop feeds the same `[batch, ...]` tensor to every step. "
        f"Without it ste's step would request about {rest:.1f} MiB ({'below' if rest < peer else 'still above'} "
        f"snnTorch's {peer:.1f} MiB)."
    )
    if r["row"] == "spiking_cnn":
        text += (
            " Beyond that, the convolutions run as `ste.spiking.TimeDistributed` layers over every step at once, and "
            "a layer-by-layer network keeps, for the whole sequence, the surrogate's input of every hidden neuron, "
            f"the float spikes and the gradient at each layer boundary ([fused layers]({FUSED_LINK})); "
            "`ste.spiking.Fused`, which keeps checkpoints only, offers no pooling between convolutions, so it cannot "
            "run this network."
        )
    return text


def page(found: dict[str, dict[str, Any]]) -> str:
    out = [
        "# Results on Fashion-MNIST",
        "",
        "Accuracy of ste's binarized, int8, low-bit, pruned, clustered and spiking networks and of a small ViT on",
        "Fashion-MNIST (60,000 training and 10,000 test images, 28×28, 10 classes), each beside its peer on the same",
        "network, data, seed, batch and epochs. This",
        "page is generated from `benchmarks/results/accuracy/*.json` by `python -m benchmarks.results_page`; each",
        "row comes from one command, `python -m benchmarks.accuracy NAME` (below each table, with its date, CPU and",
        "TensorFlow version).",
        "",
        "**Smoke test.** `python -m benchmarks.accuracy NAME --quick` runs a row on 512 training images for one",
        "epoch, without the peers (pruning and clustering at one setting, 50 % and 16 clusters), in about a minute:",
        "it checks that the row runs end to end, and its accuracy means nothing. Without matplotlib a run still",
        "writes its JSON and says that the plot was skipped.",
        "",
        "**Data.** `apt-get install dataset-fashion-mnist` (Debian, Ubuntu), Keras's cache",
        "(`keras.datasets.fashion_mnist.load_data()` fills it), or `--data DIR` with the four IDX files.",
        "",
        "**Peers.** Each runs in its own virtual environment (never an ste dependency) and in its own process (the",
        "tf-keras ones with `TF_USE_LEGACY_KERAS=1`, which the benchmark sets), all",
        "sides at once in lockstep: one side trains an epoch and evaluates while the others wait, in an order that",
        "reverses every epoch, so that step times see the same machine load. Step time and memory are reported",
        "only as ratios between sides of one run.",
        "",
        "```bash",
        "python3.11 -m venv LARQ_VENV",
        "LARQ_VENV/bin/pip install tensorflow-cpu==2.21.0 \\",
        "    tf-keras==2.21.0 'larq==0.14.*'",
        "python3.11 -m venv TFMOT_VENV",
        "TFMOT_VENV/bin/pip install tensorflow-cpu==2.21.0 \\",
        "    tf-keras==2.21.0 tensorflow-model-optimization==0.8.1",
        "python3.11 -m venv SNNTORCH_VENV",
        "SNNTORCH_VENV/bin/pip install torch==2.13.0 \\",
        "    --index-url https://download.pytorch.org/whl/cpu",
        "SNNTORCH_VENV/bin/pip install 'snntorch==1.0.*' numpy",
        "pip install keras-hub",
        "",
        "python -m benchmarks.accuracy binary_cnn --larq-venv LARQ_VENV",
        "python -m benchmarks.accuracy int8_qat --tfmot-venv TFMOT_VENV",
        "python -m benchmarks.accuracy low_bit",
        "python -m benchmarks.accuracy spiking_mlp \\",
        "    --snntorch-venv SNNTORCH_VENV",
        "python -m benchmarks.accuracy spiking_cnn \\",
        "    --snntorch-venv SNNTORCH_VENV",
        "python -m benchmarks.accuracy pruning --tfmot-venv TFMOT_VENV",
        "python -m benchmarks.accuracy clustering --tfmot-venv TFMOT_VENV",
        "python -m benchmarks.accuracy vit",
        "```",
        "",
        ANCHORS,
    ]
    for name in ORDER:
        out += [f"## {TITLES[name]}", ""]
        if name not in found:
            out += ["Not measured.", ""]
            continue
        r = found[name]
        out += _network_and_budget(r) if name != "vit" else [_network(r) + "\n"]
        out += [*_side_table(r), "", *_versions(r)]
        out += [line + "\n" for line in _verdict(r)]
        if name == "low_bit":
            for side, f in r["sides"].items():
                kernels = ", ".join(f"{k} {b} bits" for k, b in f.get("kernel_bits", {}).items())
                out += [f"Kernels of the {side} model as stored packed: {kernels}.", ""]
            out += [
                "The schemes keep the first and the last compute layers at 8 bits (`keep_ends=True`) and leave the "
                "depthwise convolution to the int8 scheme, so on this small network only the 1×1 convolution's kernel "
                "is packed; the other kernels are counted as float32 in both columns, which is why the packed size "
                "is close to the float32 size.",
                "",
            ]
        if name == "low_bit" and r["sides"].get("binary", {}).get("test_accuracy", 1.0) < 0.2:
            out += [NOTES[name], ""]
        out += [
            _provenance(r),
            "",
            f"[![{name}: test accuracy per epoch (open the full-size image)](img/results/{name}.png)]"
            f"(img/results/{name}.png)",
            "",
        ]
    return "\n".join(out)


def readme_lines(found: dict[str, dict[str, Any]]) -> list[str]:
    """One line per headline figure."""
    lines = []
    if "binary_cnn" in found:
        r = found["binary_cnn"]
        sides = r["sides"]
        line = (
            f"- Binarized CNN ({_epochs(r['epochs'])} each; float stem and head, two binary convolutions): ste "
            f"{_pct(sides['ste']['test_accuracy'])}"
        )
        if "larq" in sides:
            line += f", larq 0.14 {_pct(sides['larq']['test_accuracy'])}"
        if "float" in sides:
            line += f", float Keras 3 {_pct(sides['float']['test_accuracy'])}"
        if "step_time_ratio" in r["summary"]:
            line += f"; step time ste ÷ larq {r['summary']['step_time_ratio']:.2f}"
            float_side = sides.get("float", {})
            if "larq" in sides and "median_step_s" in float_side:  # as _binary_step tells it on the page
                keras3 = float_side["median_step_s"] / sides["larq"]["median_step_s"]
                if keras3 >= sides["ste"]["median_step_s"] / float_side["median_step_s"]:
                    line += " (most of it Keras 3's training step against tf-keras's, not the binarization)"
        lines.append(line + ".")
    if "int8_qat" in found:
        r = found["int8_qat"]
        sides = r["sides"]
        line = (
            f"- Int8 QAT ({_epochs(r['epochs'], 'QAT ')} after {_epochs(len(r['float_stage']['curve']), 'float ')}; "
            "int8 beats the unconverged float start by training longer, not by quantizing): float "
            f"{_pct(r['float_stage']['test_accuracy'])}, ste int8 TFLite {_pct(sides['ste']['int8_accuracy'])}"
        )
        if "tfmot" in sides:
            line += f", TFMOT 0.8 int8 TFLite {_pct(sides['tfmot']['int8_accuracy'])}"
        lines.append(line + ".")
    if "low_bit" in found:
        r = found["low_bit"]
        parts = [
            f"{side} {_pct(f['test_accuracy'])} ({f['packed_bytes'] / 1024:.1f} KiB packed)"
            for side, f in r["sides"].items()
        ]
        lines.append(
            f"- quantize_model schemes ({_epochs(r['epochs'], 'QAT ')}; only the 1×1 convolution is low-bit): "
            + ", ".join(parts)
            + "."
        )
    for name in COMPRESSION:
        if name in found:
            r = found[name]
            parts = [
                f"{side.split('_')[0]} {_setting_label(name, side.split('_', 1)[1])} {_pct(f['stripped_accuracy'])} "
                f"({f['tflite']['float_gz'] / 1024:.0f} KiB gzipped)"
                for side, f in r["sides"].items()
            ]
            start = len(r["float_stage"]["curve"])
            lines.append(
                f"- {name.capitalize()} ({_epochs(r['epochs'])} after {_epochs(start, 'dense ')}: above the dense "
                f"start's {_pct(r['float_stage']['test_accuracy'])} by training longer): " + ", ".join(parts) + "."
            )
    lines += _spiking_readme(found)
    if "vit" in found:
        r = found["vit"]
        accuracy = r["summary"].get("accuracy", {})
        from .accuracy import VIT_LABELS

        parts = [f"{VIT_LABELS.get(side, side)} {_pct(spread['median'])}" for side, spread in accuracy.items()]
        seeds = len(r.get("seeds", [0]))
        gaps = [
            f"{bits} {gap['median']:+.2f} points"
            + (f" ({gap['min']:+.2f} to {gap['max']:+.2f})" if len(gap["values"]) > 1 else "")
            for bits in ("int8", "int4")
            if (gap := r["summary"].get(f"{bits}_qat_minus_ptq_points"))
        ]
        line = (
            f"- KerasHub ViT ({_epochs(r['epochs'])} from a float start, "
            + (f"median of {seeds} seeds): " if seeds > 1 else "one seed): ")
            + ", ".join(parts)
            + ("; ste's QAT minus Keras's post-training quantization at equal bits: " + ", ".join(gaps) if gaps else "")
        )
        if "ste_ternary" in accuracy:
            line += (
                "; the ternary flatbuffer holds its kernels as float32 constants of three values (TFLite has no "
                "ternary type): smaller gzipped, not faster"
            )
        lines.append(line + ".")
    return lines


def _spiking_readme(found: dict[str, dict[str, Any]]) -> list[str]:
    lines = []
    for name, label in (("spiking_mlp", "Spiking MLP"), ("spiking_cnn", "Spiking CNN")):
        if name not in found:
            continue
        r = found[name]
        sides, summary = r["sides"], r["summary"]
        line = f"- {label} ({_epochs(r['epochs'])}, not converged): ste {_pct(sides['ste']['test_accuracy'])}"
        if "snntorch" in sides:
            line += f", snnTorch {_pct(sides['snntorch']['test_accuracy'])}"
            gaps = [
                p["test_accuracy"] - q["test_accuracy"]
                for p, q in zip(sides["ste"]["curve"], sides["snntorch"]["curve"])
            ]
            if summary["accuracy_gap_points"] < -0.3 and max(gaps) > 0:  # as _spiking_verdict tells it on the page
                line += " (a gap that changes sign from epoch to epoch)"
            line += (
                f"; step time ste ÷ snnTorch {summary['step_time_ratio']:.2f}, memory "
                f"{summary['peak_memory_ratio']:.2f}"
            )
            if summary["peak_memory_ratio"] > 1.05:  # the cause _spiking_memory gives on the page
                rest = r["sides"]["ste"]["peak_bytes"] - _repeated_input_bytes(r)
                line += (
                    " (mostly the Keras model's input repeated over the steps)"
                    if rest < r["sides"]["snntorch"]["peak_bytes"]
                    else " (the unfused convolutions keep every step's activations for the backward pass)"
                )
        lines.append(line + ".")
    return lines


def _readme(text: str, lines: list[str]) -> str:
    if START not in text or END not in text:
        raise SystemExit(f"benchmarks.results_page: README.md lacks the markers {START} and {END}")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return head + START + "\n" + "\n".join(lines) + "\n" + END + tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.results_page", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the files differ from what the JSON gives")
    args = parser.parse_args(argv)
    found = results()
    want_page = page(found)
    want_readme = _readme(README.read_text(), readme_lines(found))
    if args.check:
        stale = [
            str(p.relative_to(ROOT))
            for p, want in ((PAGE, want_page), (README, want_readme))
            if not p.is_file() or p.read_text() != want
        ]
        if stale:
            print(
                f"benchmarks.results_page: {', '.join(stale)} differ from the JSON; run python -m "
                "benchmarks.results_page",
                file=sys.stderr,
            )
            return 1
        return 0
    PAGE.write_text(want_page)
    README.write_text(want_readme)
    IMAGES.mkdir(parents=True, exist_ok=True)
    from .accuracy import plot

    for name, r in found.items():  # the charts drawn again from the JSON: no training
        try:
            plot(r, IMAGES / f"{name}.png")
        except ImportError:
            print("benchmarks.results_page: matplotlib is not installed: the charts were not drawn", file=sys.stderr)
            break
        shutil.copyfile(IMAGES / f"{name}.png", RESULTS / f"{name}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
