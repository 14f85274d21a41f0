"""Every surrogate entry against its independent numpy formula (the shared table, tests/references.py), against
autodiff of its own primitive, through ``.backward(name)`` vs ``.backward_like(primitive)``, and for finiteness at
extreme inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import ste
from tests.helpers import FLOAT_DTYPES, as_float64
from tests.references import builtin_names, case_id, entry_cases, reference_derivative

DTYPES = FLOAT_DTYPES

# (name, params): the defaults plus non-default settings, from the shared table (tests/references.py); a built-in
# entry without a reference there fails at collection instead of being skipped.
CASES: list[tuple[str, dict[str, Any]]] = entry_cases()
CASE_IDS = [case_id(name, params) for name, params in CASES]

BUILTIN_NAMES = sorted(builtin_names())


def reference(name: str, params: dict[str, Any], x: np.ndarray) -> np.ndarray:
    return reference_derivative(name, x, params)


# Moderate inputs where the formulas vary, exact kinks/thresholds, and large ones (where the numpy formulas are
# still finite in float64: cosh overflows to inf there and the quotient is 0).
_FINE = np.arange(-1400, 1401) / 400.0  # step 1/400, includes 0, ±0.25, ±0.5, ±1 and ±1.25 exactly
_WIDE = np.array([0.0, 1e-30, 1e-8, 1e-3, 0.1, 0.3333, 5.0, 7.5, 10.0, 20.0, 50.0, 100.0, 700.0, 1e3, 1e4])
GRID = np.unique(np.concatenate([_FINE, _WIDE, -_WIDE]))

# Points where the primitive is not differentiable (the derivative jumps); excluded from the autodiff check only.
KINKS: dict[str, Callable[[dict[str, Any]], list[float]]] = {
    "straight_through": lambda p: [] if p.get("clip", 1.0) is None else [p.get("clip", 1.0)],
    "boxcar": lambda p: [p.get("width", 1.0) / 2],
}


def _eps(dtype: tf.DType) -> float:
    return 2.0**-7 if dtype == tf.bfloat16 else float(np.finfo(dtype.as_numpy_dtype).eps)


def _tolerances(dtype: tf.DType) -> tuple[float, float]:
    """(rtol, atol as a fraction of the peak): halves are float32 values rounded once (measured: <= 0.45 eps);
    full precision allows some ulps for transcendental functions, argument amplification (exp(−t²)) and the
    literal numpy formulas' own rounding (measured: <= 3.2 eps of the peak)."""
    eps = _eps(dtype)
    return (eps, eps) if dtype in (tf.float16, tf.bfloat16) else (16 * eps, 16 * eps)


def _as64(t: tf.Tensor) -> np.ndarray:
    return as_float64(t)


def _assert_close(got: np.ndarray, want: np.ndarray, rtol: float, atol: float, what: str, x: np.ndarray) -> None:
    bad = ~(np.abs(got - want) <= rtol * np.abs(want) + atol)
    if bad.any():
        i = np.flatnonzero(bad)[:5]
        pytest.fail(f"{what}: {bad.sum()} mismatches, e.g. x={x[i]} got={got[i]} want={want[i]}")


@pytest.mark.parametrize(("name", "params"), CASES, ids=CASE_IDS)
def test_derivative_matches_numpy_table_in_every_dtype(name: str, params: dict[str, Any]) -> None:
    surrogate = ste.registry.get(name, **params)
    for dtype in DTYPES:
        x = tf.constant(GRID, dtype)
        x64 = _as64(x)  # the grid as the dtype represents it
        want = reference(name, params, x64)
        assert np.all(np.isfinite(want))
        got = surrogate.derivative(x)
        assert got.dtype == dtype and got.shape == x.shape
        rtol, atol_fraction = _tolerances(dtype)
        atol = atol_fraction * float(np.max(np.abs(want)))
        _assert_close(_as64(got), want, rtol, atol, f"{surrogate!r} in {dtype.name}", x64)


@pytest.mark.parametrize(("name", "params"), CASES, ids=CASE_IDS)
def test_derivative_is_autodiff_of_primitive_float64(name: str, params: dict[str, Any]) -> None:
    surrogate = ste.registry.get(name, **params)
    assert surrogate.has_primitive
    keep = np.ones(GRID.shape, bool)
    for kink in KINKS.get(name, lambda p: [])(params):
        keep &= np.abs(np.abs(GRID) - kink) > 1e-9
    x = tf.constant(GRID[keep], tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = surrogate.primitive(x)
    assert y.dtype == tf.float64 and y.shape == x.shape
    autodiff = tape.gradient(y, x, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    got = _as64(surrogate.derivative(x))
    peak = float(np.max(np.abs(got)))
    _assert_close(_as64(autodiff), got, 1e-10, 1e-12 * peak, f"autodiff of {surrogate!r}.primitive", GRID[keep])


def heaviside(x: tf.Tensor) -> tf.Tensor:
    return tf.cast(x > 0, x.dtype)


@pytest.mark.parametrize(("name", "params"), CASES, ids=CASE_IDS)
def test_backward_by_name_equals_backward_like_primitive(name: str, params: dict[str, Any]) -> None:
    """Kinks included: the primitives are written so that autodiff's conventions there match the derivative."""
    surrogate = ste.registry.get(name, **params)
    by_name = ste.forward(heaviside).backward(name, **params)
    by_spec = ste.forward(heaviside).backward(repr(surrogate))
    like = ste.forward(heaviside).backward_like(surrogate.primitive)
    rng = np.random.default_rng(0)
    grid = GRID[::7]
    upstream = rng.uniform(-2.0, 2.0, grid.shape)
    for dtype in DTYPES:
        x = tf.constant(grid, dtype)
        dy = tf.constant(upstream, dtype)
        grads = []
        for op in (by_name, by_spec, like):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = op(x)
            np.testing.assert_array_equal(_as64(y), (_as64(x) > 0).astype(np.float64))
            grad = tape.gradient(y, x, output_gradients=dy)
            assert grad.dtype == dtype
            grads.append(_as64(grad))
        np.testing.assert_array_equal(grads[0], grads[1])
        # Two float32 computations rounded to the dtype: at most a rounding step apart.
        eps = _eps(dtype)
        scale = float(np.max(np.abs(grads[0]))) if grads[0].size else 0.0
        rtol, atol = (
            (2 * eps, 2 * eps * scale) if dtype in (tf.float16, tf.bfloat16) else (1e3 * eps, 1e3 * eps * scale)
        )
        _assert_close(grads[2], grads[0], rtol, atol, f"backward_like vs backward({surrogate!r}) in {dtype.name}", grid)


# Large hyperparameters make beta·x overflow sooner and sharpen every exponent.
EXTREME_CASES = [
    *CASES,
    ("sigmoid_surrogate", {"beta": 100.0}),
    ("swish_sign", {"beta": 100.0}),
    ("tanh_surrogate", {"beta": 100.0}),
    ("atan", {"alpha": 100.0}),
    ("fast_sigmoid", {"slope": 1000.0}),
    ("soft_sign", {"alpha": 100.0}),
    ("erf_surrogate", {"alpha": 100.0}),
    ("gaussian", {"sigma": 0.01}),
    ("piecewise_exp", {"alpha": 100.0}),
    ("piecewise_quadratic", {"alpha": 100.0}),
    ("triangle", {"width": 0.01}),
    ("boxcar", {"width": 0.01}),
]


def _extremes(dtype: tf.DType) -> np.ndarray:
    """0, ±1e-30, ±1e4, ±the largest value, the smallest normal and a subnormal, and a few ordinary values."""
    tiny = 2.0**-126 if dtype == tf.bfloat16 else float(np.finfo(dtype.as_numpy_dtype).tiny)
    values = [1e-30, 1e4, float(dtype.max), float(dtype.max) / 3, tiny, tiny / 8, 0.5, 1.0, 3.0, 60.0, 1e3]
    return np.array([0.0, *values, *(-v for v in values)])


@pytest.mark.parametrize(
    ("name", "params"), EXTREME_CASES, ids=[*CASE_IDS, *(f"{n}{p}" for n, p in EXTREME_CASES[len(CASES) :])]
)
def test_finite_at_extreme_inputs_in_every_dtype(name: str, params: dict[str, Any]) -> None:
    surrogate = ste.registry.get(name, **params)
    op = ste.forward(heaviside).backward(surrogate)
    for dtype in DTYPES:
        x = tf.constant(_extremes(dtype), dtype)
        assert np.all(np.isfinite(_as64(x)))
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            p = surrogate.primitive(x)
            y = op(x)
        results = {
            "derivative": surrogate.derivative(x),
            "vjp": surrogate.vjp(tf.ones_like(x), x),
            "op gradient": tape.gradient(y, x),
            "primitive": p,
            "autodiff of primitive": tape.gradient(p, x, unconnected_gradients=tf.UnconnectedGradients.ZERO),
        }
        for what, value in results.items():
            assert value.dtype == dtype, (what, dtype)
            values = _as64(value)
            assert np.all(np.isfinite(values)), f"{surrogate!r} {what} in {dtype.name}: {values} at {_as64(x)}"


def test_every_table_entry_is_registered_and_exported() -> None:
    expected = {
        "identity": "Identity",
        "straight_through": "StraightThrough",
        "zero": "Zero",
        "sigmoid_surrogate": "SigmoidSurrogate",
        "approx_sign": "ApproxSign",
        "swish_sign": "SwishSign",
        "fast_sigmoid": "FastSigmoid",
        "atan": "Atan",
        "triangle": "Triangle",
        "gaussian": "Gaussian",
        "tanh_surrogate": "TanhSurrogate",
        "piecewise_exp": "PiecewiseExp",
        "erf_surrogate": "ErfSurrogate",
        "soft_sign": "SoftSign",
        "piecewise_quadratic": "PiecewiseQuadratic",
        "boxcar": "Boxcar",
    }
    assert set(expected) <= set(ste.registry.names())
    assert set(BUILTIN_NAMES) == set(expected)
    for name, class_name in expected.items():
        cls = getattr(ste.registry, class_name)
        assert class_name in ste.registry.__all__
        assert ste.registry.lookup(name) is cls
        doc = cls.__doc__ or ""
        assert cls.formula and cls.reference, name
        assert "peak" in doc.lower(), f"{name}: the docstring must give the peak value"
        for field, default in cls().params.items():  # the defaults are stated
            assert f"{field} = {default}" in doc or f"{field}={default}" in doc, (name, field)


def test_table_defaults() -> None:
    defaults = {
        "straight_through": {"clip": 1.0},
        "sigmoid_surrogate": {"beta": 1.0},
        "swish_sign": {"beta": 5.0},
        "fast_sigmoid": {"slope": 25.0},
        "atan": {"alpha": 2.0},
        "triangle": {"width": 1.0},
        "gaussian": {"sigma": 0.5},
        "tanh_surrogate": {"beta": 1.0},
        "piecewise_exp": {"alpha": 1.0},
        "erf_surrogate": {"alpha": 2.0},
        "soft_sign": {"alpha": 2.0},
        "piecewise_quadratic": {"alpha": 1.0},
        "boxcar": {"width": 1.0},
        "identity": {},
        "zero": {},
        "approx_sign": {},
    }
    for name, params in defaults.items():
        assert dict(ste.registry.get(name).params) == params, name


def test_all_entries_under_xla_in_one_compilation() -> None:
    """The ops every entry uses (erfc, atan, sigmoid, clip, where, the half-precision casts) compile under XLA in
    every dtype and agree with eager mode."""
    surrogates = [ste.registry.get(name) for name in BUILTIN_NAMES]  # defaults only: one small XLA cluster
    ops = [ste.forward(heaviside).backward(s) for s in surrogates]
    xs = [tf.constant(GRID[::11], dtype) for dtype in DTYPES]

    def grads(*xs: tf.Tensor) -> list[tf.Tensor]:
        out = []
        for x in xs:
            for op in ops:
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    y = op(x)
                out.append(tape.gradient(y, x))
        return out

    eager = grads(*xs)
    compiled = tf.function(grads, jit_compile=True)(*xs)
    labels = [(s, d) for d in DTYPES for s in surrogates]
    for (surrogate, dtype), a, b in zip(labels, eager, compiled):
        assert b.dtype == dtype
        rtol = 2 * _eps(dtype) if dtype in (tf.float16, tf.bfloat16) else 1e-5
        np.testing.assert_allclose(as_float64(b), as_float64(a), rtol=rtol, atol=rtol, err_msg=f"{surrogate!r} {dtype}")


def _every_finite_value(dtype: tf.DType) -> np.ndarray:
    """Every finite float16 / bfloat16 value (all 2¹⁶ bit patterns); for float32 / float64 every binary exponent
    (subnormals included) with a few mantissas, both signs."""
    bits = np.arange(1 << 16, dtype=np.uint32)
    with np.errstate(invalid="ignore"):  # the NaN patterns, filtered below
        return _finite(dtype, bits)


def _finite(dtype: tf.DType, bits: np.ndarray) -> np.ndarray:
    if dtype == tf.float16:
        values = bits.astype(np.uint16).view(np.float16).astype(np.float64)
    elif dtype == tf.bfloat16:
        values = (bits << 16).view(np.float32).astype(np.float64)  # bfloat16 is the top half of a float32
    else:
        info = np.finfo(dtype.as_numpy_dtype)
        exponents = np.arange(int(np.log2(info.smallest_subnormal)), int(info.maxexp))
        mantissas = np.array([1.0, 1.25, 1.5, 1.999])
        with np.errstate(over="ignore"):
            values = (mantissas[:, None] * np.exp2(exponents.astype(np.float64))[None, :]).ravel()
        values = np.concatenate([values, -values, [0.0, float(dtype.max), -float(dtype.max)]])
    return values[np.isfinite(values) & (np.abs(values) <= float(dtype.max))]


@pytest.mark.parametrize(
    ("name", "params"), EXTREME_CASES, ids=[*CASE_IDS, *(f"{n}{p}" for n, p in EXTREME_CASES[len(CASES) :])]
)
def test_finite_for_every_half_precision_value_and_every_exponent(name: str, params: dict[str, Any]) -> None:
    surrogate = ste.registry.get(name, **params)
    for dtype in DTYPES:
        x = tf.constant(_every_finite_value(dtype), dtype)
        assert np.all(np.isfinite(as_float64(x)))
        for what, value in (("derivative", surrogate.derivative(x)), ("primitive", surrogate.primitive(x))):
            values = as_float64(value)
            bad = ~np.isfinite(values)
            assert not bad.any(), f"{surrogate!r} {what} in {dtype.name}: {values[bad][:5]} at {as_float64(x)[bad][:5]}"
