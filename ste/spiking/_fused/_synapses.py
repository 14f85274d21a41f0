"""Synapses of a fused spiking stack: a stage's product from its flat input to its flat currents, and that product's
vector-Jacobian products, written out (the fused backward pass takes them outside its tape, from currents it kept).

Every stage of ``_fused`` sees its input and its currents as ``[n, width]`` (a feature map flattened in Keras's
``Flatten`` order, channels fastest), so a dense synapse can follow a convolutional one, and the cells' states are
``[batch, units]`` whatever the synapse.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Sequence

import tensorflow as tf

from ..._core._xla import compiling_with_xla

__all__ = ["Conv2DSynapse", "DenseSynapse", "Synapse"]


class Synapse(abc.ABC):
    """The product ``I = f(h; W) + b`` of one stage: ``h`` ``[n, inputs]`` -> ``I`` ``[n, units]``, the flat forms of
    ``[n, *frame]`` and ``[n, *out_frame]``."""

    inputs: int
    units: int
    frame: tuple[int, ...]
    out_frame: tuple[int, ...]

    @abc.abstractmethod
    def apply(self, h: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
        """``f(h; W)``, ``[n, units]``."""

    @abc.abstractmethod
    def kernel_gradient(self, h: tf.Tensor, d_current: tf.Tensor) -> tf.Tensor:
        """The kernel's gradient, summed over the ``n`` rows, in the layout of :meth:`gradient_sum` (a loop adds one
        per step to it; :meth:`kernel_from_sum` makes the total kernel-shaped)."""

    def gradient_sum(self, kernel: tf.Tensor) -> tf.Tensor:
        """Zeros to add :meth:`kernel_gradient`'s terms to: the kernel's shape, unless a synapse sums them in
        another layout."""
        return tf.zeros_like(kernel)

    def kernel_from_sum(self, total: tf.Tensor) -> tf.Tensor:
        """The kernel's gradient from the sum of :meth:`kernel_gradient`'s terms."""
        return total

    @abc.abstractmethod
    def input_gradient(self, d_current: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
        """The input's gradient ``[n, inputs]``."""

    @abc.abstractmethod
    def bias(self, bias: tf.Tensor) -> tf.Tensor:
        """The bias as it is added to ``[n, units]`` currents."""

    @abc.abstractmethod
    def bias_gradient(self, d_current: tf.Tensor) -> tf.Tensor:
        """The bias's gradient, summed over the rows (and positions)."""


class DenseSynapse(Synapse):
    """``h·W`` with ``W`` ``[inputs, units]`` (``keras.layers.Dense``).

    The kernel's gradient is summed as ``[units, inputs]`` (``dIᵀ·h``) when there are fewer units than inputs:
    XLA:CPU's product for a ``[inputs, units]`` result with few units is slower than for its transpose, and the other
    way round when the units are more; XLA folds a transpose of the product back into it, so the sum itself is kept
    transposed. The measurements: docs/performance.md, "Measurements behind the code's choices".
    """

    def __init__(self, inputs: int, units: int) -> None:
        self.inputs, self.units = inputs, units
        self.frame, self.out_frame = (inputs,), (units,)
        self._transposed = units < inputs

    def apply(self, h: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
        return tf.matmul(h, kernel)

    def kernel_gradient(self, h: tf.Tensor, d_current: tf.Tensor) -> tf.Tensor:
        if self._transposed:
            return tf.matmul(d_current, h, transpose_a=True)
        return tf.matmul(h, d_current, transpose_a=True)

    def gradient_sum(self, kernel: tf.Tensor) -> tf.Tensor:
        return tf.zeros([self.units, self.inputs], kernel.dtype) if self._transposed else super().gradient_sum(kernel)

    def kernel_from_sum(self, total: tf.Tensor) -> tf.Tensor:
        return tf.transpose(total) if self._transposed else total

    def input_gradient(self, d_current: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
        return tf.matmul(d_current, kernel, transpose_b=True)

    def bias(self, bias: tf.Tensor) -> tf.Tensor:
        return bias

    def bias_gradient(self, d_current: tf.Tensor) -> tf.Tensor:
        return tf.reduce_sum(d_current, axis=0)


def conv_output_size(size: int, kernel: int, stride: int, padding: str) -> int:
    """A convolution's output length along one axis (TensorFlow's ``SAME``/``VALID`` rule)."""
    return math.ceil(size / stride) if padding == "SAME" else (size - kernel) // stride + 1


class Conv2DSynapse(Synapse):
    """``conv2d(h, W)`` over ``[height, width, channels]`` frames, ``W`` ``[kh, kw, channels, filters]``
    (``keras.layers.Conv2D`` with ``data_format="channels_last"`` and no dilation)."""

    def __init__(
        self, frame: Sequence[int], filters: int, kernel_size: Sequence[int], strides: Sequence[int], padding: str
    ) -> None:
        self.frame = tuple(int(d) for d in frame)
        self.kernel_size, self.strides, self.padding = tuple(kernel_size), tuple(strides), padding.upper()
        height, width, _ = self.frame
        self.out_frame = (
            conv_output_size(height, self.kernel_size[0], self.strides[0], self.padding),
            conv_output_size(width, self.kernel_size[1], self.strides[1], self.padding),
            filters,
        )
        self.inputs, self.units = math.prod(self.frame), math.prod(self.out_frame)

    def _maps(self, flat: tf.Tensor, frame: tuple[int, ...]) -> tf.Tensor:
        return tf.reshape(flat, [-1, *frame])

    def _strides(self) -> list[int]:
        return [1, *self.strides, 1]

    def apply(self, h: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
        maps = self._maps(h, self.frame)
        if compiling_with_xla() and self.frame[-1] == 1:
            # XLA:CPU convolves a single input channel slowly: the kernel's positions as broadcast multiply-adds
            # instead, which XLA fuses into one loop (docs/performance.md, "Measurements behind the code's choices")
            out = tf.add_n([window * kernel[i, j, 0] for (i, j), window in self._windows(maps)])
        else:
            out = tf.nn.conv2d(maps, kernel, self._strides(), self.padding)
        return tf.reshape(out, [-1, self.units])

    def _windows(self, maps: tf.Tensor) -> list[tuple[tuple[int, int], tf.Tensor]]:
        """For every kernel position (i, j), the input values it meets at every output position."""
        (top, bottom), (left, right) = self._padding()
        padded = tf.pad(maps, [[0, 0], [top, bottom], [left, right], [0, 0]])
        (rows, cols, _), (sh, sw) = self.out_frame, self.strides
        return [
            ((i, j), padded[:, i : i + (rows - 1) * sh + 1 : sh, j : j + (cols - 1) * sw + 1 : sw, :])
            for i in range(self.kernel_size[0])
            for j in range(self.kernel_size[1])
        ]

    def _padding(self) -> list[tuple[int, int]]:
        """The zeros before and after each spatial axis (TensorFlow's rule for ``SAME``: the odd one after)."""
        out = []
        for size, kernel, stride, produced in zip(self.frame[:2], self.kernel_size, self.strides, self.out_frame[:2]):
            total = max((produced - 1) * stride + kernel - size, 0) if self.padding == "SAME" else 0
            out.append((total // 2, total - total // 2))
        return out

    def kernel_gradient(self, h: tf.Tensor, d_current: tf.Tensor) -> tf.Tensor:
        maps, d_maps = self._maps(h, self.frame), self._maps(d_current, self.out_frame)
        if not compiling_with_xla():
            return tf.raw_ops.Conv2DBackpropFilter(
                input=maps,
                filter_sizes=[*self.kernel_size, self.frame[-1], self.out_frame[-1]],
                out_backprop=d_maps,
                strides=self._strides(),
                padding=self.padding,
            )
        # XLA:CPU lowers Conv2DBackpropFilter to a convolution it runs as a plain loop: one product per kernel
        # position instead (docs/performance.md, "Measurements behind the code's choices")
        taps = [tf.tensordot(window, d_maps, axes=[[0, 1, 2], [0, 1, 2]]) for _, window in self._windows(maps)]
        return tf.reshape(tf.stack(taps), [*self.kernel_size, self.frame[-1], self.out_frame[-1]])

    def input_gradient(self, d_current: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
        maps = self._maps(d_current, self.out_frame)
        if compiling_with_xla() and self.strides == (1, 1):
            # the correlation with the flipped, transposed kernel, as a forward convolution: XLA:CPU runs its own
            # lowering of Conv2DBackpropInput 5x slower than a forward convolution of the same size
            flipped = tf.transpose(tf.reverse(kernel, [0, 1]), [0, 1, 3, 2])
            (top, bottom), (left, right) = self._padding()
            kh, kw = self.kernel_size
            padding = [[0, 0], [kh - 1 - top, kh - 1 - bottom], [kw - 1 - left, kw - 1 - right], [0, 0]]
            out = tf.nn.conv2d(maps, flipped, 1, padding)
        else:
            out = tf.raw_ops.Conv2DBackpropInput(
                input_sizes=tf.concat([tf.shape(maps)[:1], self.frame], axis=0),
                filter=kernel,
                out_backprop=maps,
                strides=self._strides(),
                padding=self.padding,
            )
        return tf.reshape(out, [-1, self.inputs])

    def bias(self, bias: tf.Tensor) -> tf.Tensor:
        return tf.tile(bias, [self.out_frame[0] * self.out_frame[1]])  # channels fastest, as the flat currents

    def bias_gradient(self, d_current: tf.Tensor) -> tf.Tensor:
        return tf.reduce_sum(tf.reshape(d_current, [-1, self.out_frame[-1]]), axis=0)
