"""Issue 13: peak memory and step time of a Bi-Real-like binarized residual conv net, bits kept or not.

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
Time: alternating rounds, ratio to ``ste, plain``, without and with ``jit_compile=True``. The larq side
(``--larq-venv``) runs ``benchmarks/larq_net.py`` in that venv.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

import ste

from ._allocator import environment
from ._bireal import build, peak_step_bytes, train_step
from ._subprocess import result_of
from ._timing import alternate, load_average, summarize

__all__ = ["VARIANTS", "run"]

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


def _larq(venv: str, batch: int, blocks: int, width: int, size: int, rounds: int) -> dict[str, Any]:
    """The same network with larq 0.14 on tf-keras, in ``venv`` (a subprocess; ste is not imported there)."""
    script = Path(__file__).with_name("larq_net.py")
    env = environment(dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=""))
    args = [str(a) for a in (batch, blocks, width, size, rounds)]
    return result_of([str(Path(venv) / "bin" / "python"), str(script), *args], env=env, timeout=1800)


def run(
    batch: int,
    blocks: int,
    width: int,
    size: int,
    rounds: int,
    inner: int,
    warmup: int = 2,
    larq_venv: str | None = None,
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
        # ste's side timed as larq_net times larq's (median of single steps), right before and right after it, so
        # that a load that changes while the larq process runs shows up in both figures
        peer = graph[LARQ_PEER]  # a fresh step runs slower for its first ten or so steps (195 against 120 ms)
        before = _median_step(peer, x, y, rounds)
        result["larq"] = _larq(larq_venv, batch, blocks, width, size, rounds)
        result["larq_peer_step_s"] = {"before": before, "after": _median_step(peer, x, y, rounds)}
    return result


def _median_step(step: Any, x: tf.Tensor, y: tf.Tensor, rounds: int) -> float:
    """Median seconds of one step over ``rounds`` steps after two warm-up steps (as ``larq_net`` measures)."""
    times = []
    for index in range(rounds + 2):
        start = time.perf_counter()
        step(x, y).numpy()
        if index >= 2:
            times.append(time.perf_counter() - start)
    return statistics.median(times)
