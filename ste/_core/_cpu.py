"""Which CPU kernels TensorFlow runs: oneDNN's or its own (Eigen's).

TensorFlow turns oneDNN on by default only on CPUs with AVX-512 (``TF_ENABLE_ONEDNN_OPTS`` overrides it either way),
and the two kernel sets parallelize differently: oneDNN's convolution gradients use every core, Eigen's filter
gradient leaves one of two idle, so how an op orders its gradients pays off differently on each
(``ste.layers``' binary-input layers, docs/performance.md). TensorFlow has no public way to tell: this reads
``_pywrap_util_port.IsMklEnabled`` and, if that private function is missing, answers ``None`` (unknown).
"""

from __future__ import annotations

import functools

import tensorflow as tf

__all__ = ["has_gpu", "onednn_enabled"]


@functools.lru_cache(maxsize=1)
def onednn_enabled() -> bool | None:
    """Whether TensorFlow's CPU ops run oneDNN's kernels in this process (fixed once TensorFlow is loaded); None when
    this TensorFlow does not say."""
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:  # pragma: no cover - layout of a future TensorFlow
        return None
    try:
        return bool(_pywrap_util_port.IsMklEnabled())
    except AttributeError:  # pragma: no cover
        return None


def has_gpu() -> bool:
    """Whether this process has a GPU that TensorFlow places ops on (then convolutions run there, not on the CPU)."""
    return bool(tf.config.list_logical_devices("GPU"))
