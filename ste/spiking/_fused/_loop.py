"""``fused_stack``: synapses (dense, convolutional) and spiking neurons over time in one loop, under one custom
gradient.

The unfused network (``Dense`` or a folded ``Conv2D`` over every step at once, then a neuron layer's time loop) is
fast, but its backward pass materializes the gradient of every layer boundary for the whole sequence, and Keras's
layers keep their float input spikes. Here each step computes its currents ``I[t] = f(h[t]; W) + b`` inside the
loop, for every stage of a stack (the spikes of stage i are the input of stage i+1 at the same step; ``f`` is the
stage's ``Synapse``, on flat frames), and runs each stage's own cell step (``SpikingCell.call``: its dynamics, reset
and surrogate; nothing of a neuron is written again here). The first stage's currents depend on the input only:
they are one product per segment (``[batch·segment, inputs]``).

What is kept for the backward pass: the cells' states at the start of every segment of ``segment`` steps (a spike
state as bits, ``ste._core._bitmask.pack_bits``; the others as floats), in buffers written in place. The backward loop
runs over the segments in reverse: it recomputes the segment's first-stage currents, the states every step starts
from (spikes as one byte each) and the later stages' currents (the same ops as the forward pass, so the same values
bit for bit), then steps back through it: each stage's cell under a ``GradientTape`` of its own (the cell's own
surrogate gradient), each synapse's vector-Jacobian products written out (``Synapse.kernel_gradient``,
``input_gradient``: never the synapse's forward product again), the kernels' gradients summed per step (dW +=
h[t]ᵀ·dI[t] for a dense one). The gradient of a stage's input spikes flows to the stage below within the step and
is never held for the whole sequence. Memory: the checkpoints (about T/segment steps of states), one segment's
states and currents (segment steps each); ``segment=1`` keeps every step's states.

Both loops are compiled with XLA by default (one kernel for the sequence instead of TensorFlow's cost per op and
step). The outputs are written into one ``[batch, time, units]`` buffer in place (outside XLA with
``TensorStridedSliceUpdate``, which forwards its input's buffer), the input's gradient likewise, and only when a
tape watches the input (a network's input data is not differentiated, so its gradient is neither computed nor
stored). Gradients of these gradients are refused with :class:`ste.errors.HigherOrderError` (the backward pass is a loop
of its own that a second tape would not see through).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from ..._core._bitmask import higher_order_witness, pack_bits, refuse_higher_order, unpack_values
from ..._core._xla import compiling_with_xla
from .._cell import SpikingCell
from ._synapses import Synapse

__all__ = ["Stage", "default_segment", "fused_stack"]


@dataclass(frozen=True)
class Stage:
    """One synapse and its neurons: the cell, the synapse, whether there is a bias, the cell's learned parameter
    names."""

    cell: SpikingCell
    synapse: Synapse
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
    """Buffers ``[size, batch, width]`` (one entry per index) of some ``[batch, width]`` tensors; the binary ones
    (spike states) as bits, or as one byte each with ``bits=False``.

    Written in place at an index and read at one (a stack of TensorLists made XLA copy the whole list at every push:
    one segment's states twice)."""

    def __init__(
        self,
        layout: Sequence[tuple[bool, int]],
        batch: tf.Tensor,
        static_batch: int | None,
        dtype: Any,
        bits: bool = True,
    ) -> None:
        self.layout, self.batch, self.static_batch, self.dtype = list(layout), batch, static_batch, dtype
        self.bits = bits

    def empty(self, size: Any) -> list[tf.Tensor]:
        out = []
        for binary, width in self.layout:
            if binary and self.bits:
                out.append(tf.zeros(tf.stack([size, (self.batch * width + 7) // 8]), tf.uint8))
            else:
                out.append(tf.zeros(tf.stack([size, self.batch, width]), tf.uint8 if binary else self.dtype))
        return out

    def write(self, buffers: Sequence[tf.Tensor], index: tf.Tensor, values: Sequence[tf.Tensor]) -> list[Any]:
        return [
            _update(buffer, index, self._stored(value) if binary else value, axis=0)
            for buffer, value, (binary, _) in zip(buffers, values, self.layout)
        ]

    def _stored(self, spikes: tf.Tensor) -> tf.Tensor:
        return pack_bits(spikes > 0) if self.bits else tf.cast(spikes > 0, tf.uint8)

    def read(self, buffers: Sequence[tf.Tensor], index: tf.Tensor) -> list[tf.Tensor]:
        out = []
        for buffer, (binary, width) in zip(buffers, self.layout):
            value = tf.gather(buffer, index)
            if binary and self.bits:
                value = unpack_values(value, tf.stack([self.batch, width]), 0, 1, self.dtype)
            elif binary:
                value = tf.cast(value, self.dtype)
            value.set_shape([self.static_batch, width])
            out.append(value)
        return out


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


def _grouped(values: Sequence[Any], counts: Sequence[int]) -> list[list[Any]]:
    """``values`` cut into consecutive groups of ``counts[i]`` values."""
    out, index = [], 0
    for count in counts:
        out.append(list(values[index : index + count]))
        index += count
    return out


def _nest(flat: Sequence[Any], stages: Sequence[Stage]) -> list[list[Any]]:
    """A flat list of every stage's states as one group per stage."""
    return _grouped(flat, [len(stage.cell.state_names) for stage in stages])


def fused_stack(
    x: tf.Tensor,
    stages: Sequence[Stage],
    kernels: Sequence[tf.Tensor],
    biases: Sequence[tf.Tensor | None],
    parameters: Sequence[Sequence[tf.Tensor]],
    segment: int | None = None,
    where: str = "Fused",
    jit_compile: bool = True,
    mask: tf.Tensor | None = None,
) -> tf.Tensor:
    """The last stage's outputs ``[batch, time, units]`` for input ``x`` ``[batch, time, inputs]`` (frames flat).

    ``kernels[i]`` is ``stages[i].synapse``'s kernel, ``biases[i]`` its ``[filters]`` bias or None,
    ``parameters[i]`` the values of ``stages[i].names`` (the cell reads them through ``SpikingCell._read``); all in
    ``x``'s dtype. ``jit_compile``: compile the forward and backward loops with XLA (in a graph).

    ``mask``: a boolean ``[batch, time]`` Keras mask, or None. A masked step is skipped as ``keras.layers.RNN`` (with
    ``zero_output_for_mask=True``) skips it: every stage keeps its states (``tf.where(mask, new, old)``) and outputs
    0, so the step has no effect on the outputs, states or gradients. Without a mask the loops have none of these
    ops.
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
    iterations = n_segments if isinstance(n_segments, int) else -1
    widths = [stage.synapse.units for stage in stages]
    witness = higher_order_witness(x)
    watched = _input_watched(x)
    dtype = x.dtype
    counts = [len(p) for p in parameters]
    masks_given = [] if mask is None else [tf.cast(mask, tf.bool)]
    flat_inputs = [x]
    for kernel, bias, values in zip(kernels, biases, parameters):
        flat_inputs += [kernel, *([bias] if bias is not None else []), *values]
    state_layout = [(binary, width) for stage, width in zip(stages, widths) for binary in stage.binary]
    current_layout = [(False, width) for width in widths[1:]]  # the currents of every stage but the first

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

    def synapse(stage: Stage, h: tf.Tensor, kernel: tf.Tensor, bias: tf.Tensor | None) -> tf.Tensor:
        current = stage.synapse.apply(h, kernel)
        return current if bias is None else current + stage.synapse.bias(bias)

    def first_currents(x: tf.Tensor, start: tf.Tensor, kernel: tf.Tensor, bias: tf.Tensor | None) -> tf.Tensor:
        """The first stage's currents ``[batch, segment, units]`` for the segment from ``start``, in one product
        (they depend on the input only). A last, shorter segment repeats its last step (those rows are not read)."""
        times = tf.minimum(start + tf.range(segment), steps_t - 1)
        inputs = tf.gather(x, times, axis=1)
        current = synapse(stages[0], tf.reshape(inputs, [-1, inputs.shape[-1]]), kernel, bias)
        return tf.reshape(current, tf.stack([tf.shape(x)[0], segment, widths[0]]))

    def cell_step(
        stage: Stage,
        current: tf.Tensor,
        group: Sequence[tf.Tensor],
        values: Sequence[tf.Tensor],
        keep: tf.Tensor | None,
    ) -> tuple[tf.Tensor, list[tf.Tensor]]:
        """One step of a stage's neurons through the cell's own ``call``; where ``keep`` (the step's mask,
        ``[batch, 1]``) is False, the states are the old ones and the output is 0 (as ``keras.layers.RNN``)."""
        stage.cell._read = dict(zip(stage.names, values))
        try:
            h, new = stage.cell.call(current, list(group))
        finally:
            stage.cell._read = None
        new = list(tf.nest.flatten(new))
        if keep is None:
            return h, new
        return tf.where(keep, h, tf.zeros_like(h)), [tf.where(keep, n, old) for n, old in zip(new, group)]

    def step(
        first: tf.Tensor,
        states: Sequence[Sequence[tf.Tensor]],
        ks: Sequence[tf.Tensor],
        bs: Sequence[tf.Tensor | None],
        ps: Sequence[Sequence[tf.Tensor]],
        keep: tf.Tensor | None,
    ) -> tuple[tf.Tensor, list[list[tf.Tensor]], list[tf.Tensor]]:
        """One time step of every stage; ``first`` is the first stage's current, ``keep`` the step's mask (or
        None). The output, every stage's new states, and the currents of every stage but the first."""
        new_states, currents, h = [], [], first
        for index, (stage, kernel, bias, values, group) in enumerate(zip(stages, ks, bs, ps, states)):
            current = first if index == 0 else synapse(stage, h, kernel, bias)
            if index:
                currents.append(current)
            h, new = cell_step(stage, current, group, values, keep)
            new_states.append(new)
        return h, new_states, currents

    def keep_at(masks: Sequence[tf.Tensor], t: tf.Tensor) -> tf.Tensor | None:
        """The mask at step ``t`` as ``[batch, 1]`` (None without a mask)."""
        return tf.gather(masks[0], t, axis=1)[:, None] if masks else None

    def initial(batch: tf.Tensor) -> list[list[tf.Tensor]]:
        return [
            [tf.zeros(tf.stack([batch, w]), dtype) for _ in stage.cell.state_names] for stage, w in zip(stages, widths)
        ]

    def flat(states: Sequence[Sequence[tf.Tensor]]) -> list[tf.Tensor]:
        return [s for group in states for s in group]

    def forward_loop(*inputs: tf.Tensor) -> list[tf.Tensor]:
        """The outputs and the checkpoints (every stage's states at the start of every segment)."""
        x, masks = inputs[0], inputs[len(flat_inputs) :]
        ks, bs, ps = unflatten(inputs[1 : len(flat_inputs)])
        batch = tf.shape(x)[0]
        kept = _Kept(state_layout, batch, x.shape[0], dtype)
        outputs = tf.zeros(tf.stack([batch, steps_t, widths[-1]]), dtype)
        n_kept = len(state_layout)

        def segment_body(index: tf.Tensor, outputs: tf.Tensor, *carried: tf.Tensor) -> Any:
            checkpoints = kept.write(carried[:n_kept], index, carried[n_kept:])
            start = index * segment
            currents = first_currents(x, start, ks[0], bs[0])

            def step_body(t: tf.Tensor, outputs: tf.Tensor, *flat_states: tf.Tensor) -> Any:
                first = tf.gather(currents, t - start, axis=1)
                out, new, _ = step(first, _nest(flat_states, stages), ks, bs, ps, keep_at(masks, t))
                return (t + 1, _update(outputs, t, out), *flat(new))

            stop = tf.minimum(start + segment, steps_t)
            _, outputs, *ends = _loop(lambda t, *_: t < stop, step_body, (start, outputs, *carried[n_kept:]), segment)
            return (index + 1, outputs, *checkpoints, *ends)

        _, outputs, *carried = _loop(
            lambda index, *_: index < n_segments,
            segment_body,
            (tf.constant(0), outputs, *kept.empty(n_segments), *flat(initial(batch))),
            iterations,
        )
        return [outputs, *carried[:n_kept]]

    def forward(*inputs: tf.Tensor) -> Any:
        from tensorflow.python.eager import record

        with record.stop_recording():  # nothing inside is differentiated
            outputs, *checkpoints = compiled(forward_loop, jit_compile)(*inputs, *masks_given)

        def grad(dy: tf.Tensor) -> Any:
            grads = compiled(backward, jit_compile)(*inputs, *masks_given, *checkpoints, dy)
            if not watched:
                grads = [None, *grads]
            fix = (
                "Fix: use the unfused layers (keras.layers.Dense or ste.spiking.TimeDistributed(Conv2D), then the "
                "neuron layer), whose gradients TensorFlow differentiates again."
            )
            return [
                None if g is None else refuse_higher_order(g, witness, where, "is a loop of its own", fix=fix)
                for g in grads
            ]

        return outputs, grad

    def backward(*inputs: tf.Tensor) -> list[tf.Tensor]:
        """Segment by segment from the last: recompute its states and currents from its checkpoint, then step back
        through it: each stage's cell under a tape of its own, its synapse's products by hand."""
        x, dy = inputs[0], inputs[-1]
        ks, bs, ps = unflatten(inputs[1 : len(flat_inputs)])
        masks = inputs[len(flat_inputs) : len(flat_inputs) + len(masks_given)]
        batch = tf.shape(x)[0]
        kept = _Kept(state_layout, batch, x.shape[0], dtype)
        # one segment's states, written and read back at every step: spikes as bytes, a cast XLA fuses into the
        # cells' backward (as bits, packing and unpacking them at every step made the dense benchmark's training
        # step 1.39x slower, the conv one's 1.10x; the bytes add 7/8 of a byte per spike of one segment)
        segment_states = _Kept(state_layout, batch, x.shape[0], dtype, bits=False)
        kept_currents = _Kept(current_layout, batch, x.shape[0], dtype)
        checkpoints = list(inputs[len(flat_inputs) + len(masks) : -1])
        n_kept, n_currents, n_stages = len(state_layout), len(current_layout), len(stages)
        sizes = [len(stage.cell.state_names) for stage in stages]

        # carried: every state's gradient, every kernel's, every bias's (None: a zero never used), every parameter's
        d_biases0 = [tf.zeros_like(b) if b is not None else tf.zeros([0], dtype) for b in bs]
        zeros = [*flat(initial(batch)), *[stage.synapse.gradient_sum(k) for stage, k in zip(stages, ks)], *d_biases0]
        zeros += [tf.zeros_like(p) for values in ps for p in values]
        zeros += [tf.zeros_like(x)] if watched else []
        lengths = (sum(sizes), n_stages, n_stages, sum(counts), int(watched))

        def segment_body(index: tf.Tensor, *carried: tf.Tensor) -> Any:
            start = index * segment
            stop = tf.minimum(start + segment, steps_t)
            first_all = first_currents(x, start, ks[0], bs[0])

            def recompute(t: tf.Tensor, *carried: tf.Tensor) -> Any:
                states, currents, flat_states = _grouped(carried, [n_kept, n_currents, len(carried)])
                states = segment_states.write(states, t - start, flat_states)
                first = tf.gather(first_all, t - start, axis=1)
                _, new, later = step(first, _nest(flat_states, stages), ks, bs, ps, keep_at(masks, t))
                currents = kept_currents.write(currents, t - start, later)
                return (t + 1, *states, *currents, *flat(new))

            # the states every step starts from and the currents of the stages after the first
            _, *inner = _loop(
                lambda t, *_: t < stop,
                recompute,
                (start, *segment_states.empty(segment), *kept_currents.empty(segment), *kept.read(checkpoints, index)),
                segment,
            )
            state_buffers, current_buffers, _ = _grouped(inner, [n_kept, n_currents, len(inner)])

            def back(t: tf.Tensor, *carried: tf.Tensor) -> Any:
                d_states, d_kernels, d_biases, d_params, d_x = _grouped(carried, lengths)
                d_states, d_params = _nest(d_states, stages), _grouped(d_params, counts)
                before = _nest(segment_states.read(state_buffers, t - start), stages)
                currents = [tf.gather(first_all, t - start, axis=1), *kept_currents.read(current_buffers, t - start)]
                tapes, outs, news = [], [], []
                keep = keep_at(masks, t)
                for stage, current, group, values in zip(stages, currents, before, ps):
                    with tf.GradientTape() as tape:
                        tape.watch([*group, current, *values])
                        out, new = cell_step(stage, current, group, values, keep)
                    tapes.append(tape)
                    outs.append(out)
                    news.append(new)
                d_out = tf.gather(dy, t, axis=1)
                for i in reversed(range(n_stages)):
                    targets, seeds = list(news[i]), list(d_states[i])
                    for position, state in enumerate(news[i]):  # the output is one of the states (spikes, membrane)
                        if state is outs[i]:
                            seeds[position] = seeds[position] + d_out
                            break
                    else:
                        targets.append(outs[i])
                        seeds.append(d_out)
                    grads = tapes[i].gradient(
                        targets,
                        [*before[i], currents[i], *ps[i]],
                        output_gradients=seeds,
                        unconnected_gradients=tf.UnconnectedGradients.ZERO,
                    )
                    d_states[i], d_current = grads[: sizes[i]], grads[sizes[i]]
                    d_params[i] = [a + g for a, g in zip(d_params[i], grads[sizes[i] + 1 :])]
                    h = outs[i - 1] if i else tf.gather(x, t, axis=1)
                    d_kernels[i] = d_kernels[i] + stages[i].synapse.kernel_gradient(h, d_current)
                    if bs[i] is not None:
                        d_biases[i] = d_biases[i] + stages[i].synapse.bias_gradient(d_current)
                    if i:
                        d_out = stages[i].synapse.input_gradient(d_current, ks[i])
                    elif d_x:
                        d_x = [_update(d_x[0], t, stages[0].synapse.input_gradient(d_current, ks[0]))]
                return (t - 1, *flat(d_states), *d_kernels, *d_biases, *flat(d_params), *d_x)

            result = _loop(lambda t, *_: t >= start, back, (stop - 1, *carried), segment)
            return (index - 1, *result[1:])

        result = _loop(lambda index, *_: index >= 0, segment_body, (n_segments - 1, *zeros), iterations)
        _, d_kernels, d_biases, d_params, d_x = _grouped(result[1:], lengths)
        grads: list[tf.Tensor] = list(d_x)
        for stage, d_kernel, d_bias, d_values in zip(stages, d_kernels, d_biases, _grouped(d_params, counts)):
            grads += [stage.synapse.kernel_from_sum(d_kernel), *([d_bias] if stage.use_bias else []), *d_values]
        return grads

    _refuse_forward_mode(flat_inputs, where)
    return tf.custom_gradient(forward)(*flat_inputs)


def _refuse_forward_mode(tensors: Sequence[tf.Tensor], where: str) -> None:
    """Raise when a forward accumulator (``tf.autodiff.ForwardAccumulator``) watches an input: eagerly it would
    silently give no JVP (in a graph the refusal comes from the backward pass, which forward mode transposes)."""
    from tensorflow.python.eager import forwardprop_util

    from ...errors import HigherOrderError

    if tf.executing_eagerly() and forwardprop_util.pack_tangents([tf.convert_to_tensor(t) for t in tensors]).tangents:
        raise HigherOrderError(
            f"{where}: forward mode (tf.autodiff.ForwardAccumulator) was asked for; the fused loop has a backward "
            f"pass only. Fix: use the unfused layers (keras.layers.Dense or ste.spiking.TimeDistributed(Conv2D), then "
            f"the neuron layer), which forward mode differentiates."
        )
