"""``time_loop``: a spiking layer's loop over the time axis, which reads its input currents by popping them.

``keras.layers.RNN`` on TensorFlow reads step t with ``TensorArray.read(t)``. The gradient of a read is a write into
a gradient list that starts as ``zeros_like`` of the whole input list, so backpropagation through time allocates
zeros for every step of the input (one float per neuron and step) before the backward loop starts, and keeps them
until it ends; the input list itself stays alive until then too. Here the currents are a ``TensorList`` in reverse
order (the last step first, so that ``TensorListPopBack`` yields step 0 first): a popped step is freed once the step
has used it, and the gradient of a pop is a push onto a list that grows as the backward loop goes, with no zeros.
The forward values and gradients are those of ``keras.layers.RNN`` (the same cell, the same order of operations).

Only the unmasked, not unrolled case in a graph (``tf.function``, ``fit``) is run here; ``SpikingRNN`` hands masks,
``unroll=True`` and eager calls to Keras (whose eager ``TensorArray`` is a Python list, with nothing to save).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

__all__ = ["time_loop"]


def time_loop(
    step: Callable[[tf.Tensor, tuple[tf.Tensor, ...]], tuple[tf.Tensor, Sequence[tf.Tensor]]],
    sequences: tf.Tensor,
    initial_states: Sequence[tf.Tensor],
    go_backwards: bool,
    return_sequences: bool,
) -> tuple[tf.Tensor, tf.Tensor, list[tf.Tensor]]:
    """``(last output, outputs, final states)`` as ``keras.backend.rnn`` returns them, for ``[batch, time, units]``.

    ``step(inputs_t, states) -> (output_t, new_states)``; ``outputs`` is ``[batch, time, units]`` in the order the
    steps ran (reversed with ``go_backwards``, as Keras), or ``[batch, 1, units]`` without ``return_sequences``.
    """
    steps = tf.shape(sequences)[1]
    currents = tf.transpose(sequences, (1, 0, 2))  # [time, batch, units]
    if not go_backwards:
        currents = tf.reverse(currents, [0])  # popped from the back: step 0 comes out first
    element = currents.shape[1:]
    pending = tf.raw_ops.TensorListFromTensor(tensor=currents, element_shape=tf.shape(currents)[1:])
    del currents
    states = tuple(initial_states)
    dtype = sequences.dtype

    def body(time: tf.Tensor, pending: tf.Tensor, outputs: tf.TensorArray, *states: tf.Tensor) -> Any:
        pending, current = tf.raw_ops.TensorListPopBack(
            input_handle=pending, element_shape=tf.shape(sequences)[::2], element_dtype=dtype
        )
        current.set_shape(element)
        output, new_states = step(current, tuple(states))
        outputs = outputs.write(time if return_sequences else 0, output)
        return (time + 1, pending, outputs, *new_states)

    outputs = tf.TensorArray(dtype, size=steps if return_sequences else 1, element_shape=element)
    _, _, outputs, *final = tf.while_loop(
        lambda time, *_: time < steps,
        body,
        (tf.constant(0), pending, outputs, *states),
        maximum_iterations=steps,
        parallel_iterations=32,
    )
    stacked = tf.transpose(outputs.stack(), (1, 0, 2))
    return stacked[:, -1], stacked, list(final)
