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
    """docs/guide.md quotes the message of ``first_row`` on a batch of 5, and XLA's compile error, verbatim (the page
    breaks the message's one line at spaces, to the 80 columns of its code box)."""
    guide = (Path(__file__).resolve().parents[1] / "docs" / "guide.md").read_text()
    block = re.search(r"```text\n(assertion failed: [^`]*first_row[^`]*?)\n```", guide)
    assert block is not None
    quoted = " ".join(block.group(1).split("\n"))

    @tf.function(input_signature=[tf.TensorSpec([None, 3])])
    def grad(x):  # type: ignore[no-untyped-def]
        return _grad_of(FIRST_ROW, x)[0]

    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        grad(tf.ones((5, 3)))
    assert quoted in str(info.value)

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


def positive_entries(dy, x):  # type: ignore[no-untyped-def]
    # its length depends on the data: never known while tracing (flat, for an input whose rank is unknown too)
    return tf.boolean_mask(tf.reshape(dy, [-1]), tf.reshape(x, [-1]) > 0)


def positive_rows(dy, x):  # type: ignore[no-untyped-def]
    return tf.boolean_mask(dy, x[:, 0] > 0)  # (None, 3): the number of rows depends on the data


DATA_DEPENDENT = {
    # mode: (rule, input signature or None for the input's own static shape, jit_compile)
    "function-static": (positive_entries, None, False),
    "function-partial": (positive_rows, [tf.TensorSpec([None, 3])], False),
    "function-unknown-rank": (positive_entries, [tf.TensorSpec(None)], False),
    "xla-static": (positive_entries, None, True),
    "xla-partial": (positive_rows, [tf.TensorSpec([None, 3])], True),
}


@pytest.mark.parametrize("mode", sorted(DATA_DEPENDENT))
def test_a_data_dependent_wrong_shape_raises_with_grappler_on(mode: str) -> None:
    """A gradient whose length depends on the data, one entry short of its input, with grappler at its defaults:
    once its shape inference knew the input's shape, it removed the check's reshape as a no-op, with its control
    dependency on the assertion, and the gradient came out with the wrong shape and no error. XLA cannot assert at
    run time: it refuses the data-dependent gradient when compiling, at the check's node."""
    rule, signature, jit = DATA_DEPENDENT[mode]
    op = ste.forward(lambda x: x * 2.0).backward(rule)
    x = tf.constant([1.0, -1.0, -2.0]) if rule is positive_entries else tf.constant([[1.0, 2, 3], [-1, 2, 3]])
    grad = tf.function(lambda x: _grad_of(op, x)[0], input_signature=signature, jit_compile=jit)
    assert tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer") is not True
    if mode == "xla-static":  # the input's length is known while tracing, the gradient's is not: refused at once
        with pytest.raises(ste.errors.GradientShapeError, match="depends on the data"):
            grad(x)
    else:
        with pytest.raises(
            tf.errors.OpError, match=XLA_MESSAGE if jit else RUN_TIME_MESSAGE.replace("sign", "<lambda>")
        ):
            grad(x)
    with pytest.raises(ste.errors.GradientShapeError, match="has shape"):  # eager: the shapes are known at once
        _grad_of(op, x)


def test_a_data_dependent_wrong_shape_raises_in_fit() -> None:
    """The same rule between two Dense layers in ``fit``: ste's message, not the next MatMul's."""
    import keras

    op = ste.forward(lambda x: x * 2.0).backward(positive_rows)

    class PositiveRows(keras.layers.Layer):
        def call(self, x):  # type: ignore[no-untyped-def]
            return op(x)

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), PositiveRows(), keras.layers.Dense(2)])
    model.compile("sgd", "mse")
    x = np.array([[1.0, 0, 0, 0], [-1.0, 0, 0, 0]] * 2, np.float32)
    model.layers[0].set_weights([np.eye(4, 3, dtype=np.float32), np.zeros(3, np.float32)])
    with pytest.raises(tf.errors.InvalidArgumentError, match=RUN_TIME_MESSAGE.replace("sign", "<lambda>")) as info:
        model.fit(x, np.ones((4, 2), np.float32), batch_size=4, epochs=1, verbose=0)
    assert "[gradient shape:] [2 3] [input shape:] [4 3]" in str(info.value)


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
def test_a_right_data_dependent_gradient_passes_in_a_graph_and_is_refused_by_xla(jit: bool) -> None:
    """``tf.boolean_mask`` keeping every row gives the right gradient (dy) with a length XLA knows only at run time:
    a graph passes it unchanged; XLA, which can neither check it when compiling nor assert, refuses it (guide.md)."""
    op = ste.forward(lambda x: x * 2.0).backward(lambda dy, x: tf.boolean_mask(dy, tf.math.is_finite(x[:, 0])))
    grad = tf.function(lambda x: _grad_of(op, x)[0], jit_compile=jit)
    if jit:
        with pytest.raises(ste.errors.GradientShapeError, match="depends on the data"):
            grad(X)
    else:
        np.testing.assert_array_equal(grad(X).numpy(), np.ones((2, 3), np.float32))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_a_data_dependent_gradient_in_a_function_that_a_compiled_caller_calls_is_refused(dtype: str) -> None:
    """A plain ``tf.function`` taking the gradient, called from a ``jit_compile=True`` one: XLA inlines it and pads
    the data-dependent gradient to the input's length, so no check can fail when compiling or running; ste refuses
    it while tracing (the first call returned a (4, 3) gradient of a (2, 3) rule's rows, with no error)."""
    op = ste.forward(lambda x: x * 2.0).backward(positive_rows)
    x = tf.cast(tf.constant([[1.0, 2, 3], [-1, 2, 3], [1, 1, 1], [-2, 0, 0]]), dtype)

    @tf.function
    def inner(x):  # type: ignore[no-untyped-def]
        return _grad_of(op, x)[0]

    with pytest.raises(ste.errors.GradientShapeError, match="depends on the data.*Fix: .*tf.where"):
        tf.function(lambda x: inner(x), jit_compile=True)(x)
