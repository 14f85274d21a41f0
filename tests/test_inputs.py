"""Positional inputs must be floating tensors (or convertible); everything else raises before anything runs."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

OP = ste.forward(tf.sign).backward("straight_through")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (tf.constant([1, 2]), "int32"),
        (np.array([1, 2], np.int64), "int64"),
        (tf.constant([True]), "bool"),
        (tf.constant(["a"]), "string"),
        (tf.constant([1 + 2j]), "complex128"),
        (3, "int32"),
    ],
)
def test_non_float_inputs_are_rejected(value: object, expected: str) -> None:
    with pytest.raises(ste.errors.InputError) as info:
        OP(value)
    message = str(info.value)
    assert expected in message and "positional input 0" in message and "ste op 'sign'" in message
    assert "tf.cast" in message


def test_ragged_and_sparse_inputs_are_rejected() -> None:
    with pytest.raises(ste.errors.InputError, match="RaggedTensor"):
        OP(tf.ragged.constant([[1.0], [2.0, 3.0]]))
    with pytest.raises(ste.errors.InputError, match="SparseTensor"):
        OP(tf.sparse.from_dense(tf.constant([[1.0, 0.0]])))


def test_none_and_python_objects_are_rejected() -> None:
    with pytest.raises(ste.errors.InputError, match="is None"):
        OP(None)
    with pytest.raises(ste.errors.InputError, match="object cannot be converted"):
        OP(object())
    with pytest.raises(ste.errors.InputError, match="positional input 1"):
        ste.forward(lambda x, y: x * y).backward(lambda dy, x, y: (dy, dy))(tf.constant(1.0), "text")


def test_keras_tensor_gets_a_clear_error() -> None:
    with pytest.raises(ste.errors.InputError, match="KerasTensor"):
        OP(keras.Input((3,)))


def test_no_positional_input() -> None:
    with pytest.raises(ste.errors.CallError, match="no positional input"):
        OP()


def test_wrong_keywords_for_the_forward() -> None:
    with pytest.raises(ste.errors.CallError, match="cannot be called"):
        OP(tf.constant(1.0), beta=2.0)  # tf.sign takes no beta


def test_rule_that_cannot_take_the_inputs() -> None:
    op = ste.forward(lambda x, y: x * y).backward(lambda dy, x: dy)
    with pytest.raises(ste.errors.RuleError, match=r"rule\(dy, x0, x1\)"):
        op(tf.constant(1.0), tf.constant(2.0))


def test_surrogate_on_a_two_input_op() -> None:
    op = ste.forward(lambda x, y: x * y).backward("identity")
    with pytest.raises(ste.errors.RuleError, match="2 positional input"):
        op(tf.constant(1.0), tf.constant(2.0))


def test_non_float_forward_output() -> None:
    op = ste.forward(lambda x: x > 0).backward("identity")
    with pytest.raises(ste.errors.CallError, match="dtype bool"):
        op(tf.constant(1.0))


def test_variable_read_inside_the_forward_must_be_positional() -> None:
    v = tf.Variable(2.0)
    op = ste.forward(lambda x: x * v).backward("identity")
    with pytest.raises(ste.errors.InputError, match="pass each variable positionally"):
        op(tf.constant(1.0))
    with pytest.raises(ste.errors.InputError, match="pass each variable positionally"):
        tf.function(op)(tf.constant(1.0))
    # Passing it positionally works and gives it its gradient.
    op2 = ste.forward(lambda x, w: x * w).backward(lambda dy, x, w: (dy * w, tf.reduce_sum(dy * x)))
    with tf.GradientTape() as tape:
        y = op2(tf.constant([1.0, 3.0]), v)
    assert tape.gradient(y, v).numpy() == 4.0
