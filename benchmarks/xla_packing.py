"""Under XLA: the binarized residual net's training step with each spelling of the bit packing, side by side.

``python -m benchmarks.xla_packing [rounds]`` builds the network of ``binary_net`` once per variant (same initial
weights), each traced with ``jit_compile=True``, and times them in alternating rounds (``_timing.alternate``, 2 steps
per sample), as ratios to ``plain`` (``ste.bit_masks(False)``):

* ``sum``: ste's packing under XLA (``tf.reduce_sum`` of the 8 weighted bits, which XLA keeps in ``uint32``);
* ``or_uint8``: the same bytes by an ``XlaReduce`` or-ing the weighted bits in ``uint8`` (ste's spelling for a while:
  faster on an isolated op, slower in this network, see docs/performance.md);
* ``sum, no pins``: the sum with the control dependencies that order ops for TensorFlow's executor removed
  (``after_kept``, the unpacking after the upstream gradient, the layers' ``_after``): what they cost under XLA.

The variants are patched in while tracing only; the gradients are the same in all of them (tests/test_bit_masks.py).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

import keras
import tensorflow as tf

import ste
import ste._core._compile as compile_
import ste._core._rules as rules
import ste.layers._base as layers_base

from ._bireal import build, train_step
from ._timing import alternate, load_average, summarize
from .binary_net import _conv

__all__ = ["run"]


def _or_uint8(weighted: tf.Tensor) -> tf.Tensor:
    """The ``[bytes, 8]`` weighted bits or-ed along the last axis by an XLA reduction in ``uint8``."""
    from tensorflow.compiler.tf2xla.python import xla

    reducer = tf.function(tf.bitwise.bitwise_or, autograph=False).get_concrete_function(
        tf.TensorSpec([], tf.uint8), tf.TensorSpec([], tf.uint8)
    )
    return xla.reduce(weighted, tf.constant(0, tf.uint8), [1], reducer)


def _packer(reduce: Callable[[tf.Tensor], tf.Tensor]) -> Callable[[tf.Tensor], tf.Tensor]:
    """``ste._core._bitmask.pack_bits`` for a traced XLA function, with ``reduce`` instead of the sum."""

    def pack(mask: tf.Tensor) -> tf.Tensor:
        flat = tf.reshape(tf.cast(mask, tf.uint8), [-1])  # the benchmark's sizes are multiples of 8
        return reduce(tf.reshape(flat, [-1, 8]) * tf.constant((128, 64, 32, 16, 8, 4, 2, 1), tf.uint8))

    return pack


@contextlib.contextmanager
def _patched(module: Any, **attributes: Any) -> Iterator[None]:
    saved = {name: getattr(module, name) for name in attributes}
    for name, value in attributes.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


@contextlib.contextmanager
def _variant(name: str) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        stack.enter_context(ste.bit_masks(False if name == "plain" else None))
        if name == "or_uint8":
            pack = _packer(_or_uint8)
            stack.enter_context(_patched(rules, pack_bits=pack))
            stack.enter_context(_patched(layers_base, pack_bits=pack))
        if name == "sum, no pins":
            stack.enter_context(_patched(compile_, after_kept=lambda xs, saved: xs))
            stack.enter_context(_patched(rules, _after=lambda dy, packed: packed.bits))
            stack.enter_context(_patched(layers_base, after=lambda tensor, first: tensor))
        yield


def run(rounds: int = 16, batch: int = 64, blocks: int = 8, width: int = 32, size: int = 32) -> dict[str, Any]:
    x = tf.random.stateless_uniform([batch, size, size, 3], seed=(13, 1), minval=-1.0, maxval=1.0)
    y = tf.random.stateless_uniform([batch], seed=(13, 2), maxval=10, dtype=tf.int32)
    steps = {}
    for name in ("plain", "sum", "or_uint8", "sum, no pins"):
        with _variant(name):
            step = train_step(keras, build(keras, _conv, blocks=blocks, width=width, size=size), True)
            step(x, y)  # traced (and compiled) inside the patch
        steps[name] = step
    load = load_average()
    samples = alternate({k: (lambda s=s: s(x, y)) for k, s in steps.items()}, rounds=rounds, inner=2)
    results = summarize(samples, "plain")
    return {
        "load_before": load,
        "load_after": load_average(),
        "ms_per_step": {k: round(v["median_s"] * 1e3, 2) for k, v in results.items()},
        "ratio": {k: round(v["ratio"], 4) for k, v in results.items()},
    }


if __name__ == "__main__":
    print(json.dumps(run(*(int(a) for a in sys.argv[1:2])), indent=1))
