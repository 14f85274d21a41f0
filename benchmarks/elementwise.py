"""Item 1: an elementwise quantizer's forward + backward, in ``tf.function`` with and without ``jit_compile``.

Every variant of one (rule, dtype, compiler) cell gets the same input and upstream gradient, runs in the same
process, and is timed in alternating rounds (see ``_timing.py``). ste runs twice: with ``ste.bit_masks(False)``
(``ste_bits_off``: it keeps its float input, as in ste 0.1) and by default (``ste``: a mask-only rule keeps a
bit-packed mask, 1/32 of a float32 input, and pays for packing and unpacking it). Besides timings, each cell records
whether the traced graph of the ``ste_bits_off`` step equals the hand-written one up to node names, and (with
``jit_compile``) whether XLA's optimized HLO is the same: where it is, a timing difference can only be measurement
noise.
"""

from __future__ import annotations

import hashlib
import re
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


def _graph_signature(step: Any, x: tf.Tensor, dy: tf.Tensor) -> list[str]:
    """The traced graph up to node names: one structural hash per op (its type, attributes and, recursively,
    its inputs), sorted. Two steps with equal signatures run the same computation."""
    graph = step.get_concrete_function(x, dy).graph
    memo: dict[str, str] = {}

    def signature(op: Any) -> str:
        found = memo.get(op.name)
        if found is None:
            attrs = sorted(
                (key, value.SerializeToString()) for key, value in op.node_def.attr.items() if not key.startswith("_")
            )
            parts = [op.type, repr(attrs)]
            parts += [f"{signature(t.op)}:{t.value_index}" for t in op.inputs]
            parts += sorted(signature(c) for c in op.control_inputs)
            found = hashlib.sha256("|".join(parts).encode()).hexdigest()
            memo[op.name] = found
        return found

    return sorted(signature(op) for op in graph.get_operations())


def _normalized_hlo(step: Any, x: tf.Tensor, dy: tf.Tensor) -> str:
    """XLA's optimized HLO of the step with names and metadata removed."""
    text = step.experimental_get_compiler_ir(x, dy)(stage="optimized_hlo")
    text = re.sub(r", metadata=\{[^}]*\}", "", text)
    text = re.sub(r"%[\w.\-]+", "%v", text)
    return re.sub(r"HloModule \S+", "HloModule m", text)


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
                compared = ("custom_gradient", "ste_bits_off")
                graphs = {variant: _graph_signature(steps[variant], x, dy) for variant in compared}
                same_hlo = None
                if jit:
                    hlo = {variant: _normalized_hlo(steps[variant], x, dy) for variant in compared}
                    same_hlo = hlo["ste_bits_off"] == hlo["custom_gradient"]
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
                        "graph_ops": len(graphs["ste_bits_off"]),
                        "ste_graph_same_as_custom_gradient": graphs["ste_bits_off"] == graphs["custom_gradient"],
                        "ste_hlo_same_as_custom_gradient": same_hlo,
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
