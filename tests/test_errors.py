"""Every error is an ste.STEError and keeps its type when raised while tracing a tf.function."""

from __future__ import annotations

import inspect

import pytest
import tensorflow as tf

import ste
import ste._errors as errors

ERROR_CLASSES = [cls for _, cls in inspect.getmembers(errors, inspect.isclass) if issubclass(cls, Exception)]


def test_every_error_derives_from_ste_error_and_a_builtin() -> None:
    assert len(ERROR_CLASSES) > 10
    for cls in ERROR_CLASSES:
        assert issubclass(cls, ste.STEError)
        assert cls.__init__ is Exception.__init__
        assert getattr(ste, cls.__name__) is cls
        if cls is not ste.STEError:
            assert issubclass(cls, (TypeError, ValueError))


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_error_type_survives_tf_function(cls: type[Exception]) -> None:
    @tf.function
    def raising(x):  # type: ignore[no-untyped-def]
        raise cls("the message")

    with pytest.raises(cls, match="the message"):
        raising(tf.constant(1.0))


def test_library_error_survives_autograph_in_user_code() -> None:
    op = ste.forward(tf.sign).backward(lambda dy, x: tf.cast(dy, tf.float64))

    @tf.function
    def step(x):  # type: ignore[no-untyped-def]
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = op(x)
            if tf.reduce_sum(y) > 0:  # AutoGraph converts this function
                y = y * 2.0
        return tape.gradient(y, x)

    with pytest.raises(ste.GradientDtypeError, match="float64"):
        step(tf.constant([1.0]))
