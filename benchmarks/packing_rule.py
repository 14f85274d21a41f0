"""What the bit-packed mask of a mask-only op costs and saves, by tensor size: the measurement behind ``keep_bits``.

``python -m benchmarks.packing_rule [rounds] [dtype]`` runs ``rounds`` fresh processes (default 4, float32), one
after the other. Each process times, for every size from 2^10 to 2^22 elements, a ``straight_through`` sign (forward
+ backward in ``tf.function``, no XLA) written three ways, in alternating rounds (``_timing.alternate``):

* ``custom_gradient``: a hand-written ``tf.custom_gradient`` (the baseline; it keeps its float input);
* ``ste, bits off``: ste with ``ste.bit_masks(False)`` (it keeps its float input, the same graph as the baseline);
* ``ste, bits``: ste with ``ste.bit_masks(True)`` (it keeps a bit-packed mask, 1/32 of a float32 input);
* ``ste``: ste by default (whatever ``keep_bits`` decides at that size).

Two placements: the op on the traced function's own input (an isolated op: the caller holds the input anyway) and on
a tensor the function computes (``x · 1.0001``, as in a network: the input is kept only for the op). Each process
reports the median per-round ratio to ``custom_gradient``; the driver prints, per size and placement, the median and
the range of those ratios over the processes, with the 1-minute load average before each process, and one
``RESULT {json}`` line.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from typing import Any

SIZES = tuple(2**k for k in range(10, 23, 2))
VARIANTS = ("custom_gradient", "ste, bits off", "ste, bits", "ste")


def _worker(dtype: str) -> dict[str, Any]:
    import tensorflow as tf

    import ste

    from ._timing import alternate, summarize
    from ._variants import make_custom_gradient, make_ste

    def step(op: Any, computed: bool, setting: bool | None) -> Any:
        @tf.function(autograph=False)
        def run(x: tf.Tensor, dy: tf.Tensor) -> Any:
            with ste.bit_masks(setting), tf.GradientTape() as tape:
                tape.watch(x)
                y = op(x * tf.constant(1.0001, x.dtype) if computed else x)
            return y, tape.gradient(y, x, output_gradients=dy)

        return run

    out: dict[str, Any] = {}
    for size in SIZES:
        generator = tf.random.Generator.from_seed(3)
        x = tf.cast(generator.normal([size], stddev=1.5), dtype)
        dy = tf.cast(generator.normal([size]), dtype)
        inner = max(1, min(50, 2**18 // size * 3))
        for computed in (False, True):
            steps = {
                "custom_gradient": step(make_custom_gradient("straight_through"), computed, None),
                "ste, bits off": step(make_ste("straight_through"), computed, False),
                "ste, bits": step(make_ste("straight_through"), computed, True),
                "ste": step(make_ste("straight_through"), computed, None),
            }
            cases = {name: (lambda s=s, x=x, dy=dy: s(x, dy)) for name, s in steps.items()}
            summary = summarize(alternate(cases, rounds=12, inner=inner, warmup=2), "custom_gradient")
            key = f"{'computed' if computed else 'input'} {size}"
            out[key] = {name: {"ratio": s["ratio"], "median_s": s["median_s"]} for name, s in summary.items()}
    return out


def main(argv: list[str]) -> None:
    if argv and argv[0] == "--worker":
        print("RESULT " + json.dumps(_worker(argv[1])), flush=True)
        return
    rounds = int(argv[0]) if argv else 4
    dtype = argv[1] if len(argv) > 1 else "float32"
    from ._subprocess import parse_result
    from ._timing import load_average

    runs, loads = [], []
    for _ in range(rounds):
        loads.append(load_average()[0])
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.packing_rule", "--worker", dtype],
            capture_output=True,
            text=True,
            env=dict(os.environ),
            check=True,
            timeout=1800,
        )
        runs.append(parse_result(done.stdout))
    table: dict[str, Any] = {}
    print(f"{dtype}, {rounds} processes, 1-min load before each: {loads}")
    print("| placement | elements | custom_gradient µs | ste, bits off | ste, bits | ste (default) |")
    print("|---|---|---|---|---|---|")
    for key in runs[0]:
        row = {}
        for name in VARIANTS:
            ratios = [run[key][name]["ratio"] for run in runs]
            row[name] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
        base = statistics.median(run[key]["custom_gradient"]["median_s"] for run in runs) * 1e6
        row["custom_gradient_us"] = base
        table[key] = row
        placement, size = key.split()
        cells = [f"{row[name]['median']:.2f}× ({row[name]['min']:.2f}–{row[name]['max']:.2f})" for name in VARIANTS[1:]]
        print(f"| {placement} | {int(size):,} | {base:.0f} | " + " | ".join(cells) + " |")
    print("RESULT " + json.dumps({"dtype": dtype, "rounds": rounds, "load_before": loads, "table": table}))


if __name__ == "__main__":
    main(sys.argv[1:])
