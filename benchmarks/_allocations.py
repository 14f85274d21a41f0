"""The peak of the bytes TensorFlow's ops asked for during one call, from the profiler's allocation records.

The BFC allocator's ``get_memory_info(...)["peak"]`` counts whole chunks: BFC hands out a free chunk unsplit when it
is less than twice the request, so its peak carries up to 2× of slack per allocation, and how much depends on where
earlier steps left the free chunks (the same step read 12.7–16.2 MiB across runs; its requests peaked at 12.6).
torch's CPU allocator has no such chunks: its profiler records the bytes each tensor asked for. To compare like with
like, this reads TensorFlow's profiler trace (``host_tracer_level=2`` records one ``MemoryAllocation`` or
``MemoryDeallocation`` event per request, with ``requested_bytes`` and the address) and returns the highest running
sum of the requested bytes minus those freed, as ``benchmarks/torch_snn.py`` does for torch. Blocks allocated before
the call and freed during it are not subtracted (as torch's profiler, which has no size for them).
Needs the BFC allocator on CPU (``TF_CPU_ALLOCATOR_USE_BFC=true``), which is what emits the events.
"""

from __future__ import annotations

import glob
import tempfile
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["profiled", "requested_peak"]

T = TypeVar("T")


def _events(path: str) -> list[tuple[int, str, dict[str, Any]]]:
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(path, "rb") as file:
        space.ParseFromString(file.read())
    out = []
    for plane in space.planes:
        stat_names = {key: value.name for key, value in plane.stat_metadata.items()}
        event_names = {key: value.name for key, value in plane.event_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                name = event_names.get(event.metadata_id, "")
                if name not in ("MemoryAllocation", "MemoryDeallocation"):
                    continue
                stats = {stat_names.get(s.metadata_id): s.int64_value or s.uint64_value for s in event.stats}
                out.append((line.timestamp_ns * 1000 + event.offset_ps, name, stats))
    out.sort(key=lambda record: record[0])
    return out


def profiled(call: Callable[[], Any], read: Callable[[str], T]) -> T:
    """``read(path)`` of the profiler trace (``host_tracer_level=2``) written while ``call()`` ran."""
    import tensorflow as tf

    with tempfile.TemporaryDirectory() as logdir:
        options = tf.profiler.experimental.ProfilerOptions(host_tracer_level=2, python_tracer_level=0)
        tf.profiler.experimental.start(logdir, options=options)
        try:
            call()
        finally:
            tf.profiler.experimental.stop()
        paths = glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)
        if not paths:
            raise RuntimeError("benchmarks: TensorFlow's profiler wrote no trace")
        return read(paths[0])


def requested_peak(call: Callable[[], Any]) -> int:
    """The highest running sum of the bytes requested minus those freed during ``call()`` (TensorFlow's CPU)."""
    events = profiled(call, _events)
    live: dict[int, int] = {}
    running = peak = 0
    for _, name, stats in events:
        address = stats.get("addr", 0)
        if name == "MemoryAllocation":
            live[address] = stats.get("requested_bytes", 0)
            running += live[address]
            peak = max(peak, running)
        elif address in live:
            running -= live.pop(address)
    if not events:
        raise RuntimeError(
            "benchmarks: TensorFlow's profiler recorded no allocation; set TF_CPU_ALLOCATOR_USE_BFC=true before "
            "TensorFlow is imported"
        )
    return peak
