"""Cost of two MultiWorkerMirroredStrategy workers against one process, on the same machine.

    python -m benchmarks.distributed            # 3 alternating rounds of: 1 process, 2 workers on 127.0.0.1
    python -m benchmarks.distributed --smoke    # one short round (checks that it runs)

Both runs train the same binarized conv net (ste.layers QuantConv2D with ste_sign, synchronized batch norm,
CaseOptimizer(Bop, Adam), flip-ratio metrics) with Keras ``fit`` on the same global batch. On one machine the two
workers share its cores, so the ratio is the overhead of the collectives (gRPC all-reduce over 127.0.0.1, one
process's work split in two), not a speed-up. The bytes all-reduced per step are counted from the model: every
trainable variable's gradient (the binary kernels' too: they are all-reduced as float32 latent weights, as larq
does under tf.distribute; Bop then updates every replica's copy identically), plus the synchronized batch norm's
per-channel sum, sum of squares and count (keras.src.backend.tensorflow.nn._compute_moments_sync), plus the
loss and metric results of the logs.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _net(width: int) -> Any:
    import keras

    import ste

    keras.utils.set_random_seed(0)
    binary = dict(kernel_quantizer="ste_sign", kernel_constraint="weight_clip", metrics=["flip_ratio"])
    return keras.Sequential(
        [
            keras.Input((16, 16, 3)),
            ste.layers.QuantConv2D(width, 3, padding="same", use_bias=False, name="conv1", **binary),
            ste.layers.BatchNormalization(synchronized=True, name="bn1"),
            ste.layers.QuantConv2D(width, 3, padding="same", use_bias=False, input_quantizer="ste_sign", **binary),
            ste.layers.BatchNormalization(synchronized=True, name="bn2"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(10, name="head"),
        ]
    )


def _bytes_per_step(model: Any) -> dict[str, int]:
    import numpy as np

    gradients = sum(int(np.prod(v.shape)) * 4 for v in model.trainable_variables)
    binary = sum(
        int(np.prod(v.shape)) * 4 for v in model.trainable_variables if "conv" in v.path and "kernel" in v.path
    )
    bn = sum((2 * int(layer.gamma.shape[0]) + 1) * 4 for layer in model.layers if getattr(layer, "synchronized", False))
    logs = 4 * (1 + sum(1 for layer in model.layers if getattr(layer, "_flip_ratios", None)))
    return {"gradients": gradients, "binary_kernels_as_float": binary, "batch_norm_moments": bn, "logs": logs}


def child(steps: int, global_batch: int, width: int) -> None:
    """One process (no TF_CONFIG) or one worker: fit, then print RESULT with the median step time."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import numpy as np
    import tensorflow as tf

    import ste

    strategy = tf.distribute.MultiWorkerMirroredStrategy() if "TF_CONFIG" in os.environ else None
    scope = strategy.scope() if strategy is not None else tf.distribute.get_strategy().scope()
    with scope:
        model = _net(width)
        bop = ste.optimizers.Bop(threshold=1e-6, gamma=1e-3)
        optimizer = ste.optimizers.CaseOptimizer(
            (ste.optimizers.Bop.is_binary_variable, bop), default_optimizer=keras.optimizers.Adam(1e-3)
        )
        model.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    n = global_batch * steps
    x = rng.normal(size=(n, 16, 16, 3)).astype(np.float32)
    y = rng.integers(0, 10, n).astype(np.int32)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch).with_options(options)

    class Times(keras.callbacks.Callback):  # type: ignore[misc]
        def on_train_begin(self, logs: Any = None) -> None:
            self.ends: list[float] = []

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.ends.append(time.perf_counter())

    times = Times()
    model.fit(data, epochs=2, verbose=0, callbacks=[times])  # epoch 1 traces; epoch 2 is timed
    second = np.diff(times.ends[steps - 1 :])
    print("RESULT " + json.dumps({"step_ms": float(np.median(second)) * 1e3, "bytes": _bytes_per_step(model)}))


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env.update(PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="", **extra)
    return env


def _run(workers: int, args: list[str], timeout: float) -> list[dict[str, Any]]:
    argv = [sys.executable, "-m", "benchmarks.distributed", "--child", *args]
    if workers == 1:
        configs = [None]
    else:
        cluster = {"worker": [f"127.0.0.1:{p}" for p in _free_ports(workers)]}
        configs = [json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}) for i in range(workers)]
    procs = [
        subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True, env=_env(**({"TF_CONFIG": c} if c else {})))
        for c in configs
    ]
    results = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
        line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")][-1]
        results.append(json.loads(line[len("RESULT ") :]))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=64)
    options = parser.parse_args()
    if options.child:
        child(options.steps, options.batch, options.width)
        return
    if options.smoke:
        options.rounds, options.steps, options.batch, options.width = 1, 4, 8, 8
    args = ["--steps", str(options.steps), "--batch", str(options.batch), "--width", str(options.width)]
    rows = []
    for _ in range(options.rounds):  # alternating, so that a change of load hits both
        single = _run(1, args, 600)[0]
        pair = _run(2, args, 600)
        rows.append({"one_ms": single["step_ms"], "two_ms": max(r["step_ms"] for r in pair), "bytes": single["bytes"]})
    load = os.getloadavg()
    for row in rows:
        ratio = row["two_ms"] / row["one_ms"]
        print(f"1 process {row['one_ms']:.1f} ms/step, 2 workers {row['two_ms']:.1f} ms/step: {ratio:.2f}x")
    ratios = sorted(r["two_ms"] / r["one_ms"] for r in rows)
    bytes_ = rows[0]["bytes"]
    print(f"median ratio 2 workers / 1 process: {ratios[len(ratios) // 2]:.2f}x (load {load[0]:.1f} {load[1]:.1f})")
    total = bytes_["gradients"] + bytes_["batch_norm_moments"] + bytes_["logs"]  # binary kernels: in the gradients
    print(f"all-reduced per step (bytes): {bytes_}; {total} in all")
    print(json.dumps({"rows": rows, "load": load}))


if __name__ == "__main__":
    main()
