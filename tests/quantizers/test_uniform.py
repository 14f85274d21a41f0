"""DoReFa (activations and weights) and Uniform against numpy formulas; ties round half to even."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import ste
from ste.quantizers import DoReFa, Uniform

FLOATS = [tf.float16, tf.bfloat16, tf.float32, tf.float64]


def away_from_ties(scaled: np.ndarray, margin: float) -> np.ndarray:
    """Mask of values whose fractional part is not within ``margin`` of 0.5 (low precision may round either way)."""
    return np.abs(scaled - np.floor(scaled) - 0.5) > margin


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("bits", [1, 2, 4])
def test_dorefa_activations(run, dtype, bits):
    n = 2**bits - 1
    levels = np.arange(n + 1) / n
    # range ends 0 and 1, just outside them, every level, points between levels, large magnitudes
    grid = np.concatenate([[-300.0, -1.0, -0.0078125, 0.0, 1.0, 1.0078125, 2.0, 300.0], levels, levels[:-1] + 0.3 / n])
    x = grid.astype(dtype.as_numpy_dtype).astype(np.float64)
    y, grad, dy = run(DoReFa(bits=bits, mode="activations"), x, dtype)
    expected = np.round(np.clip(x, 0.0, 1.0) * n) / n
    keep = away_from_ties(np.clip(x, 0, 1) * n, 0.05)
    atol = {tf.float16: 1e-3, tf.bfloat16: 8e-3}.get(dtype, 1e-7)
    np.testing.assert_allclose(y[keep], expected[keep], atol=atol)
    np.testing.assert_array_equal(grad, dy * ((x >= 0) & (x <= 1)))


def test_dorefa_rounds_half_to_even():
    # bits=1: n = 1, so x = 0.5 is an exact tie: round half to even gives 0 (away from zero would give 1)
    y = DoReFa(bits=1)(tf.constant([0.25, 0.5, 0.50390625, 0.75]))
    np.testing.assert_array_equal(y.numpy(), [0.0, 0.0, 1.0, 1.0])


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
@pytest.mark.parametrize("bits", [1, 2, 3])
def test_dorefa_weights(run, dtype, bits):
    n = 2**bits - 1
    rng = np.random.default_rng(bits)
    x = np.concatenate([[0.0, -3.0, 3.0, -0.5, 0.5], rng.normal(size=40)])
    t = np.tanh(x)
    m = np.max(np.abs(t))
    u = t / (2 * m) + 0.5
    expected = 2 * np.round(u * n) / n - 1
    y, grad, dy = run(DoReFa(bits=bits, mode="weights"), x, dtype)
    keep = away_from_ties(u * n, 1e-4)
    np.testing.assert_allclose(y[keep], expected[keep], atol=1e-6)
    assert y.min() == -1.0 and y.max() == 1.0  # the largest magnitudes map to the range ends
    np.testing.assert_allclose(grad, dy * (1 - t**2) / m, rtol=1e-5)


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
def test_dorefa_weights_low_precision(run, dtype):
    n = 3
    x = np.linspace(-2.0, 2.0, 33).astype(dtype.as_numpy_dtype).astype(np.float64)
    t = np.tanh(x)
    m = np.max(np.abs(t))
    u = t / (2 * m) + 0.5
    y, grad, dy = run(DoReFa(bits=2, mode="weights"), x, dtype)
    keep = away_from_ties(u * n, 0.05)
    np.testing.assert_allclose(y[keep], (2 * np.round(u * n) / n - 1)[keep], atol=2e-2)
    np.testing.assert_allclose(grad, dy * (1 - t**2) / m, rtol=3e-2, atol=1e-2)


def test_dorefa_weights_of_all_zeros_is_finite():
    with tf.GradientTape() as tape:
        x = tf.zeros([4])
        tape.watch(x)
        y = DoReFa(bits=2, mode="weights")(x)
    assert np.all(np.isfinite(y.numpy())) and np.all(np.isfinite(tape.gradient(y, x).numpy()))


def uniform_reference(x: np.ndarray, bits: int, low: float, high: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Uniform's documented grid in float64 numpy: (output, levels, step). A range across 0 takes the multiples of
    Δ = (high − low)/(2^bits − 2) from the one nearest low to the one nearest high; a range on one side of 0 takes
    2^bits levels from low to high."""
    if low < 0 < high:
        step = (high - low) / (2**bits - 2)
        k = np.arange(np.round(low / step), np.round(high / step) + 1)
        return np.clip(np.round(x / step), k[0], k[-1]) * step, k * step, step
    step = (high - low) / (2**bits - 1)
    return low + np.round((np.clip(x, low, high) - low) / step) * step, low + step * np.arange(2**bits), step


RANGES = [
    (2, -1.0, 1.0),  # −1, 0, 1
    (8, -1.0, 1.0),  # k/127
    (3, -0.5, 2.0),  # across 0, asymmetric: the ends move to the nearest multiples of Δ = 5/12
    (3, 0.0, 6.0),  # 0 is an end
    (2, -3.0, 0.0),  # 0 is the upper end
    (4, 0.5, 3.0),  # 0 outside: it maps to 0.5
    (4, -3.0, -1.0),  # 0 outside: it maps to −1
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("bits", "low", "high"), RANGES)
def test_uniform(run, dtype, bits, low, high):
    _, levels, step = uniform_reference(np.zeros(1), bits, low, high)
    grid = np.concatenate(
        [[low - 100.0, low - 0.5, low, 0.0, high, high + 0.5, high + 100.0], levels[::7], levels[:-1:5] + 0.3 * step]
    )
    x = grid.astype(dtype.as_numpy_dtype).astype(np.float64)
    y, grad, dy = run(Uniform(bits=bits, min=low, max=high), x, dtype)
    expected = uniform_reference(x, bits, low, high)[0]
    keep = away_from_ties(x / step if low < 0 < high else (np.clip(x, low, high) - low) / step, 0.05)
    eps = {tf.float16: 2e-3, tf.bfloat16: 1.6e-2}.get(dtype, 1e-6) * max(abs(low), abs(high))
    np.testing.assert_allclose(y[keep], expected[keep], atol=eps + (step if dtype == tf.bfloat16 and bits == 8 else 0))
    np.testing.assert_array_equal(grad, dy * ((x >= low) & (x <= high)))
    if dtype in (tf.float32, tf.float64):
        assert len(np.unique(y)) <= len(levels) <= 2**bits
    zero = y[x == 0.0]
    if low <= 0.0 <= high:
        np.testing.assert_array_equal(zero, 0.0)  # exactly: a pruned weight stays pruned
    else:
        np.testing.assert_array_equal(zero, min(max(0.0, low), high))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("bits", [2, 4, 8])
def test_uniform_symmetric_grid_holds_both_ends_and_zero(dtype, bits):
    """A symmetric range keeps both ends and 0 as levels, on 2^bits − 1 levels (TFLite's narrow grid)."""
    x = tf.constant([-7.0, -1.5, 0.0, -0.0, 1.5, 7.0], dtype)
    y = tf.cast(Uniform(bits=bits, min=-1.5, max=1.5)(x), tf.float64).numpy()
    np.testing.assert_array_equal(y, [-1.5, -1.5, 0.0, 0.0, 1.5, 1.5])
    if dtype == tf.float64:
        dense = Uniform(bits=bits, min=-1.5, max=1.5)(tf.constant(np.linspace(-2.0, 2.0, 20001), dtype)).numpy()
        k = np.arange(-(2 ** (bits - 1) - 1), 2 ** (bits - 1))  # 2^bits − 1 integers, −k_max … k_max
        np.testing.assert_allclose(np.unique(dense), k * 3 / (2**bits - 2))


def test_uniform_ends_at_a_tie_round_half_to_even():
    """[−1, 3] on 8 bits: Δ = 4/254 and min/Δ = −63.5 exactly, whose nearest even integer is −64."""
    y = Uniform(bits=8, min=-1.0, max=3.0)(tf.constant([-5.0, 5.0], tf.float64)).numpy()
    np.testing.assert_allclose(y, [-64 * 4 / 254, 190 * 4 / 254], rtol=1e-15)


def test_uniform_of_one_bit_across_zero_is_refused():
    with pytest.raises(ste.errors.ParameterError, match=r"bits=1 .*across 0.*Fix: bits >= 2"):
        Uniform(bits=1)
    np.testing.assert_array_equal(Uniform(bits=1, min=0.0, max=1.0)(tf.constant([-1.0, 0.0, 0.7])).numpy(), [0, 0, 1])


def test_invalid_parameters():
    with pytest.raises(ste.errors.ParameterError, match="mode"):
        DoReFa(mode="weight")
    with pytest.raises(ste.errors.ParameterError, match="bits"):
        DoReFa(bits=0)
    with pytest.raises(ste.errors.ParameterError, match="min must be < max"):
        Uniform(min=1.0, max=1.0)
    with pytest.raises(ste.errors.ParameterError, match="bits"):
        Uniform(bits=2.5)


def test_dorefa_mode_and_bits_set_later_are_what_call_computes_and_saves() -> None:
    """Configuration and behaviour never disagree (issue 11.7): a set mode is used by call and by get_config."""
    x64 = np.array([-2.0, -0.3, 0.2, 0.7, 1.5])
    x = tf.constant(x64, tf.float32)
    q = DoReFa(bits=2)
    np.testing.assert_allclose(q(x).numpy(), np.round(np.clip(x64, 0.0, 1.0) * 3) / 3, rtol=1e-6)
    q.mode = "weights"
    t = np.tanh(x64)
    expected_weights = 2 * np.round(3 * (t / (2 * np.max(np.abs(t))) + 0.5)) / 3 - 1
    np.testing.assert_allclose(q(x).numpy(), expected_weights, rtol=1e-6, atol=1e-6)
    assert q.get_config()["mode"] == "weights"
    np.testing.assert_allclose(DoReFa.from_config(q.get_config())(x).numpy(), expected_weights, rtol=1e-6, atol=1e-6)
    for bad in ("unknown", None, 1):
        with pytest.raises(ste.errors.ParameterError, match="mode"):
            q.mode = bad
    assert q.mode == "weights"
    with pytest.raises(ste.errors.ParameterError, match="bits"):
        q.bits = 0
    q.bits = 3
    assert q.precision == 3 and q.get_config()["bits"] == 3
    expected_3 = 2 * np.round(7 * (t / (2 * np.max(np.abs(t))) + 0.5)) / 7 - 1
    np.testing.assert_allclose(q(x).numpy(), expected_3, rtol=1e-6, atol=1e-6)
