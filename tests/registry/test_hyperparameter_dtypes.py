"""Hyperparameters valid in float64 but not in the computation dtype: a ParameterError naming the
entry, the parameter and the dtype when the op's gradient is traced, or a finite gradient equal to the independent
numpy reference, never NaN; every parameterised entry of ``ste.registry.names()``, all four float dtypes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import ste
from tests.helpers import FLOAT_DTYPES, TOLERANCE
from tests.references import builtin_names, reference_derivative

EXTREME_VALUES = [1e-300, 1e-40, 1e-6, 3e-5, 1e5, 7e4, 2e38, 1e39, 1e300]


def _parameterised() -> list[tuple[str, str]]:
    cases = []
    for name in builtin_names():
        for field, default in ste.registry.lookup(name)().params.items():
            if isinstance(default, float):
                cases.append((name, field))
    return cases


def _inputs(dtype: tf.DType, value: float) -> np.ndarray:
    largest = float(dtype.max)
    points = {0.0, 0.25, 1.0, 3.0, largest, value, value / 2, 1 / value, 2.4 / value}
    finite = [min(p, largest) for p in points if np.isfinite(p)]
    grid = np.asarray(sorted(finite), np.float64)
    return np.concatenate([-grid[::-1], grid])


def _round(values: np.ndarray, dtype: tf.DType) -> np.ndarray:
    return tf.cast(tf.constant(values, tf.float64), dtype).numpy().astype(np.float64)


def _gradient(op: Any, x: tf.Tensor) -> tf.Tensor:
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = op(x)
    return tape.gradient(y, x)


PARAMETERISED = _parameterised()


def test_every_builtin_hyperparameter_is_covered() -> None:
    assert {name for name, _ in PARAMETERISED} >= {"sigmoid_surrogate", "gaussian", "triangle", "boxcar"}


@pytest.mark.parametrize(("name", "field"), PARAMETERISED, ids=[f"{n}.{f}" for n, f in PARAMETERISED])
def test_parameter_out_of_dtype_range_is_refused_or_exact(name: str, field: str) -> None:
    for dtype in FLOAT_DTYPES:
        for value in EXTREME_VALUES:
            params = {field: value}
            op = ste.forward(tf.identity).backward(name, **params)
            x = _inputs(dtype, value)
            xt = tf.constant(_round(x, dtype), dtype)
            try:
                grad = _gradient(op, xt)
            except ste.errors.ParameterError as error:
                message = str(error)
                assert (name in message and field in message and dtype.name in message) or (
                    "float32" in message and dtype in (tf.float16, tf.bfloat16)
                ), message
                continue
            got = tf.cast(grad, tf.float64).numpy()
            assert np.all(np.isfinite(got)), f"{name}({field}={value}) in {dtype.name}: {got}"
            # The reference takes the parameter as the op computes with it (rounded to the computation dtype:
            # float32 for half-precision inputs of the widening entries), so that thresholds compare alike.
            computed = ste.registry.get(name).compute_dtype(dtype)
            with np.errstate(all="ignore"):
                as_computed = np.float64(_round(np.array([value]), computed)[0])
                want = reference_derivative(name, _round(x, dtype), {field: as_computed})
            known = np.isfinite(want)  # where the float64 formula cannot say (inf·0), only finiteness is checked
            rounded = _round(want[known], dtype)
            assert np.all(np.isfinite(rounded)), f"{name}({field}={value}) accepted in {dtype.name}: {want}"
            tol = TOLERANCE[dtype]
            np.testing.assert_allclose(
                got[known],
                rounded,
                rtol=4 * tol,
                atol=4 * tol * float(np.max(np.abs(rounded), initial=0.0)) + 1e-300,
                err_msg=f"{name}({field}={value}) in {dtype.name} at x = {x[known]}",
            )


def test_refused_in_tf_function_too_with_its_type() -> None:
    op = ste.forward(tf.sign).backward("sigmoid_surrogate", beta=1e39)

    @tf.function
    def step(x: tf.Tensor) -> tf.Tensor:
        return _gradient(op, x)

    with pytest.raises(ste.errors.ParameterError, match=r"sigmoid_surrogate.*'beta'.*float32"):
        step(tf.constant([0.5, -1.0]))
    np.testing.assert_allclose(step(tf.constant([0.5, -1.0], tf.float64)).numpy(), [0.0, 0.0])  # fits float64


def test_values_outside_float32s_range_are_refused_naming_the_parameter() -> None:
    x = tf.constant([0.0, 0.5, -1.0])
    with pytest.raises(ste.errors.ParameterError, match=r"'beta'.*float32"):
        _gradient(ste.forward(tf.sign).backward("sigmoid_surrogate", beta=1e39), x)
    for name, field in [("triangle", "width"), ("gaussian", "sigma"), ("boxcar", "width")]:
        with pytest.raises(ste.errors.ParameterError, match=rf"{name}.*'{field}'.*float32"):
            _gradient(ste.forward(tf.sign).backward(name, **{field: 1e-300}), x)


def test_user_registered_entries_are_checked_too() -> None:
    def flat(x: tf.Tensor, k: float = 1.0) -> tf.Tensor:  # d(x) = k
        return k * tf.ones_like(x)

    ste.registry.register("flat_dtype_test", flat)
    try:
        x = tf.constant([0.0, 2.0], tf.float16)
        with pytest.raises(ste.errors.ParameterError, match=r"flat_dtype_test.*'k'.*float16"):
            _gradient(ste.forward(tf.identity).backward("flat_dtype_test", k=1e5), x)  # 1e5 > float16's 65504
        np.testing.assert_array_equal(
            _gradient(ste.forward(tf.identity).backward("flat_dtype_test", k=6e4), x).numpy(), [np.float16(6e4)] * 2
        )  # fits float16: accepted
    finally:
        ste.registry.unregister("flat_dtype_test")


def test_a_surrogate_used_inside_a_hand_written_rule_is_checked_too() -> None:
    # The RuleError for a multi-input forward suggests surrogate.vjp(dy, x) inside a rule: it must not give NaN.
    surrogate = ste.registry.get("sigmoid_surrogate", beta=1e39)

    def rule(dy: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
        return surrogate.vjp(dy, x)

    with pytest.raises(ste.errors.ParameterError, match=r"sigmoid_surrogate.*'beta'.*float32"):
        _gradient(ste.forward(tf.sign).backward(rule), tf.constant([0.5, -1.0]))
    x64 = np.array([0.0, 1e-39, -2e-39])  # fits float64: the numpy reference
    np.testing.assert_allclose(
        _gradient(ste.forward(tf.sign).backward(rule), tf.constant(x64)).numpy(),
        reference_derivative("sigmoid_surrogate", x64, {"beta": 1e39}),
        rtol=1e-12,
    )


def test_check_finite_says_why_a_surrogate_is_refused() -> None:
    with pytest.raises(AssertionError, match=r"float32  refused: .*'beta' = 1e\+39 is not representable in float32"):
        ste.testing.check_finite(ste.registry.get("sigmoid_surrogate", beta=1e39))
    ste.testing.check_finite(ste.registry.get("sigmoid_surrogate", beta=1e39), dtypes=["float64"])  # fits float64


@pytest.mark.parametrize("jit", [False, True], ids=["tf.function", "jit_compile"])
def test_a_variable_hyperparameter_inside_tf_function(jit: bool) -> None:
    # A tf.Variable's value is read eagerly for the check (was: NotImplementedError from .numpy() while tracing).
    beta = tf.Variable(2.0, trainable=False)
    op = ste.forward(tf.sign).backward("sigmoid_surrogate", beta=beta)
    x64 = np.array([-1.5, 0.0, 0.3, 2.0])
    step = tf.function(lambda x: _gradient(op, x), jit_compile=jit)
    for value in (2.0, 0.5):  # one trace; it reads the variable's current value
        beta.assign(value)
        np.testing.assert_allclose(
            step(tf.constant(x64, tf.float32)).numpy(),
            reference_derivative("sigmoid_surrogate", x64, {"beta": value}),
            rtol=1e-5,
        )
    beta.assign(1e38)  # fits float32: still finite and equal to the reference
    np.testing.assert_allclose(
        tf.function(lambda x: _gradient(op, x))(tf.constant(x64, tf.float32)).numpy(),
        reference_derivative("sigmoid_surrogate", x64, {"beta": 1e38}).astype(np.float32),
        rtol=1e-5,
    )
