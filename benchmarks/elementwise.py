"""Item 1: an elementwise quantizer's forward + backward, in ``tf.function`` with and without ``jit_compile``.

Every variant of one (rule, dtype, compiler) cell gets the same input and upstream gradient, runs in the same
process, and is timed in alternating rounds (see ``_timing.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from ._timing import alternate, load_average, summarize
from ._variants import RULES, VARIANTS, make_op, ste_rule_description

__all__ = ["run"]

DTYPES = ("float32", "float16", "bfloat16")
LARQ_NOTE = (
    "larq not run: it cannot be installed alongside Keras 3 (`import larq` fails on Keras 3 / TF >= 2.16; it needs "
    "TF_USE_LEGACY_KERAS=1 and tf-keras), and adding it as a dependency is out of scope."
)


def _step(op: Callable[[tf.Tensor], tf.Tensor], jit: bool) -> Any:
    @tf.function(jit_compile=jit, autograph=False, reduce_retracing=False)
    def step(x: tf.Tensor, dy: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = op(x)
        return y, tape.gradient(y, x, output_gradients=dy)

    return step


def run(
    size: int,
    rounds: int,
    inner: int,
    dtypes: tuple[str, ...] = DTYPES,
    rules: tuple[str, ...] = RULES,
    warmup: int = 2,
) -> dict[str, Any]:
    """Time every variant of every (rule, dtype, jit) cell; returns JSON-ready results."""
    generator = tf.random.Generator.from_seed(6)
    base_x = generator.normal([size], stddev=1.5)
    base_dy = generator.normal([size])
    cells = []
    for dtype in dtypes:
        x = tf.cast(base_x, dtype)
        dy = tf.cast(base_dy, dtype)
        for jit in (False, True):
            for rule in rules:
                steps = {variant: _step(make_op(variant, rule), jit) for variant in VARIANTS}
                cases = {variant: (lambda s=step, x=x, dy=dy: s(x, dy)) for variant, step in steps.items()}
                load_before = load_average()
                samples = alternate(cases, rounds=rounds, inner=inner, warmup=warmup)
                cells.append(
                    {
                        "rule": rule,
                        "dtype": dtype,
                        "jit_compile": jit,
                        "ste_rule": ste_rule_description(rule),
                        "load_before": load_before,
                        "results": summarize(samples, "custom_gradient"),
                    }
                )
    return {
        "size": size,
        "rounds": rounds,
        "inner": inner,
        "baseline": "custom_gradient",
        "larq": LARQ_NOTE,
        "cells": cells,
    }
