"""Convolutional spiking layers: ``ste.spiking.TimeDistributed`` (time folded into the batch) against Keras 3's
``keras.layers.TimeDistributed`` (one call per step), forward + backward, side by side.

The network of the convolutional spiking benchmark: 2 spiking conv layers on 16×16 inputs, 25 steps, batch 16:
Conv2D(8, 3) → LIF → AvgPool(2) → Conv2D(16, 3) → LIF → Flatten → Dense(10) → LIF, one ``tape.gradient`` of the
spike count with respect to every weight, in ``tf.function``. The two variants share the same layers and weights
and differ only in the wrapper; a second copy of the Keras variant gives the A/A noise floor.

    python -m benchmarks.spiking_conv [--smoke]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

import ste

from ._timing import LoadSampler, alternate, load_average, summarize

__all__ = ["run"]


def _network(
    wrap: Callable[[keras.layers.Layer], keras.layers.Layer], layers: list[keras.layers.Layer], steps: int
) -> Any:
    conv1, pool, conv2, flatten, dense = layers
    return keras.Sequential(
        [
            keras.Input((steps, 16, 16, 2)),  # a static time axis: Keras's wrapper then loops over the steps
            wrap(conv1),
            ste.spiking.LIF(beta=0.9),
            wrap(pool),
            wrap(conv2),
            ste.spiking.LIF(beta=0.9),
            wrap(flatten),
            dense,
            ste.spiking.LIF(beta=0.9),
        ]
    )


def run(smoke: bool = False) -> dict[str, Any]:
    steps, batch = (5, 4) if smoke else (25, 16)
    keras.utils.set_random_seed(0)
    shared = [
        keras.layers.Conv2D(8, 3, padding="same"),
        keras.layers.AveragePooling2D(2),
        keras.layers.Conv2D(16, 3, padding="same"),
        keras.layers.Flatten(),
        keras.layers.Dense(10),
    ]
    x = tf.constant((np.random.default_rng(0).random((batch, steps, 16, 16, 2)) < 0.2).astype("float32"))

    def step_fn(model: Any, data: tf.Tensor) -> Callable[[], object]:
        @tf.function
        def train_step(inputs: tf.Tensor) -> list[tf.Tensor]:
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(model(inputs))
            return tape.gradient(loss, model.trainable_weights)

        return lambda: [g.numpy() for g in train_step(data)]  # every gradient computed and fetched

    folded = _network(ste.spiking.TimeDistributed, shared, steps)
    looped = _network(keras.layers.TimeDistributed, shared, steps)
    cases = {
        "keras.layers.TimeDistributed (per step)": step_fn(looped, x),
        "ste.spiking.TimeDistributed (folded)": step_fn(folded, x),
        "keras.layers.TimeDistributed, second copy": step_fn(looped, x),
    }
    for case in cases.values():
        case()
    with LoadSampler() as load:
        samples = alternate(cases, rounds=3 if smoke else 15, inner=1 if smoke else 3)
    return {
        "config": {"steps": steps, "batch": batch, "frame": [16, 16, 2]},
        "load_1min": load.summary(),
        "load_at_end": load_average(),
        "results": summarize(samples, "keras.layers.TimeDistributed (per step)"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    result = run(parser.parse_args().smoke)
    for name, row in result["results"].items():
        row.pop("per_round_s")
        print(f"{name:45s} median {row['median_s'] * 1e3:8.1f} ms  ratio {row['ratio']:.2f}")
    print(json.dumps({k: v for k, v in result.items() if k != "results"}))


if __name__ == "__main__":
    main()
