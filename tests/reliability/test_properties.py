"""Property-based tests: every registry entry × forwards sign/heaviside/round/identity/relu, random shapes, all dtypes.

For each drawn example the forward values must equal a numpy reference exactly (these forwards are exact in every
dtype), the gradient must equal dy·d(x) from the independent numpy formula in ``references.py`` within the dtype's
tolerance, and eager mode, ``tf.function`` and ``tf.function(jit_compile=True)`` must agree.

Retraces are bounded: all entries for one (forward, dtype) are evaluated by one ``tf.function`` whose input signature
has an unknown shape (``TensorSpec(None, dtype)``), so each is traced once however many shapes hypothesis draws.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

import ste
from tests.references import DTYPES, FORWARDS, as_f64, entry_cases, eps, peak, reference_derivative

CASES = entry_cases()
DEFAULT_CASES = [(name, params) for name, params in CASES if not params]

# Finite values with the interesting points (0, thresholds of the entries' parameters, large |x|) over-represented.
_SPECIAL = [0.0, -0.0, 0.25, -0.25, 0.5, -0.5, 1.0, -1.0, 1.5, -1.5, 2.0, -2.0, 2.5, -2.5, 1e-6, -1e-6, 1e4, -1e4]
VALUES = st.one_of(st.sampled_from(_SPECIAL), st.floats(-6.0, 6.0, allow_subnormal=False))
UPSTREAM = st.one_of(st.sampled_from([0.0, 1.0, -1.0]), st.floats(-2.0, 2.0, allow_subnormal=False))


def _ops(forward: str) -> list[tuple[str, dict[str, Any], Any]]:
    fn = FORWARDS[forward][0]
    return [(name, params, ste.forward(fn).backward(name, **params)) for name, params in CASES]


def _evaluate(ops: list[Any], x: tf.Tensor, dy: tf.Tensor) -> tuple[list[tf.Tensor], list[tf.Tensor]]:
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ys = [op(x) for op in ops]
    grads = [tape.gradient(y, x, output_gradients=dy) for y in ys]
    return ys, grads


_FORWARD_NAMES = sorted(FORWARDS)
_JIT_SIZE = 256  # hypothesis draws at most 3**5 = 243 elements; jit inputs are padded to this, one XLA compile
_FUNCTIONS: dict[tuple[str, bool], Callable[..., Any]] = {}


def _compiled(dtype: tf.DType, jit: bool) -> Callable[..., Any]:
    """One traced function per dtype (and mode) for all forwards and entries: the forward is chosen by an index.

    The entries run with their default parameters (parameter variants are covered in eager mode). The forward's
    index is a tensor argument, so drawing another forward does not retrace.
    """
    key = (dtype.name, jit)
    if key not in _FUNCTIONS:
        spec = tf.TensorSpec([_JIT_SIZE] if jit else None, dtype)

        @tf.function(input_signature=[spec, spec, tf.TensorSpec([], tf.int32)], jit_compile=jit)
        def run(x: tf.Tensor, dy: tf.Tensor, index: tf.Tensor) -> Any:
            def chosen(t: tf.Tensor) -> tf.Tensor:
                return tf.gather(tf.stack([FORWARDS[name][0](t) for name in _FORWARD_NAMES]), index)

            ops = [ste.forward(chosen).backward(name, **params) for name, params in DEFAULT_CASES]
            return _evaluate(ops, x, dy)

        _FUNCTIONS[key] = run
    return _FUNCTIONS[key]


def _run_compiled(forward: str, x: tf.Tensor, dy: tf.Tensor, jit: bool) -> Any:
    index = tf.constant(_FORWARD_NAMES.index(forward), tf.int32)
    if not jit:
        return _compiled(x.dtype, False)(x, dy, index)
    n = int(np.prod(x.shape))
    pad = [[0, _JIT_SIZE - n]]
    ys, grads = _compiled(x.dtype, True)(tf.pad(tf.reshape(x, [-1]), pad), tf.pad(tf.reshape(dy, [-1]), pad), index)
    return [tf.reshape(y[:n], x.shape) for y in ys], [tf.reshape(g[:n], x.shape) for g in grads]


def _check(forward: str, dtype: tf.DType, x64: np.ndarray, dy64: np.ndarray, jit: bool = True) -> None:
    x = tf.cast(tf.constant(x64, tf.float64), dtype)
    dy = tf.cast(tf.constant(dy64, tf.float64), dtype)
    xv, dyv = as_f64(x), as_f64(dy)
    expected_y = FORWARDS[forward][1](xv)
    cases = _ops(forward)
    defaults = [case for case in cases if not case[1]]
    results = {"eager": (cases, *_evaluate([op for _, _, op in cases], x, dy))}
    results["tf.function"] = (defaults, *_run_compiled(forward, x, dy, jit=False))
    if jit:
        results["jit_compile"] = (defaults, *_run_compiled(forward, x, dy, jit=True))
    tol = 8 * eps(dtype)
    for mode, (mode_cases, ys, grads) in results.items():
        assert len(ys) == len(mode_cases)
        for (name, params, op), y, grad in zip(mode_cases, ys, grads):
            where = f"{op!r}, {dtype.name}, {mode}, shape {x64.shape}"
            assert y.dtype == dtype and grad.dtype == dtype, where
            assert tuple(y.shape) == x64.shape and tuple(grad.shape) == x64.shape, where
            np.testing.assert_array_equal(as_f64(y), expected_y, err_msg=where)
            expected_g = dyv * reference_derivative(name, xv, params)
            atol = tol * peak(name, params) * max(1.0, float(np.max(np.abs(dyv), initial=0.0)))
            np.testing.assert_allclose(as_f64(grad), expected_g, rtol=tol, atol=atol, err_msg=where)
    # the three modes agree with each other (not only each with the reference)
    eager = {(name, repr(params)): g for (name, params, _), g in zip(cases, results["eager"][2])}
    for mode in set(results) - {"eager"}:
        for (name, params, op), g_mode in zip(defaults, results[mode][2]):
            g_eager = eager[(name, repr(params))]
            atol = tol * peak(name, params) * 2.0
            np.testing.assert_allclose(
                as_f64(g_mode), as_f64(g_eager), rtol=tol, atol=atol, err_msg=f"{op!r} {dtype.name}: eager vs {mode}"
            )


def test_the_entries_under_test_include_the_core_ones() -> None:
    names = {name for name, _ in CASES}
    assert {"identity", "straight_through", "zero", "sigmoid_surrogate"} <= names


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@settings(max_examples=max(6, settings().max_examples // 3))
@given(data=st.data())
def test_forward_and_gradient_match_numpy_in_every_mode(dtype: tf.DType, data: st.DataObject) -> None:
    forward = data.draw(st.sampled_from(sorted(FORWARDS)), label="forward")
    shape = data.draw(array_shapes(min_dims=0, max_dims=5, min_side=0, max_side=3), label="shape")
    x64 = data.draw(arrays(np.float64, shape, elements=VALUES), label="x")
    dy64 = data.draw(arrays(np.float64, shape, elements=UPSTREAM), label="dy")
    _check(forward, dtype, x64, dy64)


@pytest.mark.parametrize("forward", sorted(FORWARDS))
def test_every_forward_on_a_fixed_grid(forward: str) -> None:
    """Each forward at least once per dtype, whatever hypothesis draws (a scalar, a zero-size and a rank-5 shape)."""
    grid = np.array([-1e4, -2.5, -1.0, -0.5, -1e-6, -0.0, 0.0, 1e-6, 0.5, 1.0, 1.5, 2.5, 1e4])
    for dtype in DTYPES:
        _check(forward, dtype, grid, np.linspace(-2.0, 2.0, grid.size))
        _check(forward, dtype, np.array(0.0), np.array(1.5))
        _check(forward, dtype, np.zeros((2, 0, 3)), np.zeros((2, 0, 3)))
        _check(forward, dtype, np.linspace(-3.0, 3.0, 32).reshape(2, 1, 2, 4, 2), np.ones((2, 1, 2, 4, 2)))


def test_jit_compile_on_scalars_zero_size_and_rank_5() -> None:
    """XLA on unpadded odd shapes (the property test pads jit inputs to one length to bound XLA compilations)."""
    ops = [ste.forward(FORWARDS["sign"][0]).backward(name, **params) for name, params in DEFAULT_CASES]
    spec = tf.TensorSpec(None, tf.float32)

    @tf.function(input_signature=[spec, spec], jit_compile=True)
    def run(x: tf.Tensor, dy: tf.Tensor) -> Any:
        return _evaluate(ops, x, dy)

    for x64 in (np.array(-0.5), np.zeros((2, 0, 3)), np.linspace(-3.0, 3.0, 32).reshape(2, 1, 2, 4, 2)):
        x = tf.constant(x64, tf.float32)
        dy = tf.fill(tf.shape(x), 0.5)
        ys, grads = run(x, dy)
        for (name, params), y, grad in zip(DEFAULT_CASES, ys, grads):
            assert tuple(grad.shape) == x64.shape
            np.testing.assert_array_equal(y.numpy(), np.where(x64 >= 0, 1.0, -1.0))
            expected = 0.5 * reference_derivative(name, x64, params)
            np.testing.assert_allclose(grad.numpy(), expected, rtol=1e-6, atol=1e-6, err_msg=name)


# -- forward mode: JVP = d(x)·t -------------------------------------------------------------------------------

_JVP_FUNCTIONS: dict[str, Callable[..., Any]] = {}


def _jvps(ops: list[Any], x: tf.Tensor, t: tf.Tensor) -> list[tf.Tensor]:
    with tf.autodiff.ForwardAccumulator(x, t) as acc:
        ys = [op(x) for op in ops]
    return [acc.jvp(y, unconnected_gradients=tf.UnconnectedGradients.ZERO) for y in ys]


def _compiled_jvps(dtype: tf.DType) -> Callable[..., Any]:
    """One tf.function per dtype (unknown shape: traced once) with the accumulator inside, default parameters
    (tracing forward mode costs about 0.15 s per op; every parameter set runs eagerly in tests/test_forward_mode.py)."""
    if dtype.name not in _JVP_FUNCTIONS:
        spec = tf.TensorSpec(None, dtype)
        ops = [ste.forward(FORWARDS["sign"][0]).backward(name, **params) for name, params in DEFAULT_CASES]
        _JVP_FUNCTIONS[dtype.name] = tf.function(lambda x, t: _jvps(ops, x, t), input_signature=[spec, spec])
    return _JVP_FUNCTIONS[dtype.name]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@settings(max_examples=max(6, settings().max_examples // 3))
@given(data=st.data())
def test_forward_mode_jvp_is_derivative_times_tangent(dtype: tf.DType, data: st.DataObject) -> None:
    """Every entry, in every dtype, on random shapes and values, in tf.function: JVP = d(x)·t."""
    shape = data.draw(array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=3), label="shape")
    x = tf.cast(tf.constant(data.draw(arrays(np.float64, shape, elements=VALUES), label="x")), dtype)
    t = tf.cast(tf.constant(data.draw(arrays(np.float64, shape, elements=UPSTREAM), label="t")), dtype)
    xv, tv = as_f64(x), as_f64(t)
    tol = 8 * eps(dtype)
    for (name, params), jvp in zip(DEFAULT_CASES, _compiled_jvps(dtype)(x, t)):
        where = f"{name}{params} {dtype.name} shape {shape}"
        assert jvp.dtype == dtype and tuple(jvp.shape) == shape, where
        expected = reference_derivative(name, xv, params) * tv
        atol = tol * peak(name, params) * max(1.0, float(np.max(np.abs(tv), initial=0.0)))
        np.testing.assert_allclose(as_f64(jvp), expected, rtol=tol, atol=atol, err_msg=where)
