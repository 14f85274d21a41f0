"""What a rule keeps for the backward pass: the inputs, or a boolean mask bit-packed (:class:`PackedMask`), and the
order in which the backward pass reads them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import tensorflow as tf

from .._bitmask import (
    higher_order_witness,
    pack_bits,
    unpack_bits,
)


class PackedMask(NamedTuple):
    """What a mask-only rule keeps for the backward pass: its predicate, 1 bit per element, and the shape."""

    bits: tf.Tensor  # uint8, ceil(size / 8) bytes (ste._core._bitmask.pack_bits)
    shape: tf.Tensor  # int32 shape of the mask
    kept: tuple[tf.Tensor, ...] = ()  # other tensors a ste.mask_rule predicate returned, kept as they are
    witness: tf.Tensor | None = (
        None  # with kept tensors: ties them to the input (ste._core._bitmask.refuse_higher_order)
    )


def pack_mask(mask: tf.Tensor, kept: tuple[tf.Tensor, ...] = (), x: tf.Tensor | None = None) -> PackedMask:
    shape = tf.constant(mask.shape.as_list(), tf.int32) if mask.shape.is_fully_defined() else tf.shape(mask)
    witness = higher_order_witness(x) if kept and x is not None else None
    return PackedMask(pack_bits(mask), shape, kept, witness)


def read_after_mask(dy: Any, packed: PackedMask) -> tf.Tensor:
    """The packed bits, read only once the upstream gradient exists: without the dependency, TensorFlow's executor
    runs the unpacking (which depends on forward tensors only) during the forward pass and keeps its result alive."""
    with tf.control_dependencies(tf.nest.flatten(dy)):
        return tf.identity(packed.bits)


def unpack_mask(dy: Any, packed: PackedMask) -> tf.Tensor:
    """The boolean mask, unpacked once the upstream gradient exists."""
    return unpack_bits(read_after_mask(dy, packed), packed.shape)


def after_kept(xs: Sequence[tf.Tensor], saved: Any) -> Sequence[tf.Tensor]:
    """The op's inputs as its forward function should read them: in a graph, once ``saved`` holds a packed mask,
    through identities that wait for the packing (no copy).

    TensorFlow's executor runs independent ops in any order, so without the wait a chain of ops can run its forward
    functions ahead of their masks' packing and hold every input still waiting to be packed (a 50-op chain peaked
    anywhere between 6 and 27 input sizes). With it each op computes its mask, then its forward, and an input is
    released as soon as both have read it.
    """
    if not isinstance(saved, PackedMask) or tf.executing_eagerly():
        return xs
    with tf.control_dependencies([saved.bits]):
        return [tf.identity(x) for x in xs]


def keep_inputs(xs: Sequence[tf.Tensor], kwargs: Mapping[str, Any]) -> Sequence[tf.Tensor]:
    return xs
