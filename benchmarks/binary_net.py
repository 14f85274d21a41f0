"""Peak memory and step time of a Bi-Real-like binarized residual conv net, bits kept or not.

The network: a float 3×3 stem convolution (32 channels) and batch norm, then ``blocks`` residual blocks
``h + BatchNorm(QuantConv2D(sign input, sign kernel, 3×3, 32 channels)(h))`` on 32×32 maps, global average pooling
and a float dense classifier (10 classes); batch 64, 32×32×3 inputs; one ``tf.function`` training step (forward,
loss, gradients, Adam update, weight clip).

Variants, built with the same initial weights:

* ``float``: the same network with ``keras.layers.Conv2D`` in the blocks (what binarizing is compared with).
* ``ste, plain``: ``ste.layers.QuantConv2D`` traced under ``ste.bit_masks(False)`` (ste 0.1's backward pass: every
  sign keeps its float input for the straight-through mask, every convolution its float ±1 input).
* ``ste``: the default (the sign keeps a bit-packed mask, the convolution its input as bits).
* ``…, ste BN``: the same with ``ste.layers.BatchNormalization`` (TensorFlow's fused batch-norm kernel, as tf-keras
  and so larq use) instead of ``keras.layers.BatchNormalization``; ``ste, ste BN`` is what is compared with larq.

Memory: TensorFlow's CPU allocator peak during one step (after a warm-up step), minus the memory in use before it
(weights, optimizer slots, inputs): what the step itself allocates; the largest of ``PEAK_STEPS`` steps (the peak
varies from step to step with the allocator's fragmentation, see docs/performance.md), the smallest kept too.
Time: alternating rounds, ratio to ``ste, plain``, without and with ``jit_compile=True``.

Against larq (``--larq-venv``): :func:`side_by_side` runs alternating rounds of two fresh processes, this module's
``main`` (ste's networks of :data:`PEER_VARIANTS`) and ``benchmarks/larq_net.py`` in larq's venv (larq 0.14 and the
float network on tf-keras), each timing its networks the same way (``_bireal.median_steps``) and reading its own
allocator peak; with oneDNN on and off (``TF_ENABLE_ONEDNN_OPTS``, set for both processes of a round). It reports
each network's median and range over the rounds and the per-round ratios of ste's step to larq's. With ``profile``
each process also records one profiled step's time per op class (``_op_profile``).

    python -m benchmarks.binary_net BATCH BLOCKS WIDTH SIZE ROUNDS [PROFILE [VARIANT ...]]

runs one ste process (what :func:`side_by_side` starts) and prints ``RESULT {json}``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

import ste

from ._allocator import environment
from ._bireal import build, median_steps, peak_step_bytes, train_step
from ._op_profile import profile_steps
from ._subprocess import result_of
from ._timing import alternate, load_average, summarize

__all__ = ["PEER_VARIANTS", "VARIANTS", "main", "run", "side_by_side"]

#: network -> (binary convolutions?, ste.layers.BatchNormalization instead of Keras's?, ste.bit_masks setting: None is
#: the default policy, False keeps the float inputs as ste 0.1 did)
VARIANTS = {
    "float": (False, False, None),
    "float, ste BN": (False, True, None),
    "ste, plain": (True, False, False),
    "ste": (True, False, None),
    "ste, plain, ste BN": (True, True, False),
    "ste, ste BN": (True, True, None),
}
BASELINE = "ste, plain"
LARQ_PEER = "ste, ste BN"  # the ste network compared with larq (both use the fused batch-norm kernel)
PEAK_STEPS = 5
#: ste's networks in each process of the side-by-side rounds: the documented one first (docs/larq.md: ste's layers
#: and ste.layers.BatchNormalization), the same with bit masks off (the time-for-memory choice of docs/performance.md,
#: "Time or memory"), then Keras's batch norm after binary layers, and the float networks
PEER_VARIANTS = ("ste, ste BN", "ste, plain, ste BN", "ste", "float, ste BN", "float")
PROFILED = ("ste, ste BN", "ste")  # the networks whose op classes a profiling process records
ROOT = Path(__file__).resolve().parent.parent


def _conv(width: int) -> keras.layers.Layer:
    return ste.layers.QuantConv2D(
        width,
        3,
        padding="same",
        use_bias=False,
        input_quantizer="sign",
        kernel_quantizer="sign",
        kernel_constraint="weight_clip",
    )


def _prepared(kind: str, jit_compile: bool, x: tf.Tensor, y: tf.Tensor, **shape: int) -> Any:
    """A traced, warmed-up step of one variant (traced under its bit-mask setting)."""
    binary, fused, masks = VARIANTS[kind]
    norm = ste.layers.BatchNormalization if fused else None
    with ste.bit_masks(masks):
        step = train_step(keras, build(keras, _conv if binary else None, **shape, norm=norm), jit_compile)
        step(x, y)
    return step


def _larq(venv: str, args: Sequence[int], onednn: str | None) -> dict[str, Any]:
    """One larq process: ``larq_net.py`` in ``venv`` (ste is not imported there)."""
    script = Path(__file__).with_name("larq_net.py")
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH="")
    if onednn is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = onednn
    python = str(Path(venv) / "bin" / "python")
    return result_of([python, str(script), *map(str, args)], env=environment(env), timeout=1800)


def _ste(args: Sequence[int], onednn: str | None, kinds: Sequence[str]) -> dict[str, Any]:
    """One ste process: this module's :func:`main`, with this interpreter."""
    env = dict(
        os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    if onednn is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = onednn
    argv = [sys.executable, "-m", "benchmarks.binary_net", *map(str, args), *kinds]
    return result_of(argv, env=environment(env), timeout=1800, cwd=str(ROOT))


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def side_by_side(
    larq_venv: str,
    batch: int,
    blocks: int,
    width: int,
    size: int,
    rounds: int,
    steps: int,
    onednn: Sequence[str] = ("1", "0"),
    kinds: Sequence[str] = PEER_VARIANTS,
    profile: int = 0,
) -> dict[str, Any]:
    """``rounds`` rounds per oneDNN setting, each one ste process and one larq process (which one first alternates),
    each timing its networks over ``steps`` steps; medians and ranges over the rounds, and ste ÷ larq per round."""
    args = (batch, blocks, width, size, steps, profile)
    settings: dict[str, Any] = {}
    for setting in onednn:
        runs: dict[str, list[dict[str, Any]]] = {"ste": [], "larq": []}
        for index in range(rounds):
            for side in ("ste", "larq")[:: 1 if index % 2 == 0 else -1]:
                load = load_average()
                started = time.time()
                result = _ste(args, setting, kinds) if side == "ste" else _larq(larq_venv, args, setting)
                result.update(load_before=load, load_after=load_average(), seconds=round(time.time() - started, 1))
                runs[side].append(result)
        settings[setting] = {"rounds": runs, **_summary(runs)}
    return {"rounds": rounds, "steps": steps, "kinds": list(kinds), "onednn": settings}


def _summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Each network's step time and peak over the rounds, and each ste network's time and peak ÷ larq's."""
    networks: dict[str, Any] = {}
    for side, results in runs.items():
        for kind in results[0]["median_step_s"]:
            name = kind if side == "ste" else f"tf-keras {kind}"
            networks[name] = {
                "step_s": _spread([r["median_step_s"][kind] for r in results]),
                "peak_bytes": _spread([r["peak_step_bytes"][kind] for r in results]),
            }
    larq = runs["larq"]
    versus: dict[str, Any] = {}
    for kind in runs["ste"][0]["median_step_s"]:
        pairs = list(zip(runs["ste"], larq))
        versus[kind] = {
            "time": _spread([s["median_step_s"][kind] / q["median_step_s"]["larq"] for s, q in pairs]),
            "peak": _spread(
                [
                    s["peak_step_bytes"][kind] / q["peak_step_bytes"]["larq"] if q["peak_step_bytes"]["larq"] else 0.0
                    for s, q in pairs
                ]
            ),
        }
    loads = [r["load_before"][0] for rs in runs.values() for r in rs if r.get("load_before")]
    return {"networks": networks, "versus_larq": versus, "load_1min": _spread(loads) if loads else {}}


def main(
    batch: int, blocks: int, width: int, size: int, rounds: int, profile: int = 0, kinds: Sequence[str] = PEER_VARIANTS
) -> dict[str, Any]:
    """One ste process of :func:`side_by_side`: each network's step peak (largest of ``PEAK_STEPS``) and median step
    time (``_bireal.median_steps``, as ``larq_net.py``), and with ``profile`` the op classes of :data:`PROFILED`."""
    shape = {"blocks": blocks, "width": width, "size": size}
    x = tf.random.stateless_uniform([batch, size, size, 3], seed=(13, 1), minval=-1.0, maxval=1.0)
    y = tf.random.stateless_uniform([batch], seed=(13, 2), maxval=10, dtype=tf.int32)
    steps = {kind: _prepared(kind, False, x, y, **shape) for kind in kinds}
    peaks = {kind: max(peak_step_bytes(step, x, y) for _ in range(PEAK_STEPS)) for kind, step in steps.items()}
    result: dict[str, Any] = {
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", ""),
        "peak_step_bytes": peaks,
        "median_step_s": median_steps({k: (lambda s=s: s(x, y).numpy()) for k, s in steps.items()}, rounds),
    }
    if profile:
        result["profile"] = {
            kind: profile_steps(lambda s=steps[kind]: s(x, y).numpy(), profile) for kind in PROFILED if kind in steps
        }
    return result


def run(
    batch: int,
    blocks: int,
    width: int,
    size: int,
    rounds: int,
    inner: int,
    warmup: int = 2,
    larq_venv: str | None = None,
    larq_rounds: int = 5,
    larq_steps: int = 15,
    profile: int = 0,
) -> dict[str, Any]:
    shape = {"blocks": blocks, "width": width, "size": size}
    x = tf.random.stateless_uniform([batch, size, size, 3], seed=(13, 1), minval=-1.0, maxval=1.0)
    y = tf.random.stateless_uniform([batch], seed=(13, 2), maxval=10, dtype=tf.int32)
    memory, memory_min = {}, {}
    graph = {kind: _prepared(kind, False, x, y, **shape) for kind in VARIANTS}  # measured, then timed
    for kind, step in graph.items():
        peaks = [peak_step_bytes(step, x, y) for _ in range(PEAK_STEPS)]
        memory[kind], memory_min[kind] = max(peaks), min(peaks)
    timing: dict[str, Any] = {}
    for jit in (False, True):
        steps = {kind: _prepared(kind, True, x, y, **shape) for kind in VARIANTS} if jit else graph
        load = load_average()
        samples = alternate(
            {k: (lambda s=s: s(x, y)) for k, s in steps.items()}, rounds=rounds, inner=inner, warmup=warmup
        )
        timing["jit" if jit else "graph"] = {"load_before": load, "results": summarize(samples, BASELINE)}
    result: dict[str, Any] = {
        "batch": batch,
        **shape,
        "rounds": rounds,
        "inner": inner,
        "baseline": BASELINE,
        "larq_peer": LARQ_PEER,
        "peak_steps": PEAK_STEPS,
        "peak_step_bytes": memory,
        "peak_step_bytes_min": memory_min,
        "memory_ratio": {k: v / memory[BASELINE] if memory[BASELINE] else float("nan") for k, v in memory.items()},
        "timing": timing,
    }
    if larq_venv:
        result["larq"] = side_by_side(larq_venv, batch, blocks, width, size, larq_rounds, larq_steps, profile=profile)
    return result


if __name__ == "__main__":
    numbers = [int(a) for a in sys.argv[1:7]]
    chosen = tuple(sys.argv[7:]) or PEER_VARIANTS
    print("RESULT " + json.dumps(main(*numbers, kinds=chosen)))
