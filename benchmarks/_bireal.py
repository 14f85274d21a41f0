"""The Bi-Real-like residual network and training step shared by ``binary_net`` (Keras 3, ste) and ``larq_net``
(tf-keras, larq, in another venv): this module imports neither, so both can use it.

``keras`` is the Keras module to build with, ``conv(width)`` makes each block's convolution (a binary one, or a
float ``Conv2D`` for the float network).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

__all__ = ["build", "median_steps", "peak_step_bytes", "train_step"]


def build(
    keras: Any,
    conv: Callable[[int], Any] | None,
    blocks: int,
    width: int,
    size: int,
    norm: Callable[[], Any] | None = None,
) -> Any:
    """Float stem conv + batch norm, ``blocks`` × ``h + BatchNorm(conv(h))``, global pooling, a 10-way dense head;
    ``norm()`` makes each batch norm (``keras.layers.BatchNormalization`` by default)."""
    norm = norm or keras.layers.BatchNormalization
    keras.utils.set_random_seed(13)
    inputs = keras.Input((size, size, 3))
    h = keras.layers.Conv2D(width, 3, padding="same", use_bias=False)(inputs)
    h = norm()(h)
    for _ in range(blocks):
        layer = keras.layers.Conv2D(width, 3, padding="same", use_bias=False) if conv is None else conv(width)
        h = keras.layers.Add()([h, norm()(layer(h))])
    h = keras.layers.GlobalAveragePooling2D()(h)
    return keras.Model(inputs, keras.layers.Dense(10)(h))


def train_step(keras: Any, model: Any, jit_compile: bool = False) -> Callable[[tf.Tensor, tf.Tensor], tf.Tensor]:
    """One ``tf.function`` Adam step: forward, loss, gradients, update (and the kernels' constraints)."""
    optimizer = keras.optimizers.Adam(1e-3)
    optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function(jit_compile=jit_compile)
    def step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step  # type: ignore[return-value]


def peak_step_bytes(step: Callable[[tf.Tensor, tf.Tensor], tf.Tensor], x: tf.Tensor, y: tf.Tensor) -> int:
    """Bytes TensorFlow's CPU allocator peak rises above what is in use before one step."""
    tf.config.experimental.reset_memory_stats("CPU:0")
    before = tf.config.experimental.get_memory_info("CPU:0")["current"]
    step(x, y).numpy()
    return int(tf.config.experimental.get_memory_info("CPU:0")["peak"] - before)


def median_steps(steps: Mapping[str, Callable[[], Any]], rounds: int, warmup: int = 2) -> dict[str, float]:
    """Median seconds of one step of each network over ``rounds`` rounds after ``warmup`` untimed ones; each round
    runs every network once, in an order that reverses every round (both sides of the larq comparison time their
    networks this way, each in its own process)."""
    times: dict[str, list[float]] = {kind: [] for kind in steps}
    for index in range(rounds + warmup):
        for kind in list(steps)[:: 1 if index % 2 else -1]:
            start = time.perf_counter()
            steps[kind]()
            if index >= warmup:
                times[kind].append(time.perf_counter() - start)
    return {kind: statistics.median(values) for kind, values in times.items()}
