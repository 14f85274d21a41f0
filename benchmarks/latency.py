"""Item 2: eager call latency on a small tensor (the DSL's Python overhead per call).

Two measurements per variant on a 1,000-element float32 tensor: a forward call, and a forward + backward under a
``tf.GradientTape``. The baseline is the hand-written ``tf.custom_gradient``; a second, independently built copy of
it (A/A) shows the measurement noise; ``tf.sign`` (no custom gradient) shows the floor.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from ._timing import alternate, load_average, summarize
from ._variants import make_custom_gradient, make_ste, sign

__all__ = ["run"]


def run(size: int, rounds: int, inner: int, rule: str = "straight_through", warmup: int = 2) -> dict[str, Any]:
    x = tf.random.stateless_normal([size], seed=(2, 6))
    dy = tf.random.stateless_normal([size], seed=(3, 6))
    ops = {
        "custom_gradient": make_custom_gradient(rule),
        "ste": make_ste(rule),
        "custom_gradient copy (A/A)": make_custom_gradient(rule),
        "tf.sign (no custom gradient)": sign,
    }

    def forward(op: Any) -> Any:
        return lambda: op(x)

    def forward_backward(op: Any) -> Any:
        def call() -> Any:
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = op(x)
            return tape.gradient(y, x, output_gradients=dy)

        return call

    out: dict[str, Any] = {"size": size, "rounds": rounds, "inner": inner, "rule": rule, "baseline": "custom_gradient"}
    for name, make in (("forward", forward), ("forward_backward", forward_backward)):
        load_before = load_average()
        samples = alternate(
            {variant: make(op) for variant, op in ops.items()}, rounds=rounds, inner=inner, warmup=warmup
        )
        out[name] = {"load_before": load_before, "results": summarize(samples, "custom_gradient")}
    return out
