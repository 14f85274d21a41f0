"""The binary_net network with larq 0.14 on tf-keras: run inside a venv with larq (never imports ste).

    TF_USE_LEGACY_KERAS=1 /path/to/larq-venv/bin/python benchmarks/larq_net.py BATCH BLOCKS WIDTH SIZE ROUNDS [PROFILE]

Prints ``RESULT {json}``: the allocator's peak above the memory in use for one training step (after a warm-up
step), the median step time over alternating rounds, for the float network and the larq one, and with PROFILE > 0
the larq step's time per op class over that many profiled steps (``_op_profile``).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from _allocator import require_statistics, use_bfc  # this directory is on sys.path when run as a script

use_bfc()  # before TensorFlow is imported: the peak needs the BFC allocator's statistics

import larq as lq  # noqa: E402
import tensorflow as tf  # noqa: E402
from _bireal import build, median_steps, peak_step_bytes, train_step  # noqa: E402
from _op_profile import profile_steps  # noqa: E402

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


def main(batch: int, blocks: int, width: int, size: int, rounds: int, profile: int = 0) -> dict[str, Any]:
    require_statistics()
    x = tf.random.stateless_uniform([batch, size, size, 3], seed=(13, 1), minval=-1.0, maxval=1.0)
    y = tf.random.stateless_uniform([batch], seed=(13, 2), maxval=10, dtype=tf.int32)
    convs = {"larq": _conv, "float": None}
    steps = {kind: train_step(keras, build(keras, conv, blocks, width, size)) for kind, conv in convs.items()}
    peaks = {}
    for kind, step in steps.items():
        step(x, y)
        peaks[kind] = max(peak_step_bytes(step, x, y) for _ in range(5))  # as binary_net.PEAK_STEPS
    times = median_steps({k: (lambda s=s: s(x, y).numpy()) for k, s in steps.items()}, rounds)
    result = {
        "larq": lq.__version__ if hasattr(lq, "__version__") else "0.14",
        "tensorflow": tf.__version__,
        "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", ""),
        "peak_step_bytes": peaks,
        "median_step_s": times,
    }
    if profile:
        result["profile"] = profile_steps(lambda: steps["larq"](x, y).numpy(), profile)
    return result


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(*(int(a) for a in sys.argv[1:]))))
