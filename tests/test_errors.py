"""Every error is an ste.STEError and keeps its type when raised while tracing a tf.function."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import tensorflow as tf

import ste
import ste.errors as errors

ERROR_CLASSES = [cls for _, cls in inspect.getmembers(errors, inspect.isclass) if issubclass(cls, Exception)]


def test_every_error_derives_from_ste_error_and_a_builtin() -> None:
    assert len(ERROR_CLASSES) > 10
    for cls in ERROR_CLASSES:
        assert issubclass(cls, ste.STEError)
        assert cls.__init__ is Exception.__init__
        if cls is not ste.STEError:
            assert issubclass(cls, (TypeError, ValueError))


def test_the_top_level_keeps_ste_error_and_no_other_error() -> None:
    assert ste.STEError is errors.STEError and "STEError" in ste.__all__ and "errors" in ste.__all__
    assert [name for name in ste.__all__ if name.endswith("Error")] == ["STEError"]
    assert set(errors.__all__) == {cls.__name__ for cls in ERROR_CLASSES}


def test_an_unknown_top_level_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        ste.NoSuchName  # noqa: B018
    assert not hasattr(ste, "ParameterErrors")


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

    with pytest.raises(ste.errors.GradientDtypeError, match="float64"):
        step(tf.constant([1.0]))


def _gradient(op: Any, x: tf.Tensor) -> tf.Tensor:
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = op(x)
    return tape.gradient(y, x)


def test_eager_checks_run_on_every_call_not_only_the_first() -> None:
    """Eager calls test the common case first; a later call that breaks a check raises, as often as it is made."""

    def sign_or_int(x: tf.Tensor) -> tf.Tensor:  # the output dtype depends on the values (eager Python)
        return tf.sign(x) if float(tf.reduce_sum(x)) >= 0 else tf.cast(tf.sign(x), tf.int32)

    def sign_or_doubled(x: tf.Tensor) -> tf.Tensor:  # the output shape depends on the values
        return tf.sign(x) if float(x[0]) >= 0 else tf.concat([x, x], 0)

    def first_only(dy: tf.Tensor, x: tf.Tensor) -> tf.Tensor:  # a wrong (broadcastable) shape for 3 elements
        return dy[:1] if x.shape[0] == 3 else dy

    def float64_for_3(dy: tf.Tensor, x: tf.Tensor) -> tf.Tensor:  # a wrong dtype for 3 elements
        return tf.cast(dy, tf.float64) if x.shape[0] == 3 else dy

    good, bad = tf.constant([1.0, 2.0]), tf.constant([-1.0, -2.0])
    three = tf.constant([0.5, -0.5, 2.0])
    cases: list[tuple[Any, tf.Tensor, tf.Tensor, type[Exception], str]] = [
        (ste.forward(sign_or_int).backward("straight_through"), good, bad, ste.errors.CallError, "int32"),
        (ste.forward(sign_or_doubled).backward("straight_through"), good, bad, ste.errors.RuleError, "elementwise"),
        (ste.forward(tf.sign).backward(first_only), good, three, ste.errors.GradientShapeError, r"\(1,\).*\(3,\)"),
        (ste.forward(tf.sign).backward(float64_for_3), good, three, ste.errors.GradientDtypeError, "float64"),
        # fits float64, overflows float32: the dtype check is cached per dtype, for dtypes that passed
        (
            ste.forward(tf.sign).backward("sigmoid_surrogate", beta=1e39),
            tf.constant([1.0, 2.0], tf.float64),
            good,
            ste.errors.ParameterError,
            "float32",
        ),
    ]
    for op, fine, failing, error, match in cases:
        for _ in range(2):
            assert _gradient(op, fine).dtype == fine.dtype
            with pytest.raises(error, match=match):
                _gradient(op, failing)
