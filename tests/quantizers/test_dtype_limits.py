"""Multi-bit quantizers whose constants or levels do not fit the input's dtype are refused, never NaN (issue 22.A2).

The largest bit widths below are derived by hand from the significand widths (float16: 11 bits, bfloat16: 8 bits),
not read from ste: n levels spaced Δ apart below a magnitude M stay distinct when Δ >= ulp(M).

* DoReFa activations, levels k/n in [0, 1]: ulp just below 1 is 2^-11 (float16), 2^-8 (bfloat16): n <= 2^11, 2^8.
* DoReFa weights, spacing 2/n: n <= 2^12, 2^9; Uniform(-1, 1), spacing 2/(n − 1): n − 1 <= 2^12, 2^9.
* PACT(alpha=6), spacing 6/n, ulp in [4, 8) 2^-8 (float16), 2^-5 (bfloat16): n <= 1536, 192.
* LSQ signed, the integer grid −2^(b−1) … 2^(b−1) − 1 times s: integers are exact up to 2^11, 2^8.

Inside those limits every output equals a float64 numpy reference, rounded to the dtype, within one unit in the last
place (the reference of the bfloat16 Uniform(-1e5, 1.2e5) case is 78.4; the bfloat16 arithmetic ste used before gave
512).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
from ste.quantizers import LSQ, PACT, DoReFa, Uniform
from tests.references import DTYPES

F16, BF16, F32, F64 = tf.float16, tf.bfloat16, tf.float32, tf.float64

#: (factory of bits, {dtype: largest bits that fits}); float32 and float64 hold every width up to 16.
LIMITS: dict[str, tuple[Callable[[int], Any], dict[tf.DType, int]]] = {
    "dorefa_activations": (lambda b: DoReFa(bits=b), {F16: 11, BF16: 8}),
    "dorefa_weights": (lambda b: DoReFa(bits=b, mode="weights"), {F16: 12, BF16: 9}),
    "uniform": (lambda b: Uniform(bits=b), {F16: 12, BF16: 9}),
    "pact": (lambda b: PACT(bits=b), {F16: 10, BF16: 7}),
    "lsq": (lambda b: LSQ(bits=b), {F16: 12, BF16: 9}),
}

_X = np.concatenate([np.linspace(-3.0, 8.0, 301), [0.0, 1.0, 6.0, 1e4, -1e4]]) + 1.23e-3


def _ulp(values: np.ndarray, dtype: tf.DType) -> np.ndarray:
    bits = {F16: 11, BF16: 8, F32: 24, F64: 53}[dtype]
    tiny = {F16: 2.0**-14, BF16: 2.0**-126, F32: 2.0**-126, F64: 2.0**-1022}[dtype]
    magnitude = np.maximum(np.abs(values), tiny)
    return 2.0 ** (np.floor(np.log2(magnitude)) - (bits - 1))


def _reference(name: str, quantizer: Any, x: np.ndarray) -> np.ndarray:
    """The quantizer's formula in float64 numpy (round half to even)."""
    bits = quantizer.bits
    n = 2**bits - 1
    if name == "dorefa_activations":
        return np.round(np.clip(x, 0.0, 1.0) * n) / n
    if name == "dorefa_weights":
        t = np.tanh(x)
        return 2 * np.round(n * (t / (2 * np.max(np.abs(t))) + 0.5)) / n - 1
    if name == "uniform":  # the ranges here hold 0 inside: the multiples of Δ = (max − min)/(2^bits − 2)
        low, high = quantizer.min, quantizer.max
        step = (high - low) / (n - 1)
        return np.clip(np.round(x / step), np.round(low / step), np.round(high / step)) * step
    if name == "pact":
        alpha = float(quantizer.alpha.numpy())
        return np.round(np.clip(x, 0.0, alpha) * n / alpha) * alpha / n
    assert name == "lsq"
    s = float(quantizer.step.numpy())
    return np.round(np.clip(x / s, -(2 ** (bits - 1)), 2 ** (bits - 1) - 1)) * s


def _assert_matches(name: str, quantizer: Any, x: np.ndarray, dtype: tf.DType) -> None:
    xd = tf.cast(tf.constant(x), dtype)
    y = tf.cast(quantizer(xd), tf.float64).numpy()
    x_held = tf.cast(xd, tf.float64).numpy()
    want = tf.cast(tf.cast(tf.constant(_reference(name, quantizer, x_held)), dtype), tf.float64).numpy()
    assert np.all(np.isfinite(y)), f"{quantizer!r} on {dtype.name}: non-finite output"
    error = np.abs(y - want)
    # x within float32 rounding of a tie (of tanh(x) in float32, for DoReFa weights) may round to the next level
    assert np.all(error <= _level_step(name, quantizer) + _ulp(want, dtype)), f"{quantizer!r} on {dtype.name}"
    # float32 arithmetic (for half precision too) rounds low + k·Δ to float32's precision at the range's magnitude
    compute = F64 if dtype == F64 else F32
    close = error <= _ulp(want, dtype) + _ulp(np.array(_magnitude(name, quantizer)), compute)
    assert close.mean() > 0.95, f"{quantizer!r} on {dtype.name}: {np.sum(~close)} outputs off the reference"


def _magnitude(name: str, quantizer: Any) -> float:
    if name == "uniform":
        return max(abs(quantizer.min), abs(quantizer.max))
    if name == "pact":
        return float(quantizer.alpha.numpy())
    if name == "lsq":
        return float(quantizer.step.numpy()) * 2 ** (quantizer.bits - 1)
    return 1.0


def _level_step(name: str, quantizer: Any) -> float:
    n = 2**quantizer.bits - 1
    return {
        "dorefa_activations": lambda: 1.0 / n,
        "dorefa_weights": lambda: 2.0 / n,
        "uniform": lambda: (quantizer.max - quantizer.min) / (n - 1),
        "pact": lambda: float(quantizer.alpha.numpy()) / n,
        "lsq": lambda: float(quantizer.step.numpy()),
    }[name]()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("name", sorted(LIMITS))
def test_the_largest_bits_that_fit_compute_and_one_more_is_refused(name: str, dtype: tf.DType) -> None:
    factory, limits = LIMITS[name]
    largest = limits.get(dtype, 16)
    _assert_matches(name, factory(largest), _X, dtype)
    _assert_matches(name, factory(min(largest, 4)), _X, dtype)
    if largest < 16:
        quantizer = factory(largest + 1)
        with pytest.raises(ste.errors.ParameterError, match=rf"{dtype.name}.*bits <= {largest} for {dtype.name}"):
            quantizer(tf.cast(tf.constant(_X), dtype))
        with pytest.raises(ste.errors.ParameterError, match=type(quantizer).__name__):
            quantizer(tf.cast(tf.constant(_X), dtype))


@pytest.mark.parametrize(
    ("make", "name", "refused"),
    [
        (lambda: PACT(alpha=1e6), "pact", {F16}),
        (lambda: Uniform(min=-1e5, max=1.2e5), "uniform", {F16}),
        (lambda: Uniform(bits=4, min=-3e38, max=3e38), "uniform", {F16}),  # max − min is beyond float32; Δ is not
        (lambda: Uniform(bits=4, min=-3.5e38, max=3.5e38), "uniform", {F16, BF16, F32}),  # beyond float32
    ],
)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_constants_beyond_the_dtype_are_refused_and_the_rest_are_exact(make, name, refused, dtype) -> None:
    quantizer = make()
    x = _X * (1e4 if name == "uniform" else 1.0)
    if dtype in refused:
        with pytest.raises(ste.errors.ParameterError, match=rf"{type(quantizer).__name__}.*{dtype.name}.*Fix"):
            quantizer(tf.cast(tf.constant(x), dtype))
    else:
        _assert_matches(name, quantizer, x, dtype)


def test_refused_at_trace_time_in_tf_function_and_xla() -> None:
    quantizer = DoReFa(bits=16)
    for jit in (False, True):
        fn = tf.function(quantizer.__call__, jit_compile=jit)
        with pytest.raises(ste.errors.ParameterError, match="float16"):
            fn.get_concrete_function(tf.TensorSpec([4], tf.float16))


def test_a_trained_pact_alpha_is_what_is_checked() -> None:
    quantizer = PACT(bits=4, alpha=6.0)
    quantizer(tf.zeros([2], tf.float16))  # fits
    quantizer.alpha.assign(1e6)  # as after training or loading
    with pytest.raises(ste.errors.ParameterError, match="1000000"):
        quantizer(tf.zeros([2], tf.float16))


@pytest.mark.parametrize("spec", ["dorefa(bits=16, mode='weights')", "lsq(bits=16)", "uniform(bits=16)"])
def test_a_mixed_float16_layer_refuses_before_training(spec: str) -> None:
    layer = ste.layers.QuantDense(3, kernel_quantizer=spec, dtype="mixed_float16")
    model = keras.Sequential([keras.Input((4,)), layer])
    model.compile("sgd", "mse")
    before = [w.numpy().copy() for w in model.weights]
    with pytest.raises(ste.errors.ParameterError, match="float16.*dtype='float32'"):
        model.fit(np.ones((8, 4)), np.ones((8, 3)), verbose=0)
    for old, new in zip(before, model.weights):
        np.testing.assert_array_equal(old, new.numpy())


def test_a_mixed_float16_layer_that_fits_trains() -> None:
    layer = ste.layers.QuantDense(3, kernel_quantizer="dorefa(bits=8, mode='weights')", dtype="mixed_float16")
    model = keras.Sequential([keras.Input((4,)), layer])
    model.compile("sgd", "mse")
    history = model.fit(np.ones((8, 4)), np.ones((8, 3)), verbose=0, epochs=2)
    assert np.all(np.isfinite(history.history["loss"]))
