"""Whether the ops being built now will be compiled by XLA.

Some ops have two exact spellings of the same result, one that TensorFlow's kernels run fastest and one that XLA
fuses best (``ste._core._bitmask``), and ``ste.layers.BatchNormalization`` leaves XLA Keras's own ops. TensorFlow has no
public way to tell: this reads ``control_flow_util.GraphOrParentsInXlaContext`` and, if that private function is
missing, answers "not XLA" (still correct, only slower under XLA).
"""

from __future__ import annotations

import tensorflow as tf

__all__ = ["compiling_with_xla"]


def compiling_with_xla() -> bool:
    """Whether the ops being built now will be compiled by XLA (traced under ``jit_compile=True``, or nested in such a
    function). Only the choice between two exact spellings of the same result depends on it."""
    if tf.executing_eagerly():
        return False
    try:
        from tensorflow.python.ops import control_flow_util
    except ImportError:  # pragma: no cover - layout of a future TensorFlow
        return False
    return bool(control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()))
