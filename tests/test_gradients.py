"""What a rule returns is checked while tracing: count, dtype, exact shape; unknown dimensions at run time."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import ste

X = tf.constant([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]])


def _grad_of(op: ste.STEFunction, *inputs: tf.Tensor) -> list[tf.Tensor | None]:
    with tf.GradientTape() as tape:
        tape.watch(list(inputs))
        y = op(*inputs)
    return tape.gradient(y, list(inputs))


def _in_function(op: ste.STEFunction, *inputs: tf.Tensor) -> list[tf.Tensor | None]:
    return tf.function(lambda *xs: _grad_of(op, *xs))(*inputs)


@pytest.mark.parametrize("run", [_grad_of, _in_function], ids=["eager", "function"])
def test_wrong_gradient_count(run) -> None:  # type: ignore[no-untyped-def]
    def two_grads(dy, x):  # type: ignore[no-untyped-def]
        return dy, dy

    op = ste.forward(tf.sign).backward(two_grads)
    with pytest.raises(ste.errors.GradientCountError) as info:
        run(op, X)
    message = str(info.value)
    assert "ste op 'sign'" in message and "two_grads" in message
    assert "returned 2 gradient(s); expected 1" in message


@pytest.mark.parametrize("run", [_grad_of, _in_function], ids=["eager", "function"])
def test_broadcast_compatible_wrong_shape_is_an_error(run) -> None:  # type: ignore[no-untyped-def]
    def summed(dy, x):  # type: ignore[no-untyped-def]
        return tf.reduce_sum(dy, axis=0, keepdims=True)  # shape (1, 3): would broadcast silently

    op = ste.forward(tf.sign).backward(summed)
    with pytest.raises(ste.errors.GradientShapeError) as info:
        run(op, X)
    message = str(info.value)
    assert "positional input 0" in message and "summed" in message
    assert "(1, 3)" in message and "(2, 3)" in message and "broadcast-compatible" in message


def test_wrong_rank_is_an_error_without_broadcast_note() -> None:
    op = ste.forward(tf.sign).backward(lambda dy, x: tf.reshape(dy, [-1]))
    with pytest.raises(ste.errors.GradientShapeError) as info:
        _grad_of(op, X)
    assert "(6,)" in str(info.value) and "broadcast-compatible" not in str(info.value)


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float64])
def test_float32_gradient_for_lower_or_higher_precision_input(dtype: tf.DType) -> None:
    op = ste.forward(tf.sign).backward(lambda dy, x: tf.cast(dy, tf.float32))
    with pytest.raises(ste.errors.GradientDtypeError) as info:
        _grad_of(op, tf.cast(X, dtype))
    message = str(info.value)
    assert "float32" in message and dtype.name in message and "tf.cast" in message


def test_non_tensor_gradient_is_an_error() -> None:
    op = ste.forward(tf.sign).backward(lambda dy, x: np.ones((2, 3), np.float32))
    with pytest.raises(ste.errors.RuleError, match="ndarray"):
        _grad_of(op, X)


def test_second_input_is_named_in_the_error() -> None:
    op = ste.forward(lambda x, w: x * w).backward(lambda dy, x, w: (dy * w, dy * x))  # w grad has x's shape
    with pytest.raises(ste.errors.GradientShapeError, match="positional input 1"):
        _grad_of(op, X, tf.constant([1.0, 2.0, 3.0]))


def test_correct_rule_passes_in_every_dtype() -> None:
    for dtype in (tf.float16, tf.bfloat16, tf.float32, tf.float64):
        op = ste.forward(tf.sign).backward(lambda dy, x: dy * tf.cast(tf.abs(x) <= 1, dy.dtype))
        (g,) = _grad_of(op, tf.cast(X, dtype))
        assert g.dtype == dtype
        np.testing.assert_array_equal(tf.cast(g, tf.float32).numpy(), (np.abs(X.numpy()) <= 1).astype(np.float32))


def first_row(dy, x):  # type: ignore[no-untyped-def]
    return dy[:1]  # static shape (1, 3) against (None, 3): only known to be wrong at run time


FIRST_ROW = ste.forward(tf.sign).backward(first_row)
RUN_TIME_MESSAGE = (
    re.escape("ste op sign [ste.forward(sign).backward(")
    + ".*"
    + re.escape("gradient for positional input 0 does not have the shape of its input (checked at run time")
)
XLA_MESSAGE = "ste_gradient_shape_check"


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
def test_unknown_dimension_is_checked_at_run_time(jit: bool) -> None:
    @tf.function(input_signature=[tf.TensorSpec([None, 3])], jit_compile=jit)
    def grad(x):  # type: ignore[no-untyped-def]
        return _grad_of(FIRST_ROW, x)[0]

    # With one row the gradient is right, so it passes the check and equals dy.
    np.testing.assert_array_equal(grad(X[:1]).numpy(), np.ones((1, 3), np.float32))
    with pytest.raises(tf.errors.InvalidArgumentError, match=XLA_MESSAGE if jit else RUN_TIME_MESSAGE):
        grad(X)


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
def test_run_time_check_comes_before_every_consumer_of_the_gradient(jit: bool) -> None:
    """``fit`` on fewer rows than one batch (batch size unknown while tracing) with a wrong rule between two Dense
    layers: ste's check fails, not the first Dense's kernel-gradient MatMul that reads the wrong gradient (grappler
    once removed the check's reshape, control dependency and all)."""
    import keras

    class FirstRow(keras.layers.Layer):
        def call(self, x):  # type: ignore[no-untyped-def]
            return FIRST_ROW(x)

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), FirstRow(), keras.layers.Dense(2)])
    model.compile("sgd", "mse", jit_compile=jit)
    x, y = np.ones((5, 4), np.float32), np.ones((5, 2), np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError, match=XLA_MESSAGE if jit else RUN_TIME_MESSAGE) as info:
        model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    if not jit:
        assert "[gradient shape:] [1 3] [input shape:] [5 3]" in str(info.value)


def test_a_wrong_shape_with_the_right_size_is_caught_at_run_time() -> None:
    """A transposed gradient has as many elements as its input: nothing but the check would notice."""
    op = ste.forward(tf.sign).backward(lambda dy, x: tf.transpose(dy))  # (3, None) against (None, 3)

    @tf.function(input_signature=[tf.TensorSpec([None, 3])])
    def grad(x):  # type: ignore[no-untyped-def]
        return _grad_of(op, x)[0] * 1.0

    np.testing.assert_array_equal(grad(tf.ones((3, 3))).numpy(), np.ones((3, 3)))  # right shape: passes
    with pytest.raises(tf.errors.InvalidArgumentError, match=RUN_TIME_MESSAGE):
        grad(tf.ones((5, 3)))


def test_guide_quotes_the_run_time_message() -> None:
    """docs/guide.md quotes the message of ``first_row`` on a batch of 5, and XLA's compile error, verbatim."""
    guide = (Path(__file__).resolve().parents[1] / "docs" / "guide.md").read_text()
    quoted = re.search(r"```text\n(assertion failed: [^\n]*first_row[^\n]*)\n```", guide)
    assert quoted is not None

    @tf.function(input_signature=[tf.TensorSpec([None, 3])])
    def grad(x):  # type: ignore[no-untyped-def]
        return _grad_of(FIRST_ROW, x)[0]

    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        grad(tf.ones((5, 3)))
    assert quoted.group(1) in str(info.value)

    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        tf.function(grad.python_function, input_signature=[tf.TensorSpec([None, 3])], jit_compile=True)(tf.ones((5, 3)))
    xla = re.search(r"`(Shapes of all inputs must match:\s+values\[0\][^`]*)`", guide)
    assert xla is not None and XLA_MESSAGE in guide
    assert " ".join(xla.group(1).split()) in str(info.value) and XLA_MESSAGE in str(info.value)


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
def test_unknown_rank_is_checked_at_run_time(jit: bool) -> None:
    op = ste.forward(tf.sign).backward(lambda dy, x: tf.reshape(dy, [-1]))

    @tf.function(input_signature=[tf.TensorSpec(None)], jit_compile=jit)
    def grad(x):  # type: ignore[no-untyped-def]
        return _grad_of(op, x)[0]

    np.testing.assert_array_equal(grad(tf.constant([1.0, 2.0])).numpy(), [1.0, 1.0])
    with pytest.raises(tf.errors.InvalidArgumentError, match=XLA_MESSAGE if jit else RUN_TIME_MESSAGE):
        grad(X)
