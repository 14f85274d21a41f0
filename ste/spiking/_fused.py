"""``fused_dense``: dense synapses and spiking neurons over time in one loop, under one custom gradient.

The unfused network (``Dense`` over every step at once, then a neuron layer's time loop) is fast, but its backward
pass materializes the gradient of every layer boundary for the whole sequence, and Keras's ``Dense`` keeps its float
input spikes. Here each step computes its currents ``I[t] = h[t]·W + b`` inside the loop, for every stage of a stack
(the spikes of stage i are the input of stage i+1 at the same step), and runs each stage's own cell step
(``SpikingCell.call``: its dynamics, reset and surrogate; nothing of a neuron is written again here). The first
stage's currents depend on the input only: they are one product per segment (``[batch·segment, features]·W``).

What is kept for the backward pass: the cells' states at the start of every segment of ``segment`` steps (a spike
state as bits, ``ste._bitmask.pack_bits``; the others as floats), in buffers written in place. The backward loop
runs over the segments in reverse: it recomputes the segment's first-stage currents and the states every step
starts from (the same ops as the forward pass, so the same values bit for bit; the last step's outputs are not
needed), then steps back through it, taking each step's vector-Jacobian product with a ``GradientTape`` over that
step (the cell's own surrogate gradient) and the first stage's product by hand, and accumulates the kernels'
gradients per step (dW += h[t]ᵀ·dI[t]). The gradient of a stage's input spikes flows to the stage below within the
step and is never held for the whole sequence. Memory: the checkpoints (about T/segment steps of states), one
segment's states and its first-stage currents (segment steps each); ``segment=1`` keeps every step's states and
recomputes nothing but the step itself.

Both loops are compiled with XLA by default (one kernel for the sequence instead of TensorFlow's cost per op and
step). The outputs are written into one ``[batch, time, units]`` buffer in place (outside XLA with
``TensorStridedSliceUpdate``, which forwards its input's buffer), the input's gradient likewise, and only when a
tape watches the input (a network's input data is not differentiated, so its gradient is neither computed nor
stored). Gradients of these gradients are refused with :class:`ste.HigherOrderError` (the backward pass is a loop of
its own that a second tape would not see through).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from .._bitmask import higher_order_witness, pack_bits, refuse_higher_order, unpack_values
from .._xla import compiling_with_xla
from ._cell import SpikingCell

__all__ = ["Stage", "default_segment", "fused_dense"]


@dataclass(frozen=True)
class Stage:
    """One dense synapse and its neurons: the cell, whether there is a bias, the cell's learned parameter names."""

    cell: SpikingCell
    use_bias: bool
    names: tuple[str, ...]

    @property
    def binary(self) -> tuple[bool, ...]:
        """Which of the cell's states are spikes (kept as bits)."""
        return tuple(name == "spikes" for name in self.cell.state_names)


def default_segment(steps: int) -> int:
    """⌈√T⌉ steps per segment: T/segment checkpoints plus one segment's states, the fewest kept steps."""
    return max(1, math.ceil(math.sqrt(steps)))


def _input_watched(x: tf.Tensor) -> bool:
    """Whether the input's gradient can be asked for: a tape watches it, or no tape runs (``tf.gradients``)."""
    from tensorflow.python.eager import record

    if not record.could_possibly_record():
        return True
    return bool(record.should_record_backprop([x]))


def _update(buffer: tf.Tensor, t: tf.Tensor, value: tf.Tensor, axis: int = 1) -> tf.Tensor:
    """``buffer[:, t] = value`` (``axis=1``) or ``buffer[t] = value`` (``axis=0``) in place (the op hands its input's
    buffer on when nothing else holds it)."""
    rank = buffer.shape.rank
    if compiling_with_xla():  # XLA updates the buffer in place
        if axis == 0:
            return tf.tensor_scatter_nd_update(buffer, tf.reshape(t, [1, 1]), value[None])
        rows = tf.range(tf.shape(buffer)[0])
        return tf.tensor_scatter_nd_update(buffer, tf.stack([rows, tf.fill(tf.shape(rows), t)], axis=1), value)
    if axis == 0:
        begin = tf.concat([[t], tf.zeros([rank - 1], tf.int32)], axis=0)
        end = tf.concat([[t + 1], tf.shape(buffer)[1:]], axis=0)
        value = value[None]
    else:
        begin = tf.concat([[0], [t], tf.zeros([rank - 2], tf.int32)], axis=0)
        end = tf.concat([[tf.shape(buffer)[0]], [t + 1], tf.shape(buffer)[2:]], axis=0)
        value = value[:, None]
    out = tf.raw_ops.TensorStridedSliceUpdate(
        input=buffer, begin=begin, end=end, strides=tf.ones([rank], tf.int32), value=value
    )
    out.set_shape(buffer.shape)
    return out


class _Kept:
    """Buffers ``[size, ...]`` of every stage's states, one entry per index; spike states as bits.

    Written in place at an index and read at one (a stack of TensorLists made XLA copy the whole list at every push:
    one segment's states twice)."""

    def __init__(
        self,
        stages: Sequence[Stage],
        widths: Sequence[int],
        batch: tf.Tensor,
        static_batch: int | None,
        dtype: Any,
    ) -> None:
        self.stages, self.batch, self.static_batch, self.dtype = stages, batch, static_batch, dtype
        self.layout = [(binary, width) for stage, width in zip(stages, widths) for binary in stage.binary]

    def empty(self, size: Any) -> list[tf.Tensor]:
        return [
            tf.zeros(tf.stack([size, (self.batch * width + 7) // 8]), tf.uint8)
            if binary
            else tf.zeros(tf.stack([size, self.batch, width]), self.dtype)
            for binary, width in self.layout
        ]

    def write(self, buffers: Sequence[tf.Tensor], index: tf.Tensor, states: Sequence[Sequence[tf.Tensor]]) -> list[Any]:
        flat = [s for group in states for s in group]
        return [
            _update(buffer, index, pack_bits(state > 0) if binary else state, axis=0)
            for buffer, state, (binary, _) in zip(buffers, flat, self.layout)
        ]

    def read(self, buffers: Sequence[tf.Tensor], index: tf.Tensor) -> list[list[tf.Tensor]]:
        flat = []
        for buffer, (binary, width) in zip(buffers, self.layout):
            value = tf.gather(buffer, index)
            if binary:
                value = unpack_values(value, tf.stack([self.batch, width]), 0, 1, self.dtype)
            value.set_shape([self.static_batch, width])
            flat.append(value)
        return _nest(flat, self.stages)


def _loop(cond: Any, body: Any, loop_vars: Sequence[Any], iterations: int) -> list[Any]:
    """``tf.while_loop`` one iteration at a time: the next steps' currents (each depends only on the input) would
    otherwise be computed ahead and held, up to every step's (the dense network's step peak: 10.3 MiB instead of
    2.0 MiB without XLA)."""
    result = tf.while_loop(
        cond,
        body,
        tuple(loop_vars),
        maximum_iterations=iterations if iterations >= 0 else None,
        parallel_iterations=1,
    )
    return list(result)


def compiled(function: Any, jit_compile: bool) -> Any:
    """``function`` compiled by XLA in a graph: one kernel for the whole loop, without TensorFlow's per-op cost in
    every step; as it is when executing eagerly or with ``jit_compile=False``."""
    if tf.executing_eagerly() or not jit_compile:
        return function
    return tf.function(function, autograph=False, jit_compile=True)


def _nest(flat: Sequence[Any], stages: Sequence[Stage]) -> list[list[Any]]:
    out, index = [], 0
    for stage in stages:
        count = len(stage.cell.state_names)
        out.append(list(flat[index : index + count]))
        index += count
    return out


def fused_dense(
    x: tf.Tensor,
    stages: Sequence[Stage],
    kernels: Sequence[tf.Tensor],
    biases: Sequence[tf.Tensor | None],
    parameters: Sequence[Sequence[tf.Tensor]],
    segment: int | None = None,
    where: str = "SpikingDense",
    jit_compile: bool = True,
) -> tf.Tensor:
    """The last stage's outputs ``[batch, time, units]`` for input ``x`` ``[batch, time, features]``.

    ``kernels[i]`` is ``[in, units]``, ``biases[i]`` ``[units]`` or None, ``parameters[i]`` the values of
    ``stages[i].names`` (the cell reads them through ``SpikingCell._read``); all in ``x``'s dtype.
    ``jit_compile``: compile the forward and backward loops with XLA (in a graph).
    """
    steps = x.shape[1]
    if steps is None:
        steps_t = tf.shape(x)[1]
        segment = segment or 8
        n_segments: Any = (steps_t + segment - 1) // segment
    else:
        steps_t = tf.constant(steps)
        segment = min(segment or default_segment(steps), steps)
        n_segments = math.ceil(steps / segment)
    widths = [int(k.shape[-1]) for k in kernels]
    witness = higher_order_witness(x)
    watched = _input_watched(x)
    dtype = x.dtype
    counts = [len(p) for p in parameters]
    flat_inputs = [x]
    for kernel, bias, values in zip(kernels, biases, parameters):
        flat_inputs += [kernel, *([bias] if bias is not None else []), *values]

    def unflatten(flat: Sequence[tf.Tensor]) -> tuple[list[tf.Tensor], list[tf.Tensor | None], list[list[tf.Tensor]]]:
        ks, bs, ps, index = [], [], [], 0
        for stage, count in zip(stages, counts):
            ks.append(flat[index])
            index += 1
            if stage.use_bias:
                bs.append(flat[index])
                index += 1
            else:
                bs.append(None)
            ps.append(list(flat[index : index + count]))
            index += count
        return ks, bs, ps

    def first_currents(x: tf.Tensor, start: tf.Tensor, kernel: tf.Tensor, bias: tf.Tensor | None) -> tf.Tensor:
        """The first stage's currents ``[batch, segment, units]`` for the segment from ``start``, in one product
        (they depend on the input only). A last, shorter segment repeats its last step (those rows are not read)."""
        times = tf.minimum(start + tf.range(segment), steps_t - 1)
        inputs = tf.gather(x, times, axis=1)
        current = tf.matmul(tf.reshape(inputs, [-1, inputs.shape[-1]]), kernel)
        if bias is not None:
            current = current + bias
        return tf.reshape(current, tf.stack([tf.shape(x)[0], segment, widths[0]]))

    def step(
        first: tf.Tensor,
        states: Sequence[Sequence[tf.Tensor]],
        ks: Sequence[tf.Tensor],
        bs: Sequence[tf.Tensor | None],
        ps: Sequence[Sequence[tf.Tensor]],
    ) -> tuple[tf.Tensor, list[list[tf.Tensor]]]:
        """One time step of every stage, through the cells' own ``call``; ``first`` is the first stage's current."""
        new_states, h = [], None
        for index, (stage, kernel, bias, values, group) in enumerate(zip(stages, ks, bs, ps, states)):
            if index == 0:
                current = first
            else:
                current = tf.matmul(h, kernel)
                if bias is not None:
                    current = current + bias
            stage.cell._read = dict(zip(stage.names, values))
            try:
                h, new = stage.cell.call(current, list(group))
            finally:
                stage.cell._read = None
            new_states.append(list(tf.nest.flatten(new)))
        return h, new_states

    def initial(batch: tf.Tensor) -> list[list[tf.Tensor]]:
        return [
            [tf.zeros(tf.stack([batch, w]), dtype) for _ in stage.cell.state_names] for stage, w in zip(stages, widths)
        ]

    def flat(states: Sequence[Sequence[tf.Tensor]]) -> list[tf.Tensor]:
        return [s for group in states for s in group]

    def forward_loop(*inputs: tf.Tensor) -> list[tf.Tensor]:
        """The outputs and the checkpoints (every stage's states at the start of every segment)."""
        x = inputs[0]
        ks, bs, ps = unflatten(inputs[1:])
        batch = tf.shape(x)[0]
        kept = _Kept(stages, widths, batch, x.shape[0], dtype)
        outputs = tf.zeros(tf.stack([batch, steps_t, widths[-1]]), dtype)
        n_kept = len(kept.layout)

        def segment_body(index: tf.Tensor, outputs: tf.Tensor, *carried: tf.Tensor) -> Any:
            states = _nest(carried[n_kept:], stages)
            checkpoints = kept.write(carried[:n_kept], index, states)
            start = index * segment
            currents = first_currents(x, start, ks[0], bs[0])

            def step_body(t: tf.Tensor, outputs: tf.Tensor, *flat_states: tf.Tensor) -> Any:
                first = tf.gather(currents, t - start, axis=1)
                out, new = step(first, _nest(flat_states, stages), ks, bs, ps)
                return (t + 1, _update(outputs, t, out), *flat(new))

            stop = tf.minimum(start + segment, steps_t)
            _, outputs, *ends = _loop(lambda t, *_: t < stop, step_body, (start, outputs, *flat(states)), segment)
            return (index + 1, outputs, *checkpoints, *ends)

        _, outputs, *carried = _loop(
            lambda index, *_: index < n_segments,
            segment_body,
            (tf.constant(0), outputs, *kept.empty(n_segments), *flat(initial(batch))),
            n_segments if isinstance(n_segments, int) else -1,
        )
        return [outputs, *carried[:n_kept]]

    def forward(*inputs: tf.Tensor) -> Any:
        from tensorflow.python.eager import record

        with record.stop_recording():  # nothing inside is differentiated
            outputs, *checkpoints = compiled(forward_loop, jit_compile)(*inputs)

        def grad(dy: tf.Tensor) -> Any:
            grads = compiled(backward, jit_compile)(*inputs, *checkpoints, dy)
            if not watched:
                grads = [None, *grads]
            fix = (
                "Fix: use the unfused layers (keras.layers.Dense, then the neuron layer), whose gradients TensorFlow "
                "differentiates again."
            )
            return [
                None if g is None else refuse_higher_order(g, witness, where, "is a loop of its own", fix=fix)
                for g in grads
            ]

        return outputs, grad

    def backward(*inputs: tf.Tensor) -> list[tf.Tensor]:
        """Segment by segment from the last: recompute its states from its checkpoint, then step back through it."""
        x, dy = inputs[0], inputs[-1]
        ks, bs, ps = unflatten(inputs[1 : len(flat_inputs)])
        batch = tf.shape(x)[0]
        kept = _Kept(stages, widths, batch, x.shape[0], dtype)
        checkpoints = list(inputs[len(flat_inputs) : -1])
        d_states = flat(initial(batch))
        d_weights = [tf.zeros_like(k) for k in ks]
        d_biases = [tf.zeros_like(b) for b in bs if b is not None]
        d_params = [tf.zeros_like(p) for values in ps for p in values]
        d_x = [tf.zeros_like(x)] if watched else []
        n_kept, n_state, n_w, n_b, n_p = len(kept.layout), len(d_states), len(d_weights), len(d_biases), len(d_params)

        def split(values: Sequence[Any], *sizes: int) -> list[list[Any]]:
            out, index = [], 0
            for count in sizes:
                out.append(list(values[index : index + count]))
                index += count
            return out

        def segment_body(index: tf.Tensor, *carried: tf.Tensor) -> Any:
            d_states, d_weights, d_biases, d_params, d_x = split(carried, n_state, n_w, n_b, n_p, len(carried))
            start = index * segment
            stop = tf.minimum(start + segment, steps_t)
            currents = first_currents(x, start, ks[0], bs[0])

            def recompute(t: tf.Tensor, *carried: tf.Tensor) -> Any:
                states = _nest(carried[n_kept:], stages)
                buffers = kept.write(carried[:n_kept], t - start, states)
                _, new = step(tf.gather(currents, t - start, axis=1), states, ks, bs, ps)
                return (t + 1, *buffers, *flat(new))

            # the states every step starts from; the last step's outputs are not needed
            _, *carried_inner = _loop(
                lambda t, *_: t < stop - 1,
                recompute,
                (start, *kept.empty(segment), *flat(kept.read(checkpoints, index))),
                segment - 1,
            )
            buffers = kept.write(carried_inner[:n_kept], stop - 1 - start, _nest(carried_inner[n_kept:], stages))

            def back(t: tf.Tensor, *carried: tf.Tensor) -> Any:
                d_states, d_weights, d_biases, d_params, d_x = split(carried, n_state, n_w, n_b, n_p, len(carried))
                before = kept.read(buffers, t - start)
                first = tf.gather(currents, t - start, axis=1)
                local_k = [ks[0], *[tf.identity(k) for k in ks[1:]]]
                local_b = [bs[0], *[None if b is None else tf.identity(b) for b in bs[1:]]]
                local_p = [[tf.identity(p) for p in values] for values in ps]
                sources = [*flat(before), first, *local_k[1:], *[b for b in local_b[1:] if b is not None]]
                sources += [p for values in local_p for p in values]
                with tf.GradientTape() as tape:
                    tape.watch(sources)
                    out, new = step(first, before, local_k, local_b, local_p)
                flat_new = flat(new)
                targets, seeds = list(flat_new), list(d_states)
                dy_t = tf.gather(dy, t, axis=1)
                for position, state in enumerate(flat_new):  # the output is one of the states (spikes, membrane)
                    if state is out:
                        seeds[position] = seeds[position] + dy_t
                        break
                else:
                    targets.append(out)
                    seeds.append(dy_t)
                grads = tape.gradient(
                    targets, sources, output_gradients=seeds, unconnected_gradients=tf.UnconnectedGradients.ZERO
                )
                with_bias = int(bs[0] is not None)
                g_states, (g_first,), g_k, g_b, g_p = split(grads, n_state, 1, n_w - 1, n_b - with_bias, n_p)
                h = tf.gather(x, t, axis=1)  # the first stage's product, by hand: its currents were computed ahead
                g_k = [tf.matmul(h, g_first, transpose_a=True), *g_k]
                g_b = [tf.reduce_sum(g_first, axis=0)] * with_bias + g_b
                d_weights = [a + g for a, g in zip(d_weights, g_k)]
                d_biases = [a + g for a, g in zip(d_biases, g_b)]
                d_params = [a + g for a, g in zip(d_params, g_p)]
                d_x = [_update(d_x[0], t, tf.matmul(g_first, ks[0], transpose_b=True))] if d_x else []
                return (t - 1, *g_states, *d_weights, *d_biases, *d_params, *d_x)

            result = _loop(
                lambda t, *_: t >= start,
                back,
                (stop - 1, *d_states, *d_weights, *d_biases, *d_params, *d_x),
                segment,
            )
            return (index - 1, *result[1:])

        result = _loop(
            lambda index, *_: index >= 0,
            segment_body,
            (n_segments - 1, *d_states, *d_weights, *d_biases, *d_params, *d_x),
            n_segments if isinstance(n_segments, int) else -1,
        )
        _, _, d_weights, d_biases, d_params, d_x = split(result, 1, n_state, n_w, n_b, n_p, len(d_x))
        grads: list[tf.Tensor] = list(d_x)
        b_iter, p_iter = iter(d_biases), iter(d_params)
        for stage, d_w, count in zip(stages, d_weights, counts):
            grads.append(d_w)
            if stage.use_bias:
                grads.append(next(b_iter))
            grads += [next(p_iter) for _ in range(count)]
        return grads

    _refuse_forward_mode(flat_inputs, where)
    return tf.custom_gradient(forward)(*flat_inputs)


def _refuse_forward_mode(tensors: Sequence[tf.Tensor], where: str) -> None:
    """Raise when a forward accumulator (``tf.autodiff.ForwardAccumulator``) watches an input: eagerly it would
    silently give no JVP (in a graph the refusal comes from the backward pass, which forward mode transposes)."""
    from tensorflow.python.eager import forwardprop_util

    from .._errors import HigherOrderError

    if tf.executing_eagerly() and forwardprop_util.pack_tangents([tf.convert_to_tensor(t) for t in tensors]).tangents:
        raise HigherOrderError(
            f"{where}: forward mode (tf.autodiff.ForwardAccumulator) was asked for; the fused loop has a backward "
            f"pass only. Fix: use the unfused layers (keras.layers.Dense, then the neuron layer), which forward "
            f"mode differentiates."
        )
