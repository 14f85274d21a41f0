"""Alternating timing: every variant runs once per round, in a rotated order, on the same inputs.

Machines shared with other processes drift; timing the variants side by side in every round, and reporting the
median over rounds of the per-round ratio to the baseline, cancels most of that drift.
"""

from __future__ import annotations

import gc
import os
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["LoadSampler", "alternate", "load_average", "summarize"]


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (empty where the platform has none)."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return []


class LoadSampler:
    """Samples the 1-minute load average every ``interval`` seconds in a daemon thread while in a ``with`` block."""

    def __init__(self, interval: float = 5.0) -> None:
        self.interval = interval
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            current = load_average()
            if current:
                self.samples.append(current[0])
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, float]:
        """Minimum, median and maximum of the samples (empty without samples)."""
        if not self.samples:
            return {}
        return {
            "min": min(self.samples),
            "median": statistics.median(self.samples),
            "max": max(self.samples),
            "samples": len(self.samples),
        }


def alternate(
    cases: Mapping[str, Callable[[], object]], *, rounds: int, inner: int, warmup: int = 2
) -> dict[str, list[float]]:
    """Seconds per call of each case: ``rounds`` samples each, every sample the mean of ``inner`` back-to-back calls.

    ``warmup`` untimed rounds come first (the first round after tracing and a garbage collection runs slow).

    Each round runs every case once; the order rotates from round to round, so that over ``len(cases)`` rounds
    every case runs once in every position, and every other such cycle runs in reverse order. Garbage collection
    is off while a sample is timed (as in ``timeit``).
    """
    names = list(cases)
    gc.collect()  # once, before the warm-up: a full collection with TensorFlow loaded takes ~0.2 s
    samples: dict[str, list[float]] = {name: [] for name in names}
    for index in range(-warmup, rounds):  # the first `warmup` rounds are run the same way but not recorded
        shift = index % len(names)
        order = names[shift:] + names[:shift]
        if (index // len(names)) % 2:  # every other full cycle runs backwards: neighbours swap sides
            order.reverse()
        for name in order:
            fn = cases[name]
            gc.disable()
            try:
                start = time.perf_counter()
                for _ in range(inner):
                    fn()
                elapsed = time.perf_counter() - start
            finally:
                gc.enable()
            if index >= 0:
                samples[name].append(elapsed / inner)
    return samples


def summarize(samples: Mapping[str, list[float]], baseline: str) -> dict[str, dict[str, Any]]:
    """Median time, interquartile range, the median per-round ratio to ``baseline`` and the raw per-round times."""
    base = samples[baseline]
    out: dict[str, dict[str, Any]] = {}
    for name, values in samples.items():
        ratios = [v / b for v, b in zip(values, base)]
        quartiles = statistics.quantiles(values, n=4) if len(values) >= 2 else [values[0]] * 3
        out[name] = {
            "median_s": statistics.median(values),
            "q1_s": quartiles[0],
            "q3_s": quartiles[2],
            "ratio": statistics.median(ratios),
            "samples": len(values),
            "per_round_s": [round(v, 9) for v in values],
        }
    return out
