"""ConstantSparsity and PolynomialDecay against TFMOT's formulas written in numpy, TFMOT's own test values, and the
argument checks TFMOT makes (each an ste.ParameterError naming the fix)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

S = ste.sparsity


def numpy_should_prune(step: int, begin: int, end: int, frequency: int) -> bool:
    return begin <= step and (step <= end or end < 0) and (step - begin) % frequency == 0


def numpy_polynomial(step: int, initial: float, final: float, begin: int, end: int, power: float) -> float:
    p = min(1.0, max(0.0, (step - begin) / (end - begin)))
    return final + (initial - final) * (1 - p) ** power


@pytest.mark.parametrize("begin, end, frequency", [(0, -1, 1), (0, -1, 100), (100, 200, 10), (5, 37, 4), (3, 3, 7)])
def test_constant_sparsity_matches_the_formula(begin: int, end: int, frequency: int) -> None:
    schedule = S.ConstantSparsity(0.6, begin, end, frequency)
    for step in [0, 1, 2, 3, 4, 5, 9, 10, 13, 37, 41, 99, 100, 110, 111, 200, 201, 210, 10**8]:
        should, sparsity = schedule(tf.constant(step, tf.int64))
        assert bool(should) == numpy_should_prune(step, begin, end, frequency), step
        assert sparsity.dtype == tf.float32 and np.isclose(float(sparsity), 0.6)


@pytest.mark.parametrize(
    "initial, final, begin, end, power, frequency",
    [(0.2, 0.8, 100, 110, 3, 2), (0.0, 0.9, 0, 1000, 2, 50), (0.5, 0.1, 7, 19, 1.5, 3)],
)
def test_polynomial_decay_matches_the_formula(initial, final, begin, end, power, frequency) -> None:
    schedule = S.PolynomialDecay(initial, final, begin, end, power, frequency)
    for step in [0, 7, 8, 13, 19, 20, 99, 100, 101, 102, 105, 110, 111, 500, 999, 1000, 1001, 5000]:
        should, sparsity = schedule(tf.constant(step, tf.int64))
        assert bool(should) == numpy_should_prune(step, begin, end, frequency), step
        assert np.isclose(float(sparsity), numpy_polynomial(step, initial, final, begin, end, power), atol=1e-6)


def test_polynomial_decay_gives_tfmots_published_values() -> None:
    # pruning_schedule_test.py (TFMOT): PolynomialDecay(0.2, 0.8, 100, 110, 3, 2) at steps 100, 102, 105, 110
    schedule = S.PolynomialDecay(0.2, 0.8, 100, 110, 3, 2)
    got = [float(schedule(tf.constant(s))[1]) for s in (100, 102, 105, 110)]
    np.testing.assert_allclose(got, [0.2, 0.4928, 0.725, 0.8], atol=1e-6)
    # TFMOT's range and frequency tests: prunes in [100, 200] every 10 steps
    schedule = S.PolynomialDecay(0.2, 0.8, 100, 200, 3, 10)
    assert [bool(schedule(tf.constant(s))[0]) for s in (90, 99, 100, 109, 110, 111, 200, 201)] == [
        False, False, True, False, True, False, True, False,
    ]  # fmt: skip


def test_polynomial_decay_with_end_equal_to_begin_is_the_final_sparsity() -> None:
    schedule = S.PolynomialDecay(0.2, 0.8, 10, 10, 3, 1)
    assert np.isclose(float(schedule(tf.constant(9))[1]), 0.2)
    assert np.isclose(float(schedule(tf.constant(10))[1]), 0.8) and bool(schedule(tf.constant(10))[0])
    assert not bool(schedule(tf.constant(11))[0])


def test_schedules_work_in_tf_function_and_xla() -> None:
    schedule = S.PolynomialDecay(0.2, 0.8, 100, 110, 3, 2)
    compiled = tf.function(lambda s: schedule(s), jit_compile=True)
    should, sparsity = compiled(tf.constant(102, tf.int64))
    assert bool(should) and np.isclose(float(sparsity), 0.4928, atol=1e-6)


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda: S.ConstantSparsity(1.0, 0), "[0, 1)"),
        (lambda: S.ConstantSparsity(-0.1, 0), "[0, 1)"),
        (lambda: S.ConstantSparsity("0.5", 0), "[0, 1)"),
        (lambda: S.PolynomialDecay(0.2, 1.5, 0, 10), "final_sparsity"),
        (lambda: S.PolynomialDecay(-0.2, 0.5, 0, 10), "initial_sparsity"),
        (lambda: S.ConstantSparsity(0.5, -1), "begin_step must be >= 0"),
        (lambda: S.ConstantSparsity(0.5, 10, 5), "end_step (5) is before begin_step (10)"),
        (lambda: S.PolynomialDecay(0.2, 0.8, 10, 5), "end_step (5) is before begin_step (10)"),
        (lambda: S.ConstantSparsity(0.5, 10, -5), "end_step must be -1 or >= 0"),
        (lambda: S.PolynomialDecay(0.4, 0.8, 10, -1), "end_step cannot be -1"),
        (lambda: S.ConstantSparsity(0.5, 0, frequency=0), "frequency must be > 0"),
        (lambda: S.ConstantSparsity(0.5, 0.5), "begin_step must be an integer"),
        (lambda: S.PolynomialDecay(0.2, 0.8, 0, 10, power=0), "power must be a number > 0"),
    ],
)
def test_bad_schedules_are_refused(make, words: str) -> None:
    with pytest.raises(ste.ParameterError) as error:
        make()
    assert words in str(error.value) and isinstance(error.value, ValueError)


def test_schedules_round_trip_through_keras_serialization() -> None:
    for schedule in (S.ConstantSparsity(0.7, 10, 20, 10), S.PolynomialDecay(0.2, 0.6, 10, 20, 5, 10)):
        config = keras.saving.serialize_keras_object(schedule)
        again = keras.saving.deserialize_keras_object(config)
        assert again == schedule and again is not schedule and type(again) is type(schedule)
    # TFMOT's own get_config format is read too
    tfmot = {"class_name": "ConstantSparsity", "config": {"target_sparsity": 0.7, "begin_step": 10, "end_step": 20,
                                                          "frequency": 10}}  # fmt: skip
    assert S.ConstantSparsity.from_config(tfmot) == S.ConstantSparsity(0.7, 10, 20, 10)
