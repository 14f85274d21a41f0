"""Where one training step's time goes, by op class, from TensorFlow's profiler trace (host tracer).

Used for both sides of the binarized-network comparison (``binary_net`` with ste on Keras 3, ``larq_net`` with larq on
tf-keras, in its own venv): this module imports only TensorFlow and the standard library.

Every TensorFlow op the executor runs is one trace event named ``op_name:OpType`` on an executor thread. Its time is
charged to one class by :func:`classify` (the op type, then the name scope a layer or the optimizer gives it). The
executor runs independent ops on two threads at once, so the classes' op times add up to more than the step; the
step's own wall time and the time no op ran on any thread ("executor idle": scheduling, the Python call, the function
call's set-up) are reported beside them.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from typing import Any

try:
    from ._allocations import profiled
except ImportError:  # imported as a top-level module, by larq_net.py in larq's venv
    from _allocations import profiled  # type: ignore[no-redef]

__all__ = ["CLASSES", "classify", "profile_step", "profile_steps"]

CLASSES = (
    "quantizer forward",
    "quantizer backward",
    "bit packing and unpacking",
    "conv and its gradients",
    "batch norm (forward and backward)",
    "residual add (forward and backward)",
    "optimizer (and weight clip)",
    "other ops (stem, loss, pooling, dense, variable reads)",
)

_QUANTIZER = re.compile(r"(^|/)(sign|ste_sign|approx_sign|swish_sign)(_\d+)*(/|$)")
_PACKING = re.compile(r"(^|/)(pack_bits|unpack_bits|unpack_values|times_mask|binary_input_bits)(_\d+)*(/|$)")


def classify(name: str, kind: str) -> str:
    """The class of one op execution: its node name and its op type (oneDNN's ``_Mkl``/``_MklNative`` prefixes
    included)."""
    base = re.sub(r"^_Mkl(Native)?(Fused)?", "", kind)
    lower = name.lower()
    top_level = "/" not in name  # ops of a custom gradient's backward function carry no layer's scope
    if _PACKING.search(lower) or base == "GatherV2":  # ste unpacks bits with a table gather; nothing else gathers
        return "bit packing and unpacking"
    if base.startswith(("Conv2D", "Conv3D", "DepthwiseConv")) or "Conv2DBackprop" in base:
        return "conv and its gradients"
    if base.startswith(("FusedBatchNorm", "BatchNorm")) or "batch_normalization" in lower or "batchnorm" in lower:
        return "batch norm (forward and backward)"
    if lower.startswith(("adam/", "adam_", "training/adam")) or "/adam/" in lower or base.startswith("ResourceApply"):
        return "optimizer (and weight clip)"
    if "clip_by_value" in lower or "weight_clip" in lower:
        return "optimizer (and weight clip)"
    if _QUANTIZER.search(lower):
        return "quantizer backward" if "gradient" in lower or "grad" in lower else "quantizer forward"
    if re.search(r"(^|/)add(_\d+)*(_1)?/", lower) or base == "AddN":
        return "residual add (forward and backward)"
    if top_level and "Variable" not in base:
        return "quantizer backward"
    return "other ops (stem, loss, pooling, dense, variable reads)"


def _op_events(path: str) -> tuple[list[tuple[str, str, int, int]], int]:
    """The op executions of one trace (name, type, start and end in ps) and the step's wall time (ps)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(path, "rb") as file:
        space.ParseFromString(file.read())
    ops: list[tuple[str, str, int, int]] = []
    wall = 0
    for plane in space.planes:
        names = {key: value.name for key, value in plane.event_metadata.items()}
        for line in plane.lines:
            start = line.timestamp_ns * 1000
            for event in line.events:
                name = names.get(event.metadata_id, "")
                if line.name == "python" and name == "KernelAndDeviceFunc::Run":
                    wall = max(wall, event.duration_ps)
                if not line.name.startswith("tf_Compute") or ":" not in name or "::" in name:
                    continue
                op, _, kind = name.rpartition(":")
                begin = start + event.offset_ps
                ops.append((op, kind, begin, begin + event.duration_ps))
    return ops, wall


def _busy(intervals: list[tuple[int, int]]) -> int:
    """The length of the union of ``intervals``."""
    total, end = 0, None
    for begin, stop in sorted(intervals):
        if end is None or begin > end:
            total += stop - begin
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def profile_step(call: Callable[[], Any]) -> dict[str, Any]:
    """Milliseconds of op time per class, the wall time of the step's function call and the time no op ran, for one
    ``call()`` (one ``tf.function`` step)."""
    ops, wall = profiled(call, _op_events)
    classes = dict.fromkeys(CLASSES, 0.0)
    kinds: dict[str, float] = {}
    for name, kind, begin, end in ops:
        classes[classify(name, kind)] += (end - begin) / 1e9
        kinds[kind] = kinds.get(kind, 0.0) + (end - begin) / 1e9
    busy = _busy([(b, e) for _, _, b, e in ops]) / 1e9
    return {
        "classes_ms": classes,
        "op_types_ms": kinds,
        "ops": len(ops),
        "op_time_ms": sum(classes.values()),
        "step_ms": wall / 1e9,
        "idle_ms": max(wall / 1e9 - busy, 0.0),
    }


def profile_steps(call: Callable[[], Any], steps: int) -> dict[str, Any]:
    """:func:`profile_step` over ``steps`` steps: the median of every figure."""
    runs = [profile_step(call) for _ in range(steps)]
    kinds = sorted({k for run in runs for k in run["op_types_ms"]})
    return {
        "steps": steps,
        "classes_ms": {c: statistics.median(r["classes_ms"][c] for r in runs) for c in CLASSES},
        "op_types_ms": {k: statistics.median(r["op_types_ms"].get(k, 0.0) for r in runs) for k in kinds},
        "ops": statistics.median(r["ops"] for r in runs),
        "op_time_ms": statistics.median(r["op_time_ms"] for r in runs),
        "step_ms": statistics.median(r["step_ms"] for r in runs),
        "idle_ms": statistics.median(r["idle_ms"] for r in runs),
    }
