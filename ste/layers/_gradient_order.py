"""The order of a binary-input layer's ops in a graph: what waits for what, and when the input gradient waits."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from .._core._cpu import has_gpu, onednn_enabled

__all__ = ["after", "ordered_gradients"]


def after(tensor: Any, first: list[Any]) -> Any:
    """``tensor``, available only once every tensor of ``first`` is computed (in a graph; eagerly ops run in call
    order anyway). TensorFlow's executor runs an op once its inputs exist and gives no other order, and these orders
    kept whole float tensors alive on benchmarks/binary_net.py: with one inter-op thread it postponed the packing of
    the layer's input until the backward pass (every block's float ±1 input alive: 216 MiB instead of 108) and
    every kernel gradient until the end of the backward pass (each block's upstream gradient and rebuilt input
    alive: 162 MiB); with two, the input gradient often ran while the rebuilt input still waited for the kernel
    gradient (one float tensor more at the peak)."""
    done = [t for t in first if t is not None]
    if tensor is None or not done or tf.executing_eagerly():
        return tensor
    with tf.control_dependencies(done):
        return tf.identity(tensor)


def ordered_gradients() -> bool:
    """Whether a binary-input layer's input gradient waits for its kernel gradient in a graph.

    The order keeps one input-sized float tensor fewer alive (the rebuilt input is freed before the input gradient
    is allocated), and costs time where the two gradients would otherwise run side by side on cores one of them
    leaves idle. Ordered with oneDNN on, on a GPU (a convolution fills the device; memory is the scarce resource) and
    where TensorFlow does not say; side by side with oneDNN off. The measurements: docs/performance.md, "Measurements
    behind the code's choices"."""
    return onednn_enabled() is not False or has_gpu()
