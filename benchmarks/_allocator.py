"""TensorFlow's CPU allocator statistics, which the memory figures read (``get_memory_info``, ``reset_memory_stats``).

TensorFlow keeps them only when its BFC allocator serves the CPU, which it does by default only where oneDNN is on
(a CPU with AVX-512, or ``TF_ENABLE_ONEDNN_OPTS=1``). ``TF_CPU_ALLOCATOR_USE_BFC=true`` turns it on everywhere, but
only if set before TensorFlow is imported: ``import benchmarks`` sets it (``python -m benchmarks.run`` and every
subprocess of the suite import it, or get it in their environment, first). This module imports nothing but the
standard library, so that ``larq_net.py`` (a script in larq's own environment) can use it too.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

__all__ = ["VARIABLE", "environment", "require_statistics", "use_bfc"]

VARIABLE = "TF_CPU_ALLOCATOR_USE_BFC"
HOW = (
    f"TensorFlow keeps no CPU allocator statistics in this process: set {VARIABLE}=true before TensorFlow is "
    f"imported (python -m benchmarks.run sets it; elsewhere export it, e.g. {VARIABLE}=true python ...)."
)


def use_bfc() -> None:
    """Ask TensorFlow for its BFC allocator on CPU (a no-op once TensorFlow is imported, or if already set)."""
    os.environ.setdefault(VARIABLE, "true")


def environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) for a subprocess that reads the allocator's statistics."""
    return {**(os.environ if env is None else env), VARIABLE: "true"}


def require_statistics() -> None:
    """Exit with one line saying what to do if this process's TensorFlow keeps no CPU allocator statistics."""
    import tensorflow as tf

    try:
        tf.config.experimental.reset_memory_stats("CPU:0")
        tf.config.experimental.get_memory_info("CPU:0")
    except (ValueError, RuntimeError, tf.errors.OpError):
        sys.exit(f"benchmarks: {HOW}")
