"""The one table of independent numpy references shared by every test module: surrogate derivatives d(x),
quantizer forwards and gradients, and forward functions.

Every formula is written from the tables in the issues (the surrogate library and REFERENCE.md), in float64 numpy,
in a form that does not overflow for any finite float64 input (so it also serves as the reference at the extremes).
Nothing here calls ``ste``.

``REFERENCES`` maps a registry name to (parameter sets to test, derivative function). Parameter values are dyadic
(exactly representable in float16 and bfloat16) so that thresholds such as ``abs(x) <= clip`` compare the same
numbers in TensorFlow (in the input's dtype) and here (in float64).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

Array = np.ndarray
Derivative = Callable[..., Array]


def _sech2_over(u: Array) -> Array:
    """1/(1 + cosh(u)) = 2e^{-|u|} / (1 + e^{-|u|})², without overflow."""
    e = np.exp(-np.abs(u))
    return 2.0 * e / (1.0 + e) ** 2


def _identity(x: Array) -> Array:
    return np.ones_like(x)


def _straight_through(x: Array, clip: float | None = 1.0) -> Array:
    if clip is None:
        return np.ones_like(x)
    return (np.abs(x) <= clip).astype(np.float64)


def _zero(x: Array) -> Array:
    return np.zeros_like(x)


def _sigmoid_surrogate(x: Array, beta: float = 1.0) -> Array:
    e = np.exp(-np.abs(beta * x))  # s(1 - s) = e^{-|z|} / (1 + e^{-|z|})²
    return beta * e / (1.0 + e) ** 2


def _approx_sign(x: Array) -> Array:
    return np.where(np.abs(x) <= 1.0, 2.0 - 2.0 * np.abs(x), 0.0)


def _swish_sign(x: Array, beta: float = 5.0) -> Array:
    with np.errstate(over="ignore", invalid="ignore"):
        u = beta * x
        value = beta * (2.0 - u * np.tanh(u / 2.0)) * _sech2_over(u)
    return np.where(np.abs(u) > 1e3, 0.0, value)  # the true value underflows long before |u| = 1000


def _fast_sigmoid(x: Array, slope: float = 25.0) -> Array:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + slope * np.abs(x)) ** 2


def _atan(x: Array, alpha: float = 2.0) -> Array:
    with np.errstate(over="ignore"):
        return (alpha / 2.0) / (1.0 + (math.pi * alpha * x / 2.0) ** 2)


def _triangle(x: Array, width: float = 1.0) -> Array:
    return np.maximum(0.0, 1.0 - np.abs(x) / width)


def _gaussian(x: Array, sigma: float = 0.5) -> Array:
    with np.errstate(over="ignore"):
        return np.exp(-(x**2) / (2.0 * sigma**2)) / (sigma * math.sqrt(2.0 * math.pi))


def _tanh_surrogate(x: Array, beta: float = 1.0) -> Array:
    e = np.exp(-2.0 * np.abs(beta * x))  # 1 - tanh²(u) = 4e^{-2|u|} / (1 + e^{-2|u|})²
    return beta * 4.0 * e / (1.0 + e) ** 2


def _piecewise_exp(x: Array, alpha: float = 1.0) -> Array:
    return (alpha / 2.0) * np.exp(-alpha * np.abs(x))


def _erf_surrogate(x: Array, alpha: float = 2.0) -> Array:
    with np.errstate(over="ignore"):
        return (alpha / math.sqrt(math.pi)) * np.exp(-(alpha**2) * x**2)


def _soft_sign(x: Array, alpha: float = 2.0) -> Array:
    with np.errstate(over="ignore"):
        return alpha / (2.0 * (1.0 + alpha * np.abs(x)) ** 2)


def _piecewise_quadratic(x: Array, alpha: float = 1.0) -> Array:
    return np.maximum(0.0, alpha - alpha**2 * np.abs(x))


def _boxcar(x: Array, width: float = 1.0) -> Array:
    return (np.abs(x) < width / 2.0).astype(np.float64) / width


#: name -> (parameter sets, d(x, **params)). The first parameter set is always the entry's defaults ({}).
REFERENCES: dict[str, tuple[list[dict[str, Any]], Derivative]] = {
    "identity": ([{}], _identity),
    "straight_through": ([{}, {"clip": 0.5}, {"clip": None}], _straight_through),
    "zero": ([{}], _zero),
    "sigmoid_surrogate": ([{}, {"beta": 4.0}], _sigmoid_surrogate),
    "approx_sign": ([{}], _approx_sign),
    "swish_sign": ([{}, {"beta": 2.0}], _swish_sign),
    "fast_sigmoid": ([{}, {"slope": 4.0}], _fast_sigmoid),
    "atan": ([{}, {"alpha": 0.5}], _atan),
    "triangle": ([{}, {"width": 2.0}], _triangle),
    "gaussian": ([{}, {"sigma": 0.25}], _gaussian),
    "tanh_surrogate": ([{}, {"beta": 4.0}], _tanh_surrogate),
    "piecewise_exp": ([{}, {"alpha": 4.0}], _piecewise_exp),
    "erf_surrogate": ([{}, {"alpha": 0.5}], _erf_surrogate),
    "soft_sign": ([{}, {"alpha": 0.5}], _soft_sign),
    "piecewise_quadratic": ([{}, {"alpha": 2.0}], _piecewise_quadratic),
    "boxcar": ([{}, {"width": 0.5}], _boxcar),
}


def builtin_names() -> list[str]:
    """Registry names defined by the ``ste`` package itself (entries registered by tests are left out)."""
    import ste

    return [name for name in ste.registry.names() if ste.registry.lookup(name).__module__.startswith("ste.")]


def entry_cases() -> list[tuple[str, dict[str, Any]]]:
    """Every (built-in name, parameter set) pair to test; a built-in without a reference here is an error."""
    cases = []
    for name in builtin_names():
        if name not in REFERENCES:
            raise AssertionError(
                f"registry entry {name!r} has no independent numpy reference in tests/references.py; "
                f"add its formula there."
            )
        cases.extend((name, params) for params in REFERENCES[name][0])
    return cases


def reference_derivative(name: str, x: Array, params: dict[str, Any]) -> Array:
    with np.errstate(over="ignore"):  # beta·x may overflow to ±inf near float64's max; every formula maps that to 0
        return REFERENCES[name][1](np.asarray(x, np.float64), **params)


# -- forward functions (TensorFlow) and their numpy references -------------------------------------------------


def tf_sign(x: tf.Tensor) -> tf.Tensor:
    """sign with sign(0) = +1 (the ste convention)."""
    return tf.where(x >= 0, tf.ones_like(x), -tf.ones_like(x))


def tf_heaviside(x: tf.Tensor) -> tf.Tensor:
    return tf.cast(x > 0, x.dtype)


FORWARDS: dict[str, tuple[Callable[[tf.Tensor], tf.Tensor], Callable[[Array], Array]]] = {
    "sign": (tf_sign, lambda x: np.where(x >= 0, 1.0, -1.0)),
    "heaviside": (tf_heaviside, lambda x: (x > 0).astype(np.float64)),
    "round": (tf.round, np.round),  # both round half to even
    "identity": (tf.identity, lambda x: x),
    "relu": (tf.nn.relu, lambda x: np.maximum(x, 0.0)),
}

DTYPES = [tf.float16, tf.bfloat16, tf.float32, tf.float64]


def eps(dtype: tf.DType) -> float:
    return {tf.float16: 2.0**-10, tf.bfloat16: 2.0**-7, tf.float32: 2.0**-23, tf.float64: 2.0**-52}[dtype]


def as_f64(t: Any) -> Array:
    """A tensor (any float dtype, bfloat16 included) as a float64 numpy array."""
    if isinstance(t, (tf.Tensor, tf.Variable)):
        t = tf.cast(t, tf.float64).numpy()
    return np.asarray(t, np.float64)


def peak(name: str, params: dict[str, Any]) -> float:
    """max |d| over a fine grid (for absolute tolerances)."""
    grid = np.linspace(-4.0, 4.0, 8001)
    return float(np.max(np.abs(reference_derivative(name, grid, params)))) or 1.0


def case_id(name: str, params: dict[str, Any]) -> str:
    return f"{name}({', '.join(f'{k}={v}' for k, v in params.items())})"


# -- quantizers: forward value and gradient with respect to x, at default arguments ------------------------------
#
# Each maps a float64 array x (of a float32 input, rank 2: [rows, channels]) to (y, dy/dx) with the formulas of
# REFERENCE.md §2. ``tf.round`` and ``np.round`` both round half to even.


def _sign_q(x: Array) -> tuple[Array, Array]:
    return np.where(x >= 0, 1.0, -1.0), _straight_through(x)


def _approx_sign_q(x: Array) -> tuple[Array, Array]:
    return np.where(x >= 0, 1.0, -1.0), _approx_sign(x)


def _swish_sign_q(x: Array) -> tuple[Array, Array]:
    return np.where(x >= 0, 1.0, -1.0), _swish_sign(x, 5.0)


def _heaviside_q(x: Array) -> tuple[Array, Array]:
    return (x > 0).astype(np.float64), _straight_through(x)


def _ternary_q(x: Array) -> tuple[Array, Array]:
    delta = 0.05
    return np.where(x >= delta, 1.0, np.where(x <= -delta, -1.0, 0.0)), _straight_through(x)


def _magnitude_aware_sign_q(x: Array) -> tuple[Array, Array]:
    scale = np.mean(np.abs(x), axis=0)  # every axis but the last
    return scale * np.where(x >= 0, 1.0, -1.0), scale * _straight_through(x)


def _dorefa_q(x: Array) -> tuple[Array, Array]:
    n = 2**2 - 1
    return np.round(np.clip(x, 0.0, 1.0) * n) / n, ((x >= 0) & (x <= 1)).astype(np.float64)


def _uniform_q(x: Array) -> tuple[Array, Array]:
    # [−1, 1] holds 0: the 8-bit narrow symmetric grid k/127, k = −127 … 127
    return np.clip(np.round(x * 127.0), -127, 127) / 127.0, (np.abs(x) <= 1).astype(np.float64)


def _lsq_q(x: Array) -> tuple[Array, Array]:
    q_n, q_p = 8, 7  # 4 bits, signed
    s = float(np.float32(2.0 * np.mean(np.abs(x)) / math.sqrt(q_p)))  # initialised from the first batch, float32
    v = x / s
    return np.round(np.clip(v, -q_n, q_p)) * s, ((v > -q_n) & (v < q_p)).astype(np.float64)


def _pact_q(x: Array) -> tuple[Array, Array]:
    alpha, n = 6.0, 2**4 - 1
    return np.round(np.clip(x, 0.0, alpha) * n / alpha) * alpha / n, ((x >= 0) & (x <= alpha)).astype(np.float64)


def _absmean_ternary_q(x: Array) -> tuple[Array, Array]:
    gamma = np.mean(np.abs(x))  # BitNet b1.58 (REFERENCE.md §10): per tensor, straight-through gradient
    return np.clip(np.round(x / (gamma + 1e-5)), -1, 1) * gamma, np.ones_like(x)


def _absmax_per_token_q(x: Array) -> tuple[Array, Array]:
    m = np.maximum(np.max(np.abs(x), axis=-1, keepdims=True), 1e-5)  # per row of the last axis
    return np.clip(np.round(x * 127 / m), -128, 127) * m / 127, np.ones_like(x)


#: quantizer name -> (y, dy/dx) at default arguments.
QUANTIZERS: dict[str, Callable[[Array], tuple[Array, Array]]] = {
    "sign": _sign_q,
    "ste_sign": _sign_q,
    "approx_sign": _approx_sign_q,
    "swish_sign": _swish_sign_q,
    "heaviside": _heaviside_q,
    "ste_heaviside": _heaviside_q,
    "ternary": _ternary_q,
    "ste_tern": _ternary_q,
    "magnitude_aware_sign": _magnitude_aware_sign_q,
    "dorefa": _dorefa_q,
    "dorefa_quantizer": _dorefa_q,
    "uniform": _uniform_q,
    "lsq": _lsq_q,
    "pact": _pact_q,
    "absmean_ternary": _absmean_ternary_q,
    "absmax_per_token": _absmax_per_token_q,
}


def quantizer_reference(name: str) -> Callable[[Array], tuple[Array, Array]]:
    """The reference of a quantizer name; a name without one is an error (so a new quantizer cannot be skipped)."""
    if name not in QUANTIZERS:
        raise AssertionError(
            f"quantizer {name!r} has no independent numpy reference in tests/references.py; add its formula there."
        )
    return QUANTIZERS[name]


# -- quantizers with a variable: smooth references of op(x, v) for check_gradient --------------------------------
#
# Each maps (x, v) at the check point (x0, v0) to a function of (x, v) whose finite differences at (x0, v0) are the
# documented gradients (REFERENCE.md §2): PACT's is clip(x, 0, α) itself; LSQ's step gradient is
# g·(round(x/s) − x/s inside, −Q_N below, Q_P above) with g = 1/√(N·Q_P), and its x gradient 1[inside].


def pact_reference(x0: Array, alpha0: float, bits: int) -> Callable[[Any, Any], Array]:
    return lambda x, a, **_: np.clip(np.asarray(x, np.float64), 0.0, float(np.asarray(a)))


def lsq_reference(x0: Array, s0: float, q_n: int, q_p: int) -> Callable[[Any, Any], Array]:
    v0 = x0 / s0
    per = np.where(v0 <= -q_n, -q_n, np.where(v0 >= q_p, q_p, np.round(v0) - v0))
    g = 1.0 / math.sqrt(x0.size * q_p)

    def reference(x: Any, s: Any, **_: Any) -> Array:
        x = np.asarray(x, np.float64)
        clipped = np.clip(x, -q_n * s0, q_p * s0)  # d/dx = 1[inside]
        return clipped + g * per * float(np.asarray(s))  # d/ds = g·per (summed by the vector-Jacobian product)

    return reference
