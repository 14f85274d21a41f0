"""Turning the JSON results into Markdown tables, with the project's targets checked against them."""

from __future__ import annotations

import math
import statistics
from typing import Any

__all__ = ["markdown", "targets"]

ELEMENTWISE_LIMIT = 1.05
EAGER_LIMITS = {"forward": 1.3, "forward_backward": 1.1}  # eager calls: forward + backward ≤ 1.1×
TRAINING_LIMIT = 1.05
FLIP_RATIO_LIMIT = 1.05
MEMORY_LIMIT = 1.10
BITS_MEMORY_LIMIT = 0.5  # binarized conv net peak, bits kept vs the plain path
BITS_TIME_LIMIT = {"graph": 1.10, "jit": 1.05}
LARQ_GOAL = {"peak": 0.6, "time": 1.0}  # ste's documented binarized step against larq 0.14's
CHAIN_MASK_LIMIT = 0.1
BETWEEN_MASK_LIMIT = 0.25  # with an elementwise op between the quantizers (4.5 against 20.5 input sizes)
SPIKING_LIMIT = 1.05
TFMOT_GOAL = {"time": 1.0, "points": -0.3}  # ste's QAT step and int8 accuracy against TFMOT 0.8's


def _steps(count: int) -> str:
    return "1 step" if count == 1 else f"{count} steps"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.0f}"


def _cell(entry: dict[str, Any], unit: Any) -> str:
    return f"{unit(entry['median_s'])} ({entry['ratio']:.2f}×)"


def _plain_ste(results: dict[str, Any]) -> str:
    """The elementwise variant held to the "costs nothing" target: ste with bit masks off (``ste`` in results
    written before the default op was timed separately)."""
    return "ste_bits_off" if "ste_bits_off" in results else "ste"


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def _load(results: dict[str, Any]) -> str:
    during = results.get("load_average_1min_during_run") or {}
    if not during:
        return "not sampled"
    return f"min {during['min']:.2f} / median {during['median']:.2f} / max {during['max']:.2f} (every 5 s)"


def _yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per target: what was measured and whether it is met."""
    rows: list[dict[str, Any]] = []
    if "elementwise" in results:
        for jit in (False, True):
            cells = [cell for cell in results["elementwise"]["cells"] if cell["jit_compile"] is jit]
            plain = _plain_ste(cells[0]["results"])
            ratios = [cell["results"][plain]["ratio"] for cell in cells]
            worst = max(cells, key=lambda cell: cell["results"][plain]["ratio"])
            same = sum(bool(cell["ste_graph_same_as_custom_gradient"]) for cell in cells)
            same_hlo = sum(bool(cell["ste_hlo_same_as_custom_gradient"]) for cell in cells)
            identical = f"same graph in {same}/{len(cells)} cells" + (
                f", same optimized HLO in {same_hlo}/{len(cells)}" if jit else ""
            )
            mean = _geomean(ratios)
            default = ""
            if plain != "ste":  # the default op trades time for memory: shown, not held to this target
                lean = [cell["results"]["ste"]["ratio"] for cell in cells]
                default = (
                    f"; ste by default (mask-only rules keep bit-packed masks: time traded for memory, not held "
                    f"to this target): geometric mean {_geomean(lean):.2f}×, worst {max(lean):.2f}×"
                )
            rows.append(
                {
                    "target": f"tf.function{'(jit_compile=True)' if jit else ''} forward+backward, ste with "
                    f"bit masks off ≤ {ELEMENTWISE_LIMIT}×",
                    "measured": f"geometric mean over {len(cells)} cells {mean:.2f}×; worst cell "
                    f"{worst['results'][plain]['ratio']:.2f}× ({worst['dtype']} {worst['rule']}); {identical}{default}",
                    "met": mean <= ELEMENTWISE_LIMIT,
                }
            )
    if "latency" in results:
        for call in ("forward", "forward_backward"):
            entries = results["latency"][call]["results"]
            ratio = entries["ste"]["ratio"]
            rows.append(
                {
                    "target": f"eager latency ({call.replace('_', '+')}) ≤ {EAGER_LIMITS[call]}×",
                    "measured": f"{ratio:.2f}×",
                    "met": ratio <= EAGER_LIMITS[call],
                }
            )
    if "tracing" in results:
        retrace = results["tracing"]["retracing"]
        worst_traces = max(entry["tracing_count"] for entry in retrace.values())
        calls = next(iter(retrace.values()))["calls"]
        cached = results["tracing"]["inner_calls"]["compiled_ops_cached"]
        rows.append(
            {
                "target": "one trace for repeated same-shape calls",
                "measured": f"{worst_traces} trace(s) in {calls} calls; {cached} compiled op(s) for "
                f"{results['tracing']['inner_calls']['calls_in_one_trace']} calls in one trace",
                "met": worst_traces == 1 and cached == 1,
            }
        )
    if "training" in results:
        ratio = results["training"]["results"]["ste"]["ratio"]
        rows.append(
            {
                "target": f"training step ≤ {TRAINING_LIMIT}×",
                "measured": f"{ratio:.2f}×",
                "met": ratio <= TRAINING_LIMIT,
            }
        )
        if "flip_ratio_cost" in results["training"]:
            cost = results["training"]["flip_ratio_cost"]
            rows.append(
                {
                    "target": f"flip-ratio metric ≤ {FLIP_RATIO_LIMIT}× of the ste training step",
                    "measured": f"{cost:.3f}×",
                    "met": cost <= FLIP_RATIO_LIMIT,
                }
            )
    if "memory" in results:
        ratios = results["memory"]["target_ratio"]
        rows.append(
            {
                "target": "identity-chain peak memory within 10 % of a tf.identity chain",
                "measured": ", ".join(
                    f"{mode} {ratio:.2f}×" if ratio is not None else f"{mode} n/a" for mode, ratio in ratios.items()
                ),
                "met": all(r is not None and abs(r - 1.0) <= MEMORY_LIMIT - 1.0 for r in ratios.values()),
            }
        )
    if "memory" in results and "mask_ratio" in results["memory"]:
        ratio = results["memory"]["mask_ratio"]["function"]
        rows.append(
            {
                "target": f"50-op straight_through chain peak (tf.function) ≤ {CHAIN_MASK_LIMIT}× of keeping inputs",
                "measured": f"{ratio:.3f}× (eager {results['memory']['mask_ratio']['eager']:.2f}×)",
                "met": ratio <= CHAIN_MASK_LIMIT,
            }
        )
    if "memory" in results and "between_mask_ratio_function" in results["memory"]:
        memory = results["memory"]
        between = memory["between_mask_ratio_function"]
        default = {k: r["ste default (keeps a bit mask)"] for k, r in between.items()}
        serial = memory.get("between_one_inter_op_thread")
        measured = ", ".join(f"{k} {r:.2f}×" for k, r in default.items())
        if serial:
            measured = (
                "against bits off keeping float32 inputs (one inter-op thread): "
                + ", ".join(f"{k} {r['ratio']:.2f}×" for k, r in serial.items())
                + "; against bits off keeping the 1-byte booleans TensorFlow's default schedule leaves: "
                + measured
            )
        rows.append(
            {
                "target": f"chains with an elementwise op between the quantizers (tf.function): ste ≤ "
                f"{BETWEEN_MASK_LIMIT}× of bit masks off keeping its inputs, and never above bits off, in every "
                "shape",
                "measured": measured,
                "met": max(default.values()) <= 1.0
                and (max(r["ratio"] for r in serial.values()) if serial else max(default.values()))
                <= BETWEEN_MASK_LIMIT,
            }
        )
    if "binary_net" in results:
        net = results["binary_net"]
        ratio = net["memory_ratio"]["ste"]
        rows.append(
            {
                "target": f"binarized conv net step peak memory ≤ {BITS_MEMORY_LIMIT}× of the plain path",
                "measured": f"{ratio:.2f}×",
                "met": ratio <= BITS_MEMORY_LIMIT,
            }
        )
        for mode, limit in BITS_TIME_LIMIT.items():
            ratio = net["timing"][mode]["results"]["ste"]["ratio"]
            rows.append(
                {
                    "target": f"binarized conv net step time{' (jit_compile)' if mode == 'jit' else ''} ≤ {limit}×",
                    "measured": f"{ratio:.2f}×",
                    "met": ratio <= limit,
                }
            )
        for setting, side in (net.get("larq") or {}).get("onednn", {}).items():
            versus = side["versus_larq"][net.get("larq_peer", "ste")]
            for key, what in (("peak", "peak memory"), ("time", "step time")):
                spread = versus[key]
                rows.append(
                    {
                        "target": f"`{net.get('larq_peer', 'ste')}` {what} ≤ {LARQ_GOAL[key]}× larq's, oneDNN "
                        f"{_onednn(setting)} (separate processes, {net['larq']['rounds']} alternating rounds)",
                        "measured": f"{spread['median']:.2f}× ({spread['min']:.2f}–{spread['max']:.2f}×)",
                        "met": spread["median"] <= LARQ_GOAL[key],
                    }
                )
    if "spiking" in results:
        ratio = results["spiking"]["results"]["ste"]["ratio"]
        rows.append(
            {
                "target": f"BPTT through ste.spiking.LIF ≤ {SPIKING_LIMIT}× a hand-written custom_gradient LIF loop",
                "measured": f"{ratio:.2f}×",
                "met": ratio <= SPIKING_LIMIT,
            }
        )
        spike_ratio = results["spiking"]["memory"]["spike_ratio"]
        rows.append(
            {
                "target": "spikes kept for the backward pass as booleans ≤ 0.5× of float spikes",
                "measured": "n/a"
                if spike_ratio is None
                else f"{spike_ratio:.2f}× (whole layer {results['spiking']['memory']['total_ratio']:.2f}×)",
                "met": spike_ratio is not None and spike_ratio <= 0.5,
            }
        )
    if results.get("qat", {}).get("ratios"):
        ratios = results["qat"]["ratios"]
        low, high = ratios["qat_step_range"]
        rows.append(
            {
                "target": f"QAT training step (fit's train_function) ≤ {TFMOT_GOAL['time']}× TFMOT 0.8's (goal; "
                "separate processes)",
                "measured": f"{ratios['qat_step']:.2f}× ({low:.2f}–{high:.2f}×)",
                "met": ratios["qat_step"] <= TFMOT_GOAL["time"],
            }
        )
        low, high = ratios["int8_accuracy_points_range"]
        rows.append(
            {
                "target": f"int8 TFLite test accuracy ≥ TFMOT's minus {-TFMOT_GOAL['points']} points (goal)",
                "measured": f"{ratios['int8_accuracy_points']:+.2f} points ({low:+.2f} to {high:+.2f})",
                "met": ratios["int8_accuracy_points"] >= TFMOT_GOAL["points"],
            }
        )
    return rows


def _onednn(setting: str) -> str:
    return {"1": "on", "0": "off"}.get(setting, "default")


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}×" if b else "–"


def _binary_net(section: dict[str, Any]) -> list[str]:
    mib = {k: v / 2**20 for k, v in section["peak_step_bytes"].items()}
    lines = [
        f"### 7. Binarized residual conv net: {section['blocks']} blocks (sign, binary 3×3 conv, batch norm, "
        f"residual add), width {section['width']}, batch {section['batch']}, {section['size']}×{section['size']}×3",
        "",
        "| network | step peak, MiB (smallest) | ratio | ms per step | ratio | ms per step, jit_compile | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    low = {k: v / 2**20 for k, v in section.get("peak_step_bytes_min", section["peak_step_bytes"]).items()}
    for kind in section["peak_step_bytes"]:
        graph = section["timing"]["graph"]["results"][kind]
        jit = section["timing"]["jit"]["results"][kind]
        lines.append(
            f"| {kind} | {mib[kind]:.1f} ({low[kind]:.1f}) | {section['memory_ratio'][kind]:.2f}× | "
            f"{_ms(graph['median_s'])} | {graph['ratio']:.2f}× | {_ms(jit['median_s'])} | {jit['ratio']:.2f}× |"
        )
    lines += [
        "",
        f"Ratios to `{section['baseline']}` (ste with `ste.bit_masks(False)`: the float inputs kept). "
        f"Step peak: TensorFlow's CPU allocator peak during one step minus the memory in use before it, the largest "
        f'of {section.get("peak_steps", 1)} steps (the smallest in parentheses). "ste BN": '
        f"`ste.layers.BatchNormalization` (fused kernel) instead of Keras's. "
        f"{section['rounds']} alternating rounds × {section['inner']} steps.",
        "",
    ]
    if section.get("larq"):
        lines += side_by_side(section["larq"])
    return lines


def side_by_side(larq: dict[str, Any], profile: bool = True) -> list[str]:
    """The binarized network against larq (``binary_net.side_by_side``): step time and peak per network and oneDNN
    setting, and, where the rounds were profiled and ``profile`` is true (the report, not the documentation page), the
    op classes of one step."""
    first = next(iter(larq["onednn"].values()))["rounds"]
    versions = first["larq"][0]
    lines = [
        f"#### Against larq {versions['larq']} (tf-keras, TensorFlow {versions['tensorflow']}, its own venv)",
        "",
        f"{larq['rounds']} rounds per oneDNN setting; each round one ste process and one larq process (which runs "
        f"first alternates), each timing its networks over {larq['steps']} alternating steps (median) and reading "
        "its own allocator peak (largest of 5 steps). Figures: median over the rounds (range). ÷ larq: per round, "
        "ste's figure over larq's in that round.",
        "",
        "| oneDNN | network | ms per step | step peak, MiB | ÷ larq time | ÷ larq peak | 1-min load |",
        "|---|---|---|---|---|---|---|",
    ]
    for setting, side in larq["onednn"].items():
        load = side.get("load_1min") or {}
        load_text = f"{load['min']:.1f}–{load['max']:.1f}" if load else "–"
        for name, network in side["networks"].items():
            step, peak = network["step_s"], network["peak_bytes"]
            versus = side["versus_larq"].get(name)
            if name == "tf-keras larq":
                ratio_time = ratio_peak = "1"
            elif versus:
                ratio_time = (
                    f"{versus['time']['median']:.2f}× ({versus['time']['min']:.2f}–{versus['time']['max']:.2f})"
                )
                ratio_peak = (
                    f"{versus['peak']['median']:.2f}× ({versus['peak']['min']:.2f}–{versus['peak']['max']:.2f})"
                )
            else:
                ratio_time = ratio_peak = "–"
            lines.append(
                f"| {_onednn(setting)} | {name} | {_ms(step['median'])} ({_ms(step['min'])}–{_ms(step['max'])}) | "
                f"{peak['median'] / 2**20:.1f} ({peak['min'] / 2**20:.1f}–{peak['max'] / 2**20:.1f}) | {ratio_time} | "
                f"{ratio_peak} | {load_text} |"
            )
    lines += [
        "",
        '"ste, ste BN": `ste.layers.QuantConv2D` with `ste.layers.BatchNormalization`, as docs/larq.md writes it; '
        '"ste": the same with `keras.layers.BatchNormalization`; "ste, plain, ste BN": the documented network with '
        "`ste.set_bit_masks(False)` (every op keeps its float input for the backward pass, as larq's do); "
        '"float": `keras.layers.Conv2D` in the blocks.',
        "",
    ]
    return lines + (_op_classes(larq) if profile else [])


def _op_classes(larq: dict[str, Any]) -> list[str]:
    """Milliseconds of op time per class in one profiled step, medians over the rounds' processes."""
    lines: list[str] = []
    for setting, side in larq["onednn"].items():
        runs = side["rounds"]
        if not runs["larq"] or "profile" not in runs["larq"][0]:
            continue
        columns = {"larq": [r["profile"] for r in runs["larq"]]}
        for kind in runs["ste"][0].get("profile", {}):
            columns[f"ste ({kind})"] = [r["profile"][kind] for r in runs["ste"]]
        classes = list(columns["larq"][0]["classes_ms"])
        med = statistics.median
        lines += [
            f"One profiled step per process, oneDNN {_onednn(setting)} (TensorFlow's profiler, host tracer; "
            f"{_steps(columns['larq'][0]['steps'])} per process, medians over steps and then over the rounds): op time "
            "per class, ms. The executor runs independent ops on two threads, so op times add up to more than the "
            'step; "no op running" is the step\'s time during which no op ran on any thread (scheduling, the '
            "function call, Python).",
            "",
            "| op class | " + " | ".join(columns) + " |",
            "|---|" + "---|" * len(columns),
        ]
        for name in classes:
            lines.append(
                f"| {name} | "
                + " | ".join(f"{med(p['classes_ms'][name] for p in c):.1f}" for c in columns.values())
                + " |"
            )
        for key, label in (
            ("op_time_ms", "all ops"),
            ("idle_ms", "no op running"),
            ("step_ms", "profiled step (wall)"),
        ):
            lines.append(f"| {label} | " + " | ".join(f"{med(p[key] for p in c):.1f}" for c in columns.values()) + " |")
        lines.append(
            "| ops executed | " + " | ".join(f"{med(p['ops'] for p in c):.0f}" for c in columns.values()) + " |"
        )
        lines.append("")
    return lines


def _spiking(section: dict[str, Any]) -> list[str]:
    r, m = section["results"], section["memory"]
    mib = {name: value / 2**20 for name, value in m["kept_bytes"].items()}
    return [
        f"### 6. BPTT through LIF neurons ({section['steps']} steps × batch {section['batch']} × "
        f"{section['units']} units)",
        "",
        "| implementation | ms per forward+backward | ratio |",
        "|---|---|---|",
        f"| hand-written tf.custom_gradient loop | {_ms(r['hand_written']['median_s'])} | 1.00× |",
        f"| ste.spiking.LIF | {_ms(r['ste']['median_s'])} | {r['ste']['ratio']:.2f}× |",
        "",
        f"Largest gradient difference between the two: {section['max_gradient_difference']:.2g}.",
        "",
        f"Memory kept for the backward pass ({m['steps']} steps × batch {section['batch']} × {m['units']} units; "
        f"one float32 tensor of that shape is {m['float_tensor_bytes'] / 2**20:.2f} MiB): zero reset with boolean "
        f"spikes {mib['bool']:.2f} MiB, with float spikes {mib['float']:.2f} MiB, no reset (no spikes kept) "
        f"{mib['none']:.2f} MiB; hand-written loop {mib['hand_written']:.2f} MiB.",
        "",
        *_spiking_peers(section.get("peers")),
    ]


def _spiking_peers(peers: dict[str, Any] | None) -> list[str]:
    """The spiking peers table: ste, snnTorch and SpikingJelly on the same networks (benchmarks/spiking_peers.py)."""
    if not peers:
        return []
    lines = [
        f"Training step against the peers (separate processes, {peers['threads']} threads each; memory: the highest "
        f"running sum of the bytes the step's ops requested, from TensorFlow's and torch's profilers; ste's rows run "
        f"ste.spiking.Fused (SpikingConv2D, SpikingDense), ste_fuse the Keras Dense + LIF layers through "
        f"ste.spiking.fuse(model), ste_unfused the Keras Dense/Conv2D + LIF layers as they are):",
        "",
        "| network | framework | ms per step | ste ÷ it | step peak, MiB | ste ÷ it |",
        "|---|---|---|---|---|---|",
    ]
    for workload, entry in peers["workloads"].items():
        ste_entry = entry["ste"]
        lines.append(
            f"| {workload} | ste | {_ms(ste_entry['median_s'])} | 1.00× | "
            f"{ste_entry['peak_bytes'] / 2**20:.1f} | 1.00× |"
        )
        for name in ("ste_fuse", "ste_unfused", "snntorch", "spikingjelly"):
            if name in entry:
                peer = entry[name]
                memory = "–" if peer["ste_memory_ratio"] is None else f"{peer['ste_memory_ratio']:.2f}×"
                lines.append(
                    f"| {workload} | {name} | {_ms(peer['median_s'])} | {peer['ste_time_ratio']:.2f}× | "
                    f"{peer['peak_bytes'] / 2**20:.1f} | {memory} |"
                )
    return [*lines, ""]


def _qat(section: dict[str, Any]) -> list[str]:
    """The digits CNN of examples/qat_digits.py fine-tuned with ste.quantize_model and with TFMOT 0.8."""
    f = section["float"]
    lines = [
        f"### 8. QAT against TFMOT 0.8: the digits CNN of examples/qat_digits.py ({f['train_samples']} training "
        f"images, {section['epochs']} float epochs, then {section['qat_epochs']} QAT epochs, batch {section['batch']})",
        "",
        "| side | ms per QAT step | ms per step, whole epoch | ms per float step | QAT accuracy | int8 TFLite "
        "accuracy | int8 kernels | TFLite bytes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for side, entry in section["summary"].items():
        lines.append(
            f"| {side} ({entry['versions']}) | {_ms(entry['qat_step_s'])} | {_ms(entry['qat_epoch_step_s'])} | "
            f"{_ms(entry['float_step_s'])} | {entry['qat_accuracy']:.2%} | {entry['int8_accuracy']:.2%} | "
            f"{entry['int8_kernels'][0]}/{entry['int8_kernels'][1]} | {entry['tflite_bytes']:,} |"
        )
    lines += [
        "",
        f"Both sides fine-tune the same float network (test accuracy {f['accuracy']:.2%}, float TFLite file "
        f"{f['tflite_bytes']:,} bytes). Each repeat runs the sides' fresh processes at once and their timed epochs "
        f"in turn (A B, B A, …); {section['repeats']} repeats, medians. A step: one call of fit's train_function "
        "(tf.function, no XLA), the first epoch left out; whole epoch: an epoch's wall time per step.",
        "",
    ]
    ratios = section.get("ratios")
    if ratios:
        lines += [
            f"ste ÷ TFMOT: QAT step {ratios['qat_step']:.2f}× (per repeat {ratios['qat_step_range'][0]:.2f}–"
            f"{ratios['qat_step_range'][1]:.2f}×), whole epoch {ratios['qat_epoch_step']:.2f}×, float step (Keras 3 "
            f"against tf-keras, no quantization) {ratios['float_step']:.2f}×; int8 accuracy "
            f"{ratios['int8_accuracy_points']:+.2f} points; TFLite file {ratios['tflite_bytes']:.2f}×.",
            "",
        ]
    else:
        lines += [section.get("tfmot_skipped", "TFMOT not run."), ""]
    return lines


def _times(entry: dict[str, Any]) -> str:
    return f"{entry['ratio']:.2f}×"


def _elementwise(section: dict[str, Any]) -> list[str]:
    """One row per dtype, XLA setting and rule: the baseline's time, every other variant as a ratio to it (eight
    columns fit the documentation's text column); whether the graphs and XLA's HLO are the same, counted below."""
    lines = [
        f"### 1. Elementwise sign forward + backward ({section['size']:,} values, ratio to custom_gradient)",
        "",
        "| dtype | XLA | rule | custom_gradient, ms | ste, bit masks off | ste | stop-gradient exact | "
        "stop-gradient naive |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for cell in section["cells"]:
        r = cell["results"]
        plain = r.get("ste_bits_off")
        lines.append(
            f"| {cell['dtype']} | {'yes' if cell['jit_compile'] else 'no'} | {cell['rule']} | "
            f"{_ms(r['custom_gradient']['median_s'])} | {_times(plain) if plain else '–'} | {_times(r['ste'])} | "
            f"{_times(r['stop_gradient_exact'])} | {_times(r['stop_gradient_naive'])} |"
        )
    cells = section["cells"]
    same = sum(bool(cell["ste_graph_same_as_custom_gradient"]) for cell in cells)
    jit = [cell for cell in cells if cell["jit_compile"]]
    same_hlo = sum(bool(cell["ste_hlo_same_as_custom_gradient"]) for cell in jit)
    rules = sorted({cell["ste_rule"] for cell in cells})
    lines += [
        "",
        f"{section['rounds']} alternating rounds × {section['inner']} calls; ratio = median over rounds of the "
        f"per-round ratio. ste runs with `ste.bit_masks(False)` (it keeps its float input) and by default (a "
        f"mask-only rule such as straight_through keeps a bit-packed mask, 1/32 of a float32 input, except where "
        f"its input is the function's own input, as here: the caller holds it anyway). The traced graph of ste with "
        f"bit masks off equals the hand-written one up to node names in {same}/{len(cells)} cells, and XLA's "
        f"optimized HLO is the same in {same_hlo}/{len(jit)}. ste rules: {'; '.join(rules)}.",
        "",
    ]
    return lines


def _latency(section: dict[str, Any]) -> list[str]:
    lines = [
        f"### 2. Eager call latency ({section['size']:,} float32 values, {section['rule']}, µs per call)",
        "",
        "| call | custom_gradient | ste | tf.sign (no custom gradient) |",
        "|---|---|---|---|",
    ]
    for call in ("forward", "forward_backward"):
        r = section[call]["results"]
        lines.append(
            f"| {call.replace('_', ' + ')} | {_us(r['custom_gradient']['median_s'])} | {_cell(r['ste'], _us)} | "
            f"{_cell(r['tf.sign (no custom gradient)'], _us)} |"
        )
    lines += ["", f"{section['rounds']} alternating rounds × {section['inner']} calls.", ""]
    return lines


def _tracing(section: dict[str, Any]) -> list[str]:
    lines = [
        f"### 3. Tracing ({section['rule']}, {section['size']:,} float32 values)",
        "",
        "| op | calls of one tf.function | traces | first call (trace + run), ms |",
        "|---|---|---|---|",
    ]
    for name, entry in section["retracing"].items():
        first = section["first_call"].get(name)
        first_text = f"{_ms(first['median_s'])} ({first['ratio']:.2f}×)" if first else "–"
        lines.append(f"| {name} | {entry['calls']} | {entry['tracing_count']} | {first_text} |")
    inner = section["inner_calls"]
    lines += [
        "",
        f"Calling one ste op {inner['calls_in_one_trace']} times inside a single trace (same shapes and keywords) "
        f"built {inner['compiled_ops_cached']} compiled custom-gradient op(s). First call: median of "
        f"{next(iter(section['first_call'].values()))['samples']} fresh op + fresh tf.function pairs, alternating.",
        "",
    ]
    return lines


def _training(section: dict[str, Any]) -> list[str]:
    r = section["results"]
    return [
        f"### 4. Training step, binarized conv net (batch {section['batch']}, 32×32×3, width {section['width']})",
        "",
        "| network | ms per step | ratio |",
        "|---|---|---|",
        f"| hand-written tf.custom_gradient quantizers | {_ms(r['custom_gradient']['median_s'])} | 1.00× |",
        f"| ste | {_ms(r['ste']['median_s'])} | {r['ste']['ratio']:.2f}× |",
        *(
            [
                f"| ste with metrics=['flip_ratio'] | {_ms(r['ste_flip_ratio']['median_s'])} | "
                f"{r['ste_flip_ratio']['ratio']:.2f}× ({section['flip_ratio_cost']:.3f}× of ste) |"
            ]
            if "ste_flip_ratio" in r
            else []
        ),
        "",
        f"ste network: {section['ste_network']}. Traced step: {section['graph_ops']['ste']} ops with ste, "
        f"{section['graph_ops']['custom_gradient']} hand-written; op types that differ in count: "
        f"{section['graph_op_difference'] or 'none'}. {section['rounds']} alternating rounds × {section['inner']} "
        f"steps.",
        "",
    ]


def _memory(section: dict[str, Any]) -> list[str]:
    fresh = any("rss_growth_fresh_process" in e for row in section["chains"].values() for e in row.values())
    header = "| chain | eager | tf.function |"
    rule = "|---|---|---|"
    if fresh:
        header += " RSS growth, fresh process: eager | tf.function |"
        rule += "---|---|"
    lines = [
        f"### 5. Peak memory, forward + backward through {section['length']} ops on {section['size']:,} "
        f"{section['dtype']} values (multiples of the input's size)",
        "",
        header,
        rule,
    ]
    for name, row in section["chains"].items():
        line = f"| {name} | {row['eager']['allocator_peak']:.2f} | {row['function']['allocator_peak']:.2f} |"
        if fresh:
            line += "".join(f" {row[m].get('rss_growth_fresh_process', float('nan')):.2f} |" for m in row)
        lines.append(line)
    lines += [
        "",
        "Eager and tf.function columns: TensorFlow CPU allocator peak (get_memory_info after reset_memory_stats).",
        "",
    ]
    serial = section.get("between_one_inter_op_thread")
    if serial:
        lines += [
            "The chains with an op between the quantizers again, each in a fresh process with one inter-op thread "
            "(`TF_NUM_INTEROP_THREADS=1`), where bits off keeps each float32 input as its rule asks (with the "
            "default pool the executor computes `abs(y) <= 1` early and keeps a 1-byte boolean instead):",
            "",
            "| between the quantizers | bit masks off | ste default | ste ÷ bits off |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {k} | {r['bit masks off (keeps inputs)']:.2f} | {r['ste default (keeps a bit mask)']:.2f} | "
            f"{r['ratio']:.2f}× |"
            for k, r in serial.items()
        ]
        lines.append("")
    return lines


def markdown(results: dict[str, Any]) -> str:
    """The whole report as Markdown."""
    m = results["machine"]
    lines = [
        f"## Results ({results['mode']} run, {results['date_utc']})",
        "",
        f"Machine: {m['cpu']}, {m['logical_cpus']} logical CPUs, {m['memory']} RAM; {m['platform']}; Python "
        f"{m['python']}, TensorFlow {m['tensorflow']}, Keras {m['keras']}, NumPy {m['numpy']}; ste {m['ste']} "
        f"(commit {m['git_commit']}). Load average (1/5/15 min) at start {results['load_average_start']}, at end "
        f"{results.get('load_average_end')}; 1-minute load during the run {_load(results)}; total "
        f"{results.get('seconds')} s.",
        "",
        f"Reproduce: `{results['command']}`",
        "",
        "### Targets",
        "",
        "| target | measured | met |",
        "|---|---|---|",
    ]
    lines += [f"| {row['target']} | {row['measured']} | {_yes(row['met'])} |" for row in targets(results)]
    lines.append("")
    for name, render in (
        ("elementwise", _elementwise),
        ("latency", _latency),
        ("tracing", _tracing),
        ("training", _training),
        ("memory", _memory),
        ("spiking", _spiking),  # section 6
        ("binary_net", _binary_net),  # section 7
        ("qat", _qat),  # section 8
    ):
        if name in results:
            lines += render(results[name])
    return "\n".join(lines)
