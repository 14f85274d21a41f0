"""Item 3: first-call trace time and retracing.

* Retracing: a ``tf.function`` that applies the op is called ``calls`` times with fresh tensors of one shape and the
  same hyperparameters; the number of traces is counted (a Python counter run only while tracing, and
  ``experimental_get_tracing_count``). A second function calls the op ``calls`` times inside one trace and counts how
  many custom-gradient ops ``ste`` compiled for it (its per-op cache should hold one).
* First call: a fresh op in a fresh ``tf.function``; the time of the first call (trace + graph build + first run),
  median over alternating repetitions.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import tensorflow as tf

import ste

from ._timing import load_average
from ._variants import make_custom_gradient, make_ste, sign

__all__ = ["run"]


def _retrace(make: Any, calls: int, size: int, hyper: dict[str, Any]) -> dict[str, int]:
    op = make()
    traces = [0]

    @tf.function(autograph=False)
    def step(x: tf.Tensor) -> tf.Tensor:
        traces[0] += 1
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = op(x, **hyper)
        return tape.gradient(y, x)

    for index in range(calls):
        step(tf.fill([size], float(index % 7) - 3.0))
    return {"calls": calls, "python_traces": traces[0], "tracing_count": int(step.experimental_get_tracing_count())}


def _shifted() -> Any:
    def shifted_sign(x: tf.Tensor, shift: float = 0.0) -> tf.Tensor:
        return sign(x - shift)

    return ste.forward(shifted_sign).backward("straight_through")


def _inner_calls(calls: int, size: int) -> dict[str, int]:
    op = _shifted()

    @tf.function(autograph=False)
    def many(x: tf.Tensor) -> tf.Tensor:
        y = x
        for _ in range(calls):
            y = op(y, shift=0.5)
        return y

    many.get_concrete_function(tf.TensorSpec([size], tf.float32))
    cache = getattr(op, "_cache", None)
    return {"calls_in_one_trace": calls, "compiled_ops_cached": len(cache) if cache is not None else -1}


def _first_call(make: Any, size: int) -> float:
    op = make()
    x = tf.random.stateless_normal([size], seed=(4, 6))

    @tf.function(autograph=False)
    def step(x: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = op(x)
        return tape.gradient(y, x)

    start = time.perf_counter()
    step(x)
    return time.perf_counter() - start


def run(calls: int, size: int, repeats: int, rule: str = "straight_through") -> dict[str, Any]:
    makers = {"custom_gradient": lambda: make_custom_gradient(rule), "ste": lambda: make_ste(rule)}
    load_before = load_average()
    retrace = {name: _retrace(make, calls, size, {}) for name, make in makers.items()}
    # ste only: a hyperparameter passed by keyword at every call (a raw custom_gradient cannot take keywords).
    retrace["ste, shift=0.5 by keyword at each call"] = _retrace(_shifted, calls, size, {"shift": 0.5})
    first: dict[str, list[float]] = {name: [] for name in makers}
    for index in range(repeats):
        order = list(makers) if index % 2 == 0 else list(reversed(makers))
        for name in order:
            first[name].append(_first_call(makers[name], size))
    base = statistics.median(first["custom_gradient"])
    return {
        "rule": rule,
        "size": size,
        "load_before": load_before,
        "retracing": retrace,
        "inner_calls": _inner_calls(min(calls, 200), size),
        "first_call": {
            name: {
                "median_s": statistics.median(values),
                "ratio": statistics.median(values) / base,
                "samples": len(values),
            }
            for name, values in first.items()
        },
    }
