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

import larq as lq
import tensorflow as tf

keras = tf.keras


def build(kind: str, blocks: int, width: int, size: int) -> Any:
    tf.keras.utils.set_random_seed(13)
    inputs = keras.Input((size, size, 3))
    h = keras.layers.Conv2D(width, 3, padding="same", use_bias=False)(inputs)
    h = keras.layers.BatchNormalization()(h)
    for _ in range(blocks):
        if kind == "float":
            conv = keras.layers.Conv2D(width, 3, padding="same", use_bias=False)
        else:
            conv = lq.layers.QuantConv2D(
                width,
                3,
                padding="same",
                use_bias=False,
                input_quantizer="ste_sign",
                kernel_quantizer="ste_sign",
                kernel_constraint="weight_clip",
            )
        h = keras.layers.Add()([h, keras.layers.BatchNormalization()(conv(h))])
    h = keras.layers.GlobalAveragePooling2D()(h)
    return keras.Model(inputs, keras.layers.Dense(10)(h))


def train_step(model: Any) -> Any:
    optimizer = keras.optimizers.Adam(1e-3)
    optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


def main(batch: int, blocks: int, width: int, size: int, rounds: int) -> dict[str, Any]:
    x = tf.random.stateless_uniform([batch, size, size, 3], seed=(13, 1), minval=-1.0, maxval=1.0)
    y = tf.random.stateless_uniform([batch], seed=(13, 2), maxval=10, dtype=tf.int32)
    steps = {kind: train_step(build(kind, blocks, width, size)) for kind in ("float", "larq")}
    peaks = {}
    for kind, step in steps.items():
        step(x, y)
        tf.config.experimental.reset_memory_stats("CPU:0")
        before = tf.config.experimental.get_memory_info("CPU:0")["current"]
        step(x, y).numpy()
        peaks[kind] = int(tf.config.experimental.get_memory_info("CPU:0")["peak"] - before)
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
