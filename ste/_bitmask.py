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
gather slower, so under XLA packing is a sum of the 8 weighted bits and unpacking masks each byte with its bits.

``ste.set_bit_masks(False)`` (or the environment variable ``STE_BIT_MASKS=0``, or ``with ste.bit_masks(False):``)
makes ops keep their float inputs again, as in ste 0.1. It is read when an op is traced (in ``tf.function``) or
called (eagerly).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import tensorflow as tf

__all__ = [
    "EAGER_MIN_ELEMENTS",
    "bit_masks",
    "bit_masks_enabled",
    "keep_bits",
    "pack_bits",
    "set_bit_masks",
    "unpack_bits",
    "unpack_cast",
    "unpack_values",
]

_MAGIC = 0x8040201008040201
_BITS = (128, 64, 32, 16, 8, 4, 2, 1)  # the bit of element i of a group of 8


class _State(threading.local):
    override: bool | None = None


_STATE = _State()
_DEFAULT = [os.environ.get("STE_BIT_MASKS", "1").strip().lower() not in ("0", "false", "no", "off")]


#: Eagerly, packing costs about a dozen op dispatches (tens of µs): below this many elements the float input is kept.
EAGER_MIN_ELEMENTS = 65536


def bit_masks_enabled() -> bool:
    """Whether ops keep bit-packed masks instead of float inputs for their backward pass (default True)."""
    return _DEFAULT[0] if _STATE.override is None else _STATE.override


def keep_bits(x: tf.Tensor) -> bool:
    """Whether an op should keep ``x``'s mask as bits: bit masks are on, and ``x`` is traced (in ``tf.function``:
    packing is a few cheap ops) or, eagerly, has at least :data:`EAGER_MIN_ELEMENTS` elements."""
    if not bit_masks_enabled():
        return False
    if not tf.executing_eagerly():
        return True
    size = x.shape.num_elements()
    return size is None or size >= EAGER_MIN_ELEMENTS


def set_bit_masks(enabled: bool) -> None:
    """Turn bit-packed backward masks on (the default) or off for every op traced or called from now on.

    Off, mask-only rules keep their float inputs as in ste 0.1 (for debugging or comparison); the gradients are the
    same either way. The environment variable ``STE_BIT_MASKS=0`` sets the default to off at import.
    """
    if not isinstance(enabled, bool):
        from ._errors import ParameterError

        raise ParameterError(f"ste.set_bit_masks: expected True or False; received {enabled!r}.")
    _DEFAULT[0] = enabled


@contextlib.contextmanager
def bit_masks(enabled: bool) -> Iterator[None]:
    """``with ste.bit_masks(False): ...``: the same switch as :func:`set_bit_masks`, in this thread, for a block."""
    if not isinstance(enabled, bool):
        from ._errors import ParameterError

        raise ParameterError(f"ste.bit_masks: expected True or False; received {enabled!r}.")
    previous, _STATE.override = _STATE.override, enabled
    try:
        yield
    finally:
        _STATE.override = previous


def _compiling_with_xla() -> bool:
    """Whether the ops being built now will be compiled by XLA (traced under ``jit_compile=True``, or nested in such a
    function). Only the choice between two exact spellings of the same result depends on it."""
    if tf.executing_eagerly():
        return False
    try:
        from tensorflow.python.ops import control_flow_util
    except ImportError:  # pragma: no cover - layout of a future TensorFlow
        return False
    return bool(control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()))


def pack_bits(mask: tf.Tensor) -> tf.Tensor:
    """A boolean tensor of any shape as a flat ``uint8`` tensor of ``ceil(size / 8)`` bytes."""
    flat = tf.reshape(tf.cast(mask, tf.uint8), [-1])
    size = flat.shape.num_elements()
    if size is None:
        flat = tf.pad(flat, [[0, tf.math.floormod(8 - tf.math.floormod(tf.size(flat), 8), 8)]])
    elif size % 8:
        flat = tf.pad(flat, [[0, 8 - size % 8]])
    if _compiling_with_xla():
        # a sum of distinct powers of two (no carries), one reduction that XLA fuses with the mask; XLA keeps its
        # result as uint32 (4 bytes per 8 elements; the uint64 product below it kept as 8), converted where read
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
    if _compiling_with_xla():
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
    its 8 values in a 256 × 8 table; under XLA spelled as that select, because XLA keeps the gather a slow loop on CPU
    and fuses the select (a binary 64×32×32×32 convolution's forward + backward: 1.29× against 1.04× the float-input
    path)."""
    if _compiling_with_xla():
        return tf.where(unpack_bits(packed, shape), tf.constant(high, dtype), tf.constant(low, dtype))
    return _unpadded(tf.gather(_table(low, high, dtype), tf.cast(packed, tf.int32)), shape)


def unpack_cast(packed: tf.Tensor, shape: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """``tf.cast(unpack_bits(packed, shape), dtype)``: outside XLA in one pass (:func:`unpack_values`); under XLA
    spelled as that cast, because XLA simplifies a product with a cast mask into a select (``dy·0`` becomes ``+0``,
    also for negative ``dy``), as in a rule that casts the mask itself: the results stay bit for bit the same."""
    if _compiling_with_xla():
        return tf.cast(unpack_bits(packed, shape), dtype)
    return unpack_values(packed, shape, 0, 1, dtype)
