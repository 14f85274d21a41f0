"""Checking what a backward rule returns: one gradient per input, each of its input's dtype and exact shape.

TensorFlow's ``tf.custom_gradient`` checks none of this, and a broadcast-compatible wrong shape gives silently
wrong gradients. Shapes known while tracing are compared right away and raise :class:`ste.errors.GradientShapeError`.
Where a dimension is unknown while tracing, the gradient that the rest of the backward pass reads depends on a
run-time check: an assertion with ste's message in a graph (TensorFlow raises it as ``InvalidArgumentError``,
before any op uses the gradient), and under XLA, which drops assertions, a ``tf.stack`` of zero-element views of
the gradient and the input, whose kernel requires equal shapes (XLA checks it when compiling for the concrete
shapes: a compile error at the node ``ste_gradient_shape_check``, at no run-time cost).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import tensorflow as tf

from ..errors import GradientCountError, GradientDtypeError, GradientShapeError, RuleError
from ._xla import compiling_with_xla

__all__ = ["InputSpec", "check_gradients"]


class InputSpec(NamedTuple):
    """What the checks need to know of one positional input."""

    shape: tf.TensorShape
    dtype: tf.DType
    dynamic_shape: tf.Tensor | None  # tf.shape(x) when the static shape is not fully defined


def input_spec(x: tf.Tensor) -> InputSpec:
    shape = x.shape
    return InputSpec(shape, x.dtype, None if shape.is_fully_defined() else tf.shape(x))


def _broadcastable(a: tf.TensorShape, b: tf.TensorShape) -> bool:
    if a.rank is None or b.rank is None:
        return True
    for da, db in zip(reversed(a.as_list()), reversed(b.as_list())):
        if da is not None and db is not None and da != db and 1 not in (da, db):
            return False
    return True


def _less_known(gshape: tf.TensorShape, xshape: tf.TensorShape) -> bool:
    """Whether the gradient's static shape leaves unknown what the input's static shape knows."""
    if gshape.rank is None:
        return xshape.rank is not None
    if xshape.rank is None:
        return False
    return any(g is None and x is not None for g, x in zip(gshape.as_list(), xshape.as_list()))


def _runtime_shape_check(grad: tf.Tensor, spec: InputSpec, x_dynamic: tf.Tensor, message: str) -> tf.Tensor:
    """``grad`` as a tensor of its input's static shape that exists only once its run-time shape has been checked.

    In a graph: an ``Assert`` with ste's message, and the gradient reshaped under a control dependency on it, so
    that no consumer of the gradient can run (and fail with its own error) first. The reshape's target is the
    input's shape where the shapes agree and zeros where they do not: it depends on the compared shapes' values, so
    grappler cannot take the reshape for a no-op and remove it, with its control dependency on the assertion (it
    does that to a reshape whose target is the input's shape alone, once it infers the input's shape statically).

    Under XLA, which drops assertions: a ``Pack`` of zero-element views of the gradient and of the input's shape
    (its kernel requires equal shapes, which XLA checks when compiling for the concrete shapes), on which the
    reshape's target data-depends. A gradient whose size depends on the data (a dynamic dimension, as from
    ``tf.boolean_mask``) cannot be checked when compiling and XLA cannot assert at run time: XLA refuses it at the
    same node. The ``Pack`` stays out of graphs that are not compiled: grappler's shape inference takes its two
    inputs' shapes to be equal, then removes the reshape as a no-op, with its control dependency on the check.
    """
    if compiling_with_xla():
        grad_view = tf.expand_dims(grad, 0)[:0]
        input_view = tf.zeros(tf.concat([[0], x_dynamic], axis=0), dtype=grad.dtype)
        pack = tf.stack([grad_view, input_view], name="ste_gradient_shape_check")
        # A data dependency (a free reshape; adding zero times the Pack's shape): XLA drops control dependencies.
        target = x_dynamic + 0 * tf.shape(pack, out_type=x_dynamic.dtype)[2:]
        checked = tf.reshape(grad, target)
    else:
        shape = tf.shape(grad, out_type=x_dynamic.dtype)
        rank, expected_rank = tf.size(shape), tf.size(x_dynamic)
        common = tf.minimum(rank, expected_rank)
        same = tf.logical_and(
            tf.equal(rank, expected_rank), tf.reduce_all(tf.equal(shape[:common], x_dynamic[:common]))
        )
        check = tf.debugging.Assert(same, [message, "gradient shape:", shape, "input shape:", x_dynamic])
        with tf.control_dependencies([check]):
            # The target is the input's shape (all zeros if the check fails), so that the gradient's static shape is
            # the input's: graph shape inference cannot unify the input's unknown dimensions with the wrong
            # gradient's across the training step before the check has run.
            checked = tf.reshape(grad, x_dynamic * tf.cast(same, x_dynamic.dtype))
    checked.set_shape(spec.shape)
    return checked


def normalize_gradient_structure(result: Any, n_inputs: int, op: str) -> list[Any]:
    """The rule's return value as a list with one entry per positional input."""
    grads = list(result) if isinstance(result, (list, tuple)) else [result]
    if len(grads) != n_inputs:
        raise GradientCountError(
            f"{op}: the rule returned {len(grads)} gradient(s); expected {n_inputs}, one per positional input "
            f"(None for an input that gets no gradient). Fix: return a tuple of {n_inputs}."
        )
    return grads


def check_gradients(result: Any, specs: Sequence[InputSpec], op: str, shape_hint: str = "") -> list[tf.Tensor | None]:
    """Validate a rule's gradients against the inputs' specs; returns them, with run-time checks attached.

    ``shape_hint`` replaces the advice of a shape mismatch (a registry rule's user wrote no rule to fix).
    """
    grads = normalize_gradient_structure(result, len(specs), op)
    checked: list[tf.Tensor | None] = []
    for position, (grad, spec) in enumerate(zip(grads, specs)):
        # Fast path (every eager call): a dense tensor of the input's dtype and of its fully known shape.
        if (
            spec.dynamic_shape is None
            and isinstance(grad, tf.Tensor)
            and grad.dtype is spec.dtype
            and grad.shape == spec.shape
        ):
            checked.append(grad)
            continue
        where = f"{op}: gradient for positional input {position}"
        if grad is None:
            checked.append(None)
            continue
        if isinstance(grad, tf.IndexedSlices):
            if grad.dense_shape is None:
                raise RuleError(
                    f"{where} is a tf.IndexedSlices without dense_shape, so the dense gradient's shape is unknown. "
                    f"Fix: build it as tf.IndexedSlices(values, indices, dense_shape=tf.shape(x)), or return a "
                    f"dense tensor (e.g. tf.scatter_nd or tf.math.unsorted_segment_sum)."
                )
            grad = tf.convert_to_tensor(grad)
        if not isinstance(grad, tf.Tensor):
            raise RuleError(
                f"{where} is a {type(grad).__name__} ({grad!r:.60}); expected a tf.Tensor of dtype "
                f"{spec.dtype.name} and shape {spec.shape}. Fix: build it with TensorFlow ops on dy and the inputs."
            )
        if grad.dtype != spec.dtype:
            raise GradientDtypeError(
                f"{where} has dtype {grad.dtype.name}; expected {spec.dtype.name}, the input's dtype (a mismatch "
                f"passes TensorFlow silently and fails later in an unrelated op). Fix: tf.cast(grad, "
                f"x.dtype)."
            )
        gshape, xshape = grad.shape, spec.shape
        mismatch = gshape.rank is not None and xshape.rank is not None and gshape.rank != xshape.rank
        if not mismatch and gshape.rank is not None and xshape.rank is not None:
            mismatch = any(
                g is not None and x is not None and g != x for g, x in zip(gshape.as_list(), xshape.as_list())
            )
        if mismatch:
            note = (
                " The shapes are broadcast-compatible, so TensorFlow would have used it and given silently wrong "
                "gradients."
                if _broadcastable(gshape, xshape)
                else ""
            )
            raise GradientShapeError(
                f"{where} has shape {gshape}; expected {xshape}, exactly the input's shape.{note} "
                + (
                    shape_hint
                    or "Fix: return a gradient of the input's shape (tf.broadcast_to(g, tf.shape(x)), or "
                    "tf.reduce_sum over broadcast axes)."
                )
            )
        if gshape.is_fully_defined() and xshape.is_fully_defined():
            checked.append(grad)
            continue
        if compiling_with_xla() and _less_known(gshape, xshape):
            # XLA pads a tensor whose length depends on the data to its bound: inside a function that a compiled
            # caller inlines, no check of its length can fail, at compile time or at run time
            raise GradientShapeError(
                f"{where} has shape {gshape}, a length that depends on the data (as from tf.boolean_mask), where the "
                f"input's is {xshape}; XLA (jit_compile=True) pads such a tensor and can check its length neither "
                f"when it compiles nor when it runs. Fix: build the gradient with ops whose shapes do not depend on "
                f"the data (tf.where(x > 0, dy, 0) rather than tf.boolean_mask), or run without jit_compile."
            )
        x_dynamic = spec.dynamic_shape if spec.dynamic_shape is not None else tf.constant(xshape.as_list(), tf.int32)
        message = (
            f"{where} does not have the shape of its input (checked at run time: a dimension was unknown while "
            f"tracing). "
            + (shape_hint or "Fix: return a gradient of the shape of the input, e.g. tf.broadcast_to(g, tf.shape(x)).")
        )
        # TensorFlow prints the message C-escaped: no quotes, which would come out as \'
        message = message.replace("'", "").replace('"', "")
        checked.append(_runtime_shape_check(grad, spec, x_dynamic, message))
    return checked
