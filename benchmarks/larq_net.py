"""The binary_net network with larq 0.14 on tf-keras: run inside a venv with larq (never imports ste).

    TF_USE_LEGACY_KERAS=1 /path/to/larq-venv/bin/python benchmarks/larq_net.py BATCH BLOCKS WIDTH SIZE ROUNDS

Prints ``RESULT {json}``: the allocator's peak above the memory in use for one training step (after a warm-up
step) and the median step time over alternating rounds, for the float network and the larq one.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

from _allocator import require_statistics, use_bfc  # this directory is on sys.path when run as a script

use_bfc()  # before TensorFlow is imported: the peak needs the BFC allocator's statistics

import larq as lq  # noqa: E402
import tensorflow as tf  # noqa: E402
from _bireal import build, peak_step_bytes, train_step  # noqa: E402

keras = tf.keras


def _conv(width: int) -> Any:
    return lq.layers.QuantConv2D(
        width,
        3,
        padding="same",
        use_bias=False,
        input_quantizer="ste_sign",
        kernel_quantizer="ste_sign",
        kernel_constraint="weight_clip",
    )


def main(batch: int, blocks: int, width: int, size: int, rounds: int) -> dict[str, Any]:
    require_statistics()
    x = tf.random.stateless_uniform([batch, size, size, 3], seed=(13, 1), minval=-1.0, maxval=1.0)
    y = tf.random.stateless_uniform([batch], seed=(13, 2), maxval=10, dtype=tf.int32)
    convs = {"float": None, "larq": _conv}
    steps = {kind: train_step(keras, build(keras, conv, blocks, width, size)) for kind, conv in convs.items()}
    peaks = {}
    for kind, step in steps.items():
        step(x, y)
        peaks[kind] = max(peak_step_bytes(step, x, y) for _ in range(5))  # as binary_net.PEAK_STEPS
    times: dict[str, list[float]] = {kind: [] for kind in steps}
    for index in range(rounds + 2):
        for kind in list(steps)[:: 1 if index % 2 else -1]:
            start = time.perf_counter()
            steps[kind](x, y).numpy()
            if index >= 2:
                times[kind].append(time.perf_counter() - start)
    return {
        "larq": lq.__version__ if hasattr(lq, "__version__") else "0.14",
        "tensorflow": tf.__version__,
        "peak_step_bytes": peaks,
        "median_step_s": {kind: statistics.median(v) for kind, v in times.items()},
    }


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(*(int(a) for a in sys.argv[1:6]))))
