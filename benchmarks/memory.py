"""Item 5: peak memory of the backward pass through a chain of 50 ops on one large tensor.

A rule that does not use its input (``identity``, ``zero``) must not keep the forward's input alive. Each chain is
run forward and backward (``tape.gradient``) in eager mode and inside ``tf.function``. Chains:

* ``tf.identity`` (the reference of the target) and ``ste.forward(tf.identity)`` with the ``identity`` and ``zero``
  rules, and the hand-written ``tf.custom_gradient`` equivalent. Identity forwards share one buffer, so these show
  what the backward pass adds.
* Chains with an elementwise op between the quantizers (``y·0.999``, a bias add, Keras ``Rescaling``), whose
  backward products Grappler regroups: ``straight_through`` with bit masks off, by default, and hand-written.
* An allocating forward, ``sign``, whose every output is a new tensor: with ``ste``'s ``identity`` rule, with a
  hand-written ``tf.custom_gradient`` identity rule, with TensorFlow's own gradient of its ops, and with
  ``straight_through`` (which needs its input, so keeps one tensor per op: the upper bound).

Measure: the TensorFlow CPU allocator's peak (``tf.config.experimental.get_memory_info("CPU:0")["peak"]`` after
``reset_memory_stats``; supported on CPU in TF 2.21): exact for tensors, blind to Python objects and XLA scratch.
Reported as a multiple of the input tensor's size. In a full run every chain also runs in a fresh process (per chain
and mode) that reports, besides the allocator's peak, the growth of its resident set across the
measured call: the peak resident set (Linux ``VmHWM``, reset through ``/proc/self/clear_refs`` right before the
call) minus the resident set before it, with glibc's mmap threshold fixed at 128 KiB so that freed tensors leave
the resident set. (``ru_maxrss`` is no use here: a child process inherits its parent's high-water mark.)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

import ste

from ._allocator import environment
from ._subprocess import result_of
from ._variants import bits_off, sign

__all__ = ["CHAINS", "run"]

Op = Callable[[tf.Tensor], tf.Tensor]


def _custom_identity(forward: Op) -> Op:
    @tf.custom_gradient
    def op(x: tf.Tensor) -> Any:
        return forward(x), lambda dy: dy

    return op


def _tf_sign(x: tf.Tensor) -> tf.Tensor:
    return sign(x)


def _channels(op: Op, channels: int) -> Op:
    """``op`` applied to the flat input seen as ``[-1, channels]`` (a per-channel scale is then one per channel, not
    one per element as on a rank-1 tensor); reshapes copy nothing."""
    return lambda x: tf.reshape(op(tf.reshape(x, [-1, channels])), tf.shape(x))


CHAINS: dict[str, Callable[[], Op]] = {
    "tf.identity": lambda: tf.identity,
    "ste identity(tf.identity), rule identity": lambda: ste.forward(tf.identity).backward("identity"),
    "ste identity(tf.identity), rule zero": lambda: ste.forward(tf.identity).backward("zero"),
    "custom_gradient tf.identity, grad dy": lambda: _custom_identity(tf.identity),
    "sign, TensorFlow's gradient": lambda: _tf_sign,
    "ste sign, rule identity": lambda: ste.forward(sign).backward("identity"),
    "custom_gradient sign, grad dy": lambda: _custom_identity(sign),
    "ste sign, rule straight_through, bit masks off (keeps inputs)": lambda: bits_off(
        ste.forward(sign).backward("straight_through")
    ),
    "ste sign, rule straight_through (keeps a bit mask)": lambda: ste.forward(sign).backward("straight_through"),
}
# Quantizers whose rules are hand-written with ste.mask_rule: each with bit masks off and on.
QUANTIZER_CHAINS: dict[str, Callable[[], Op]] = {
    "DoReFa(bits=2) activations": lambda: ste.quantizers.DoReFa(bits=2),
    "Uniform(bits=8)": lambda: ste.quantizers.Uniform(bits=8),
    "MagnitudeAwareSign, 64 channels": lambda: _channels(ste.quantizers.MagnitudeAwareSign(), 64),
}
for _name, _make in QUANTIZER_CHAINS.items():
    CHAINS[f"{_name}, bit masks off (keeps inputs)"] = lambda make=_make: bits_off(make())
    CHAINS[f"{_name} (keeps a bit mask)"] = _make


def _custom_straight_through(x: tf.Tensor) -> tf.Tensor:
    """A hand-written ``tf.custom_gradient`` sign with the ``straight_through`` gradient (keeps its input)."""

    @tf.custom_gradient
    def op(x: tf.Tensor) -> Any:
        return sign(x), lambda dy: dy * tf.cast(tf.abs(x) <= 1.0, dy.dtype)

    return op(x)  # type: ignore[no-any-return]


def _bias_add() -> Op:
    bias = tf.fill([64], 0.001)
    return _channels(lambda y: tf.nn.bias_add(y, bias), 64)


# Elementwise ops between the quantizers: Grappler regroups the backward products of such chains.
BETWEEN: dict[str, Callable[[], Op]] = {
    "y·0.999": lambda: lambda y: y * 0.999,
    "bias add": _bias_add,
    "keras Rescaling(0.999, offset=0.001)": lambda: keras.layers.Rescaling(0.999, offset=0.001),
}
BETWEEN_VARIANTS: dict[str, Callable[[], Op]] = {
    "bit masks off (keeps inputs)": lambda: bits_off(ste.forward(sign).backward("straight_through")),
    "custom_gradient": lambda: _custom_straight_through,
    "ste default (keeps a bit mask)": lambda: ste.forward(sign).backward("straight_through"),
}


def _then(make_op: Callable[[], Op], make_between: Callable[[], Op]) -> Op:
    op, between = make_op(), make_between()
    return lambda y: between(op(y))


def _between_name(between: str, variant: str) -> str:
    return f"straight_through sign then {between}, {variant}"


for _between, _make_between in BETWEEN.items():
    for _variant, _make_variant in BETWEEN_VARIANTS.items():
        CHAINS[_between_name(_between, _variant)] = lambda o=_make_variant, b=_make_between: _then(o, b)
MASK_PLAIN = "ste sign, rule straight_through, bit masks off (keeps inputs)"
MASK_LEAN = "ste sign, rule straight_through (keeps a bit mask)"
REFERENCE = "tf.identity"
TARGET = "ste identity(tf.identity), rule identity"


def _chain_fn(op: Op, length: int, mode: str) -> Callable[[tf.Tensor], tf.Tensor]:
    def chain(x: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = x
            for _ in range(length):
                y = op(y)
        return tape.gradient(y, x)

    if mode == "function":
        return tf.function(chain, autograph=False)
    return chain


def _measure(name: str, mode: str, size: int, length: int) -> dict[str, float]:
    """Allocator peak and ru_maxrss growth of one forward+backward, in multiples of the input's size."""
    x = tf.random.stateless_normal([size], seed=(8, 6))
    nbytes = size * x.dtype.size
    fn = _chain_fn(CHAINS[name](), length, mode)
    if mode == "function":
        fn.get_concrete_function(x)  # type: ignore[attr-defined]
    rss_before = _reset_peak_rss()
    tf.config.experimental.reset_memory_stats("CPU:0")
    grad = fn(x)
    peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
    rss_peak = _peak_rss()
    del grad
    result = {"allocator_peak": peak / nbytes}
    if rss_before is not None and rss_peak is not None:
        result["rss_growth"] = (rss_peak - rss_before) / nbytes
    return result


def _status(field: str) -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_peak_rss() -> int | None:
    """Reset the peak resident set (Linux >= 4.0) and return the current one; None where unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
    except OSError:
        return None
    return _status("VmRSS")


def _peak_rss() -> int | None:
    return _status("VmHWM")


def _child(name: str, mode: str, size: int, length: int, **extra_env: str) -> dict[str, float]:
    """One chain in one mode, measured in a fresh process (with ``extra_env`` set before TensorFlow starts)."""
    env = environment(dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072", TF_CPP_MIN_LOG_LEVEL="3", **extra_env))
    code = (
        "import json, sys; from benchmarks.memory import _measure; n, m, s, k = sys.argv[1], sys.argv[2], "
        "int(sys.argv[3]), int(sys.argv[4]); print('RESULT ' + json.dumps(_measure(n, m, s, k)))"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return result_of([sys.executable, "-c", code, name, mode, str(size), str(length)], env=env, timeout=600, cwd=root)


def run(size: int, length: int, subprocesses: bool) -> dict[str, Any]:
    rows: dict[str, dict[str, Any]] = {}
    for name in CHAINS:
        rows[name] = {}
        for mode in ("eager", "function"):
            child = _child(name, mode, size, length) if subprocesses else None
            entry: dict[str, Any] = {"allocator_peak": _measure(name, mode, size, length)["allocator_peak"]}
            if child is not None:
                entry["allocator_peak_fresh_process"] = child["allocator_peak"]
                if "rss_growth" in child:
                    entry["rss_growth_fresh_process"] = child["rss_growth"]
            rows[name][mode] = entry
    ratios: dict[str, float | None] = {}
    for mode in ("eager", "function"):
        reference = rows[REFERENCE][mode]["allocator_peak"]
        ratios[mode] = rows[TARGET][mode]["allocator_peak"] / reference if reference else None
    mask_ratio = {
        mode: rows[MASK_LEAN][mode]["allocator_peak"] / rows[MASK_PLAIN][mode]["allocator_peak"]
        for mode in ("eager", "function")
    }
    quantizer_mask_ratio = {
        name: rows[f"{name} (keeps a bit mask)"]["function"]["allocator_peak"]
        / rows[f"{name}, bit masks off (keeps inputs)"]["function"]["allocator_peak"]
        for name in QUANTIZER_CHAINS
    }
    between_mask_ratio = {
        between: {
            variant: rows[_between_name(between, variant)]["function"]["allocator_peak"]
            / rows[_between_name(between, "bit masks off (keeps inputs)")]["function"]["allocator_peak"]
            for variant in ("ste default (keeps a bit mask)", "custom_gradient")
        }
        for between in BETWEEN
    }
    result = {
        "size": size,
        "length": length,
        "mask_ratio": mask_ratio,
        "between_mask_ratio_function": between_mask_ratio,
        "quantizer_mask_ratio_function": quantizer_mask_ratio,
        "dtype": "float32",
        "unit": "multiples of the input tensor's size",
        "reference": REFERENCE,
        "target_chain": TARGET,
        "target_ratio": ratios,
        "chains": rows,
    }
    if subprocesses:
        result["between_one_inter_op_thread"] = _between_serial(size, length)
    return result


SERIAL = ("bit masks off (keeps inputs)", "ste default (keeps a bit mask)")


def _between_serial(size: int, length: int) -> dict[str, dict[str, float]]:
    """The between-op chains with bits off and by default, each in a fresh process with one inter-op thread.

    How much the bits-off baseline keeps depends on TensorFlow's schedule: with the default inter-op pool (2 threads
    here) the executor computes each ``abs(y) <= 1`` as soon as ``y`` exists and keeps that 1-byte boolean, with
    one thread it keeps the float32 input (4 bytes), as the plain rule asks. ste's default keeps 1 bit either way.
    """
    out: dict[str, dict[str, float]] = {}
    for between in BETWEEN:
        peaks = {
            variant: _child(_between_name(between, variant), "function", size, length, TF_NUM_INTEROP_THREADS="1")[
                "allocator_peak"
            ]
            for variant in SERIAL
        }
        out[between] = {**peaks, "ratio": peaks[SERIAL[1]] / peaks[SERIAL[0]]}
    return out
