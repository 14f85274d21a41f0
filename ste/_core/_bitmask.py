"""Bit-packed boolean masks for the backward pass, and the switch that turns them off.

A rule whose derivative is a predicate of its input (``straight_through``: ``abs(x) <= clip``) needs one bit per
element, not the float input: the op packs the predicate into ``uint8`` (8 elements per byte, 1/32 of a float32
tensor) in the forward pass and unpacks it in the backward pass. Packing is one multiply per 8 elements: the eight
0/1 bytes are reinterpreted as one ``uint64`` and multiplied by 0x8040201008040201, which gathers them into the top
byte (element ``i`` of a group lands on bit ``7 − i``; the byte order of ``tf.bitcast`` is little-endian, as on
every platform TensorFlow ships for).

Each step has two spellings with the same result, chosen while tracing (``jit_compile`` or not). TensorFlow's kernels
run one pass over memory per op, so outside XLA the top byte is sliced out of the product (one pass, not a shift and
a cast) and unpacking looks up each byte's 8 values in a 256 × 8 table (one gather, where masking each byte with its
8 bits takes three passes: and, compare, cast). XLA fuses elementwise forms into the ops around them and runs a
gather slower, so under XLA packing is a sum of the 8 weighted bits (distinct powers of two, no carries) and
unpacking masks each byte with its bits.

Where the bits cost far more time than the targets allow, the default keeps the float input instead (see
:func:`keep_bits`): ``bfloat16`` under XLA, where XLA:CPU computes the bfloat16 product in float32 on the unpacked
``[bytes, 8]`` layout (:func:`times_mask`), and the float input is only 16 bits; a tensor under :data:`MIN_ELEMENTS`
elements, whose mask saves a few KiB; and an input of the traced function, which its caller holds anyway. The times
are measured in docs/performance.md ("An elementwise op, forward + backward").

``ste.set_bit_masks(False)`` (or the environment variable ``STE_BIT_MASKS=0``, or ``with ste.bit_masks(False):``)
makes ops keep their float inputs again, as in ste 0.1; ``True`` keeps bits also where the default does not;
``None`` restores the default. It is read when an op is traced (in ``tf.function``) or called (eagerly).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import tensorflow as tf

from ._xla import compiling_with_xla

__all__ = [
    "MIN_ELEMENTS",
    "SLOW_UNDER_XLA",
    "CallerHeld",
    "bit_masks",
    "bit_masks_enabled",
    "held_by_caller",
    "higher_order_witness",
    "keep_bits",
    "opaque",
    "pack_bits",
    "read_after",
    "refuse_higher_order",
    "set_bit_masks",
    "times_mask",
    "unpack_bits",
    "unpack_values",
]

_MAGIC = 0x8040201008040201
_BITS = (128, 64, 32, 16, 8, 4, 2, 1)  # the bit of element i of a group of 8


_UNSET: Any = object()  # no ``with ste.bit_masks(...)`` block is active in this thread


class _State(threading.local):
    override: Any = _UNSET


_WORDS: dict[str, bool | None] = {
    **dict.fromkeys(("0", "false", "no", "off"), False),
    **dict.fromkeys(("1", "true", "yes", "on", "always"), True),
    **dict.fromkeys(("", "auto", "default"), None),
}


def _from_environment(value: str) -> bool | None:
    """``STE_BIT_MASKS``'s setting; an unknown word is refused (read at import: ``import ste`` fails with it)."""
    word = value.strip().lower()
    if word not in _WORDS:
        from ..errors import ParameterError

        raise ParameterError(
            f"the environment variable STE_BIT_MASKS={value!r} is not a setting of ste's bit masks: expected 0 "
            f"(off: keep float inputs), 1 (bits wherever they can be kept) or auto (the default policy); the "
            f"accepted spellings are {sorted(w for w in _WORDS if w)}. Fix: set one of them, or unset the variable."
        )
    return _WORDS[word]


_STATE = _State()
_DEFAULT: list[bool | None] = [_from_environment(os.environ.get("STE_BIT_MASKS", ""))]
# The ``with ste.bit_masks(...)`` blocks open in any thread, innermost last: a distribution strategy's replica
# threads, which have no block of their own, follow the innermost (the block of the thread that started them).
_OPEN: list[Any] = []
_OPEN_LOCK = threading.Lock()

#: Dtypes whose mask the default keeps as a float input under XLA, where unpacking the bits costs more than the
#: float input saves (docs/performance.md).
SLOW_UNDER_XLA = frozenset({tf.bfloat16})


#: Below this many elements (a float32 mask under 256 KiB) the default keeps the float input, eagerly and in a graph:
#: packing and unpacking add a dozen ops whose fixed cost is most of a small op's time, to save a few KiB
#: (``benchmarks/packing_rule.py``; docs/performance.md, "Bits, not floats"). A graph tensor whose size is not
#: known while tracing keeps bits.
MIN_ELEMENTS = 65536


def _in_replica_thread() -> bool:
    """Whether this thread is one that ``MirroredStrategy.run`` started for a replica (it runs the replica's
    function while the thread that called ``run`` waits)."""
    return hasattr(threading.current_thread(), "replica_id_in_sync_group")


def _setting() -> bool | None:
    """True (keep bits wherever they can be kept), False (never), None (the default policy of :func:`keep_bits`)."""
    override = _STATE.override
    if override is _UNSET and _OPEN and _in_replica_thread():
        with _OPEN_LOCK:
            override = _OPEN[-1] if _OPEN else _UNSET
    return _DEFAULT[0] if override is _UNSET else override


def bit_masks_enabled() -> bool:
    """Whether ops may keep bit-packed masks instead of float inputs for their backward pass (default True; where
    they do is :func:`keep_bits`'s decision)."""
    return _setting() is not False


def keep_bits(x: tf.Tensor) -> bool:
    """Whether an op should keep ``x``'s mask as bits.

    Not with bit masks off. Eagerly, only from :data:`MIN_ELEMENTS` elements (packing costs a dozen op
    dispatches). By default (``ste.set_bit_masks(None)``), in a graph, not below :data:`MIN_ELEMENTS` elements
    (a known size: the ops cost more than the few KiB save), not for an input of the function being traced (its
    caller holds it anyway: the bits would only cost time), nor under XLA for a dtype in :data:`SLOW_UNDER_XLA`
    (``bfloat16``), where the bits cost more time than the 16-bit float input saves (docs/performance.md);
    ``ste.set_bit_masks(True)`` keeps bits there too. Everywhere else (a tensor of at least :data:`MIN_ELEMENTS`
    elements, or of a size unknown while tracing, computed inside ``tf.function``, with or without XLA, every other
    dtype): bits.
    """
    setting = _setting()
    if setting is False:
        return False
    size = x.shape.num_elements()
    if tf.executing_eagerly():
        return size is None or size >= MIN_ELEMENTS
    if setting is None and (
        (size is not None and size < MIN_ELEMENTS)
        or _function_input(x)
        or (x.dtype in SLOW_UNDER_XLA and compiling_with_xla())
    ):
        return False
    return True


def _function_input(x: tf.Tensor) -> bool:
    """Whether ``x`` is an input of the function being traced (through identities): its caller holds it for the
    whole call, so bits would save nothing and cost the packing (the float input costs nothing; docs/performance.md
    measures both). Where the op then keeps the float input, its backward pass reads it only once
    the upstream gradient exists (:class:`CallerHeld`)."""
    op = getattr(x, "op", None)
    while op is not None and op.type == "Identity" and op.inputs:
        op = op.inputs[0].op
    return op is not None and op.type == "Placeholder"


def held_by_caller(x: tf.Tensor) -> bool:
    """Whether a mask-only op keeps ``x`` itself, not bits, because the traced function's caller holds ``x`` anyway
    (in a graph, by default: :func:`keep_bits`'s rule)."""
    return _setting() is None and not tf.executing_eagerly() and _function_input(x)


class CallerHeld(tuple):  # type: ignore[type-arg]
    """The inputs a mask-only op keeps as they are because its caller holds them (:func:`held_by_caller`): the
    backward pass reads them through :func:`read_after`, once the upstream gradient exists. Without that wait
    TensorFlow's executor computes the mask (which depends on forward tensors only) during the forward pass and
    keeps it as a float tensor, one more input size of memory per op at the peak."""


def read_after(dy: Any, xs: Any) -> list[tf.Tensor]:
    """``xs``, read only once ``dy`` exists (identities with control dependencies; no copy); as they are under XLA,
    which orders its own buffers."""
    if compiling_with_xla():
        return list(xs)
    with tf.control_dependencies(tf.nest.flatten(dy)):
        return [tf.identity(x) for x in xs]


def _checked(enabled: Any, where: str) -> bool | None:
    if enabled is not None and not isinstance(enabled, bool):
        from ..errors import ParameterError

        raise ParameterError(
            f"{where}: expected True (bits wherever they can be kept), False (keep float inputs, as in ste 0.1) or "
            f"None (the default: bits except bfloat16 under XLA); received {enabled!r}."
        )
    return enabled


def set_bit_masks(enabled: bool | None) -> None:
    """Choose, for every op traced or called from now on, what mask-only rules keep for their backward pass.

    * ``None`` (the default): a bit-packed mask (1 bit per element), except for ``bfloat16`` inputs traced under XLA
      (``jit_compile=True``), which keep their float input: there XLA:CPU's unpacking costs more time than a saving
      of 16 bits per element is worth (docs/performance.md, "Binarized residual conv net").
    * ``True``: bit-packed masks wherever an op can keep them, also for ``bfloat16`` under XLA.
    * ``False``: the float inputs, as in ste 0.1 (for debugging or comparison).

    The gradients are bit-identical in every case. The environment variable ``STE_BIT_MASKS`` sets it at import
    (``0``: False, ``1``: True, unset or ``auto``: None).
    """
    _DEFAULT[0] = _checked(enabled, "ste.set_bit_masks")


@contextlib.contextmanager
def bit_masks(enabled: bool | None) -> Iterator[None]:
    """``with ste.bit_masks(False): ...``: the same switch as :func:`set_bit_masks`, for a block, in this thread and
    in the replica threads a distribution strategy (``MirroredStrategy.run``, Keras ``fit``) starts from it."""
    value = _checked(enabled, "ste.bit_masks")
    previous, _STATE.override = _STATE.override, value
    with _OPEN_LOCK:
        _OPEN.append(value)
    try:
        yield
    finally:
        _STATE.override = previous
        with _OPEN_LOCK:
            _OPEN.reverse()
            _OPEN.remove(value)  # this block's entry (the last equal one: blocks of other threads may be open)
            _OPEN.reverse()


def pack_bits(mask: tf.Tensor) -> tf.Tensor:
    """A boolean tensor of any shape as a flat ``uint8`` tensor of ``ceil(size / 8)`` bytes (its ops under the name
    scope ``pack_bits``, which a profile tells apart)."""
    with tf.name_scope("pack_bits"):
        return _pack_bits(mask)


def _pack_bits(mask: tf.Tensor) -> tf.Tensor:
    flat = tf.reshape(tf.cast(mask, tf.uint8), [-1])
    size = flat.shape.num_elements()
    if size is None:
        flat = tf.pad(flat, [[0, tf.math.floormod(8 - tf.math.floormod(tf.size(flat), 8), 8)]])
    elif size % 8:
        flat = tf.pad(flat, [[0, 8 - size % 8]])
    if compiling_with_xla():
        # a sum of distinct powers of two (no carries): one reduction that XLA fuses with the mask's computation.
        # TensorFlow's XLA bridge accumulates it in uint32 and XLA keeps that (4 bytes per 8 elements), converted
        # where the unpacking reads it. A uint8 bitwise-or reduction (``XlaReduce``) keeps 1 byte but made the
        # binarized residual net's XLA step slower (1.055-1.064x against 1.025-1.039x the plain step, in-process
        # A/B, docs/performance.md), its 8-element uint8 reductions compiling to slower loops on XLA:CPU.
        return tf.reduce_sum(tf.reshape(flat, [-1, 8]) * tf.constant(_BITS, tf.uint8), axis=1)
    groups = tf.bitcast(tf.reshape(flat, [-1, 8]), tf.uint64) * tf.constant(_MAGIC, tf.uint64)
    return tf.bitcast(groups, tf.uint8)[:, 7]  # the top byte (little-endian)


def _table(low: Any, high: Any, dtype: tf.DType) -> tf.Tensor:
    """The 256 × 8 table of byte ``b``'s 8 elements, ``high`` where the bit is set, else ``low``."""
    bits = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).astype(bool)  # the order pack_bits uses
    return tf.constant(np.where(bits, high, low), dtype)


def _bitwise_unpacked(packed: tf.Tensor) -> tf.Tensor:
    """``[bytes, 8]`` booleans, by masking each byte with its 8 bits (the form XLA fuses into the gradient's product;
    an expression of the flat index instead lets XLA fuse the packing into it too, recomputing each byte 8 times)."""
    return tf.not_equal(tf.bitwise.bitwise_and(packed[:, None], tf.constant(_BITS, tf.uint8)), 0)


def unpack_bits(packed: tf.Tensor, shape: tf.Tensor) -> tf.Tensor:
    """The boolean tensor of ``shape`` that :func:`pack_bits` packed."""
    if compiling_with_xla():
        return _unpadded(_bitwise_unpacked(packed), shape)
    return _unpadded(tf.gather(_table(False, True, tf.bool), tf.cast(packed, tf.int32)), shape)


def _unpadded(groups: tf.Tensor, shape: Any) -> tf.Tensor:
    """``groups`` (``[bytes, 8]``) without the padding :func:`pack_bits` added, in ``shape``; no slice (a copy)
    when the shape is known and its size a multiple of 8."""
    static = tf.get_static_value(shape)
    if static is not None and int(np.prod(static)) % 8 == 0:
        return tf.reshape(groups, shape)
    return tf.reshape(tf.reshape(groups, [-1])[: tf.reduce_prod(shape)], shape)


def unpack_values(packed: tf.Tensor, shape: tf.Tensor, low: float, high: float, dtype: tf.DType) -> tf.Tensor:
    """``tf.where(unpack_bits(packed, shape), high, low)`` in ``dtype``: outside XLA in one pass, each byte looking up
    its 8 values in a 256 × 8 table; under XLA spelled as that select, because XLA keeps the gather a loop on CPU
    and fuses the select into the ops around it."""
    if compiling_with_xla():
        return tf.where(unpack_bits(packed, shape), tf.constant(high, dtype), tf.constant(low, dtype))
    return _unpadded(tf.gather(_table(low, high, dtype), tf.cast(packed, tf.int32)), shape)


def times_mask(dy: tf.Tensor, packed: tf.Tensor, shape: tf.Tensor) -> tf.Tensor:
    """``dy * tf.cast(unpack_bits(packed, shape), dy.dtype)``, bit for bit as that product is where the mask is
    computed from a float input (the plain path), in the spelling each compiler runs fastest.

    Outside XLA the mask is unpacked into ``dy.dtype`` in one pass (:func:`unpack_values`). Under XLA it is spelled
    as that cast: XLA simplifies a product with a cast mask into a select (``dy·0`` becomes ``+0``, also for negative
    ``dy``, and NaN·0 becomes ``+0``), as in the plain path. Not in bfloat16, which XLA:CPU computes in float32
    (``−0``, NaN as IEEE multiplication gives them) and, on the ``[bytes, 8]`` layout, slower than the select: there
    it is ``tf.where(mask, dy, dy·0)`` in float32, the same values (``dy·1 = dy`` and ``dy·0`` are exact).
    """
    if not compiling_with_xla():
        return opaque(dy * unpack_values(packed, shape, 0, 1, dy.dtype))
    mask = unpack_bits(packed, shape)
    if dy.dtype != tf.bfloat16:
        return dy * tf.cast(mask, dy.dtype)
    wide = tf.cast(dy, tf.float32)
    return tf.cast(tf.where(mask, wide, wide * 0.0), dy.dtype)


def opaque(gradient: Any) -> Any:
    """``gradient`` (a tensor or a structure of them, ``None`` allowed) as it is, behind an op Grappler does not see
    through (``Snapshot``, which hands its input's buffer on: no copy), in a graph outside XLA.

    Without it Grappler's ``constant_folding`` and ``arithmetic_optimization`` regroup the backward products of a
    chain with constant factors between the ops (``y = op(y) * 0.999``: ``((g·m₅)·c)·m₄`` becomes ``g·(c²·m₅)·m₄``),
    and the node each unpacking waits for (``ste._core._rules._saved.read_after_mask``) disappears with its control
    dependency: every mask is then unpacked into floats during the forward pass and kept, so a chain of ops peaks at
    more memory with bits than with bit masks off. The
    opaque op ends each product where the rule computed it, so the rewrites stay on for the rest of the graph. Eagerly
    (Grappler does not run) and under XLA (which fuses the product into its consumers) it is left out. A gradient of
    the product passes through it as through an identity (``ste/_patches.py``'s ``snapshot_gradient``).
    """
    if tf.executing_eagerly() or compiling_with_xla():
        return gradient
    return tf.nest.map_structure(lambda g: g if g is None else tf.raw_ops.Snapshot(input=g), gradient)


# -- higher-order gradients ------------------------------------------------------------------------------------
#
# A packed backward pass is exact to first order. Its result still depends on the input where the plain path's does:
# a binary-input layer's kernel gradient is (rebuilt input)ᵀ·dy, a ste.mask_rule rule may use a kept tensor such as
# MagnitudeAwareSign's α. Rebuilt from bits, those are constants to a tape, and a gradient of the gradient would
# silently miss their path to the input (d/dx of ‖∂L/∂W‖²: 64 instead of 320). So the packed path ties them to a
# witness of the input, a tensor of no elements, and the tie's gradient raises: differentiating through it is an
# error, a first-order gradient never reaches it. Where a mask is all the backward reads (straight_through & co.),
# nothing is tied: a mask has no derivative on either path, so higher orders already agree.


def higher_order_witness(x: tf.Tensor) -> tf.Tensor | None:
    """A tensor of no elements that a tape sees as computed from ``x`` (not keeping ``x``); None eagerly without
    any tape (no gradient can follow)."""
    if tf.executing_eagerly() and not _tape_active():
        return None

    @tf.custom_gradient  # type: ignore[untyped-decorator]
    def witness(x: tf.Tensor) -> Any:
        return tf.zeros([0], x.dtype), lambda d: None  # never reached: the tie's gradient raises first

    return witness(x)


def refuse_higher_order(
    tensor: tf.Tensor, witness: tf.Tensor | None, op: str, what: str, fix: str | None = None
) -> tf.Tensor:
    """``tensor`` (rebuilt from bits in a backward pass), whose gradient raises :class:`ste.errors.HigherOrderError`: a
    tape that reaches it differentiates a packed backward pass (see above). ``fix`` replaces the default fix (turn
    bit masks off)."""
    if witness is None:
        return tensor

    @tf.custom_gradient  # type: ignore[untyped-decorator]
    def tie(tensor: tf.Tensor, witness: tf.Tensor) -> Any:
        def grad(*_: Any) -> Any:
            from ..errors import HigherOrderError

            if fix is not None:
                raise HigherOrderError(
                    f"{op}: a gradient of this op's gradient (second or higher order, or forward mode) was asked "
                    f"for; its backward pass {what}, which a tape does not differentiate. {fix}"
                )
            raise HigherOrderError(
                f"{op}: a gradient of this op's gradient (second or higher order) was asked for; with bit masks on, "
                f"its backward pass {what}, a constant to the tape, so that gradient would silently miss the path "
                f"through it. Fix: run the forward pass under "
                f"`with ste.bit_masks(False):` (or ste.set_bit_masks(False)): the op then keeps its float input and "
                f"higher-order gradients are exact."
            )

        return tf.identity(tensor), grad

    return tie(tensor, witness)


def _tape_active() -> bool:
    from tensorflow.python.eager import record

    return bool(record.could_possibly_record())
