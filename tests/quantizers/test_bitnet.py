"""BitNet b1.58's quantizers (REFERENCE.md §10) against numpy: absmean ternary weights per tensor, 8-bit absmax
activations per token, straight-through gradients; every float dtype, second order, ``tf.function`` and XLA."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import ste
from ste.quantizers import AbsmaxPerToken, AbsmeanTernary

FLOATS = [tf.float16, tf.bfloat16, tf.float32, tf.float64]
ATOL = {tf.float16: 2e-3, tf.bfloat16: 1.6e-2}


def ternary_reference(w: np.ndarray, epsilon: float = 1e-5) -> np.ndarray:
    gamma = np.mean(np.abs(w))
    return np.clip(np.round(w / (gamma + epsilon)), -1, 1) * gamma


def token_reference(x: np.ndarray, bits: int = 8, epsilon: float = 1e-5) -> np.ndarray:
    q = 2 ** (bits - 1) - 1
    m = np.maximum(np.max(np.abs(x), axis=-1, keepdims=True), epsilon)
    return np.clip(np.round(x * q / m), -q - 1, q) * m / q


def away_from_ties(scaled: np.ndarray, margin: float) -> np.ndarray:
    return np.abs(scaled - np.floor(scaled) - 0.5) > margin


@pytest.mark.parametrize("dtype", FLOATS)
def test_absmean_ternary_forward_and_straight_through_gradient(run, dtype):
    rng = np.random.default_rng(0)
    w = rng.normal(0, 0.3, size=(3, 3, 4, 5)).astype(dtype.as_numpy_dtype).astype(np.float64)
    w[0, 0, 0, :2] = 0.0
    y, grad, dy = run(AbsmeanTernary(), w, dtype)
    gamma = np.mean(np.abs(w))
    keep = away_from_ties(np.abs(w) / gamma, 0.01)  # low precision may round a near-tie either way
    np.testing.assert_allclose(y[keep], ternary_reference(w)[keep], rtol=ATOL.get(dtype, 1e-6))
    values = np.unique(np.abs(y))
    assert len(values) == 2 and values[0] == 0  # {−γ, 0, γ}
    np.testing.assert_array_equal(grad, dy)


@pytest.mark.parametrize("dtype", FLOATS)
def test_absmax_per_token_forward_and_straight_through_gradient(run, dtype):
    rng = np.random.default_rng(1)
    x = (rng.normal(size=(2, 5, 16)) * rng.uniform(0.01, 50, size=(2, 5, 1))).astype(dtype.as_numpy_dtype)
    x = x.astype(np.float64)
    x[0, 1] = 0.0  # an all-zero token stays 0 (its scale is ε, not 0)
    y, grad, dy = run(AbsmaxPerToken(), x, dtype)
    m = np.maximum(np.abs(x).max(axis=-1, keepdims=True), 1e-5)
    keep = np.broadcast_to(away_from_ties(x * 127 / m, 0.05), x.shape)
    np.testing.assert_allclose(y[keep], token_reference(x)[keep], rtol=ATOL.get(dtype, 1e-6), atol=1e-30)
    np.testing.assert_array_equal(y[0, 1], 0.0)
    assert np.all(np.abs(y) <= np.abs(x).max(axis=-1, keepdims=True) * (1 + ATOL.get(dtype, 1e-6)))
    np.testing.assert_array_equal(grad, dy)


def test_absmax_per_token_is_per_row_of_the_last_axis():
    x = np.array([[1.0, 0.3, 0.003], [100.0, 30.0, 0.3]], np.float32)
    y = AbsmaxPerToken()(x).numpy()
    np.testing.assert_allclose(y, token_reference(x.astype(np.float64)), rtol=1e-6)
    np.testing.assert_allclose(y[1] / 100, y[0], rtol=1e-6)  # each row on its own scale: the same codes
    assert y[0, 2] == 0  # 0.003·127 rounds to 0
    np.testing.assert_allclose(y[:, 0], [1.0, 100.0], rtol=1e-6)  # a row's max is exact (per tensor: 1 → 100/127)
    scalar = AbsmaxPerToken(bits=4)(tf.constant(-3.0))
    assert float(scalar) == -3.0


@pytest.mark.parametrize("dtype", FLOATS)
def test_absmax_per_token_over_several_axes_takes_one_scale_per_token(run, dtype):
    """axis=(-2, -1): one token of heads × head_dim channels (an attention output) on one scale, numpy's max over
    both axes; a per-head scale (the last axis alone) differs where the heads' magnitudes do."""
    x = np.random.default_rng(4).normal(size=(2, 3, 2, 8)) * np.array([0.01, 1.0])[:, None]
    x = x.astype(dtype.as_numpy_dtype).astype(np.float64)
    q = 127
    m = np.abs(x).max(axis=(-2, -1), keepdims=True)
    expected = np.clip(np.round(x * q / m), -q - 1, q) * m / q
    quantizer = AbsmaxPerToken(axis=(-2, -1))
    y, grad, dy = run(quantizer, x, dtype)
    keep = away_from_ties(x * q / m, 0.05)
    np.testing.assert_allclose(y[keep], expected[keep], rtol=ATOL.get(dtype, 1e-6), atol=1e-30)
    np.testing.assert_array_equal(grad, dy)
    per_head, _, _ = run(AbsmaxPerToken(), x, dtype)
    small = np.abs(per_head - expected)[..., 0, :]  # the small head: its own scale, or a quarter step of the token's
    assert small.max() > 0.25 * m.min() / q
    assert AbsmaxPerToken.from_config(quantizer.get_config()).axis == (-2, -1)
    assert AbsmaxPerToken.from_config(AbsmaxPerToken().get_config()).axis == (-1,)
    for bad in ((), (-1, -1), 1.5, True):
        with pytest.raises(ste.errors.ParameterError, match=r"AbsmaxPerToken: axis.*Fix"):
            AbsmaxPerToken(axis=bad)


def test_bits_and_epsilon():
    x = np.random.default_rng(2).normal(size=(4, 9))
    np.testing.assert_allclose(AbsmaxPerToken(bits=4)(x.astype(np.float32)), token_reference(x, bits=4), rtol=1e-6)
    w = np.full((4,), 1e-7)
    np.testing.assert_allclose(AbsmeanTernary(epsilon=1e-6)(w), ternary_reference(w, 1e-6), rtol=1e-6)
    with pytest.raises(ste.errors.ParameterError, match="epsilon must be >= 0"):
        AbsmeanTernary(epsilon=-1e-5)
    with pytest.raises(ste.errors.ParameterError, match="bits"):
        AbsmaxPerToken(bits=1)
    # float16 cannot keep 65535 levels of one token apart: refused, naming the bits that fit
    with pytest.raises(ste.errors.ParameterError, match=r"AbsmaxPerToken.*float16.*bits <= "):
        AbsmaxPerToken(bits=16)(tf.ones([2, 3], tf.float16))


@pytest.mark.parametrize("quantizer", [AbsmeanTernary(), AbsmaxPerToken()], ids=["ternary", "token"])
def test_second_order_gradient_is_zero(quantizer):
    x = tf.constant(np.random.default_rng(3).normal(size=(3, 4)), tf.float32)
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            y = tf.reduce_sum(quantizer(x) * x)  # d/dx = q(x) + x (straight-through): d²/dx² = 2 per element
        g = inner.gradient(y, x)
    np.testing.assert_allclose(g, quantizer(x) + x, rtol=1e-6)
    np.testing.assert_allclose(outer.gradient(g, x), 2 * np.ones((3, 4)), rtol=1e-6)


@pytest.mark.parametrize(
    "quantizer", [AbsmeanTernary(), AbsmaxPerToken(), AbsmaxPerToken(axis=(0, 1))], ids=["ternary", "token", "axes"]
)
@pytest.mark.parametrize("jit", [False, True], ids=["function", "xla"])
def test_tf_function_and_xla_match_eager(quantizer, jit):
    x = tf.constant(np.random.default_rng(4).normal(size=(5, 6)), tf.float32)

    @tf.function(jit_compile=jit)
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = quantizer(x)
        return y, tape.gradient(y, x, output_gradients=2 * x)

    y, grad = step(x)
    np.testing.assert_allclose(y, quantizer(x), rtol=1e-6)
    np.testing.assert_allclose(grad, 2 * x, rtol=1e-6)


def test_spec_names_and_saving_round_trip():
    for spec, cls in (("absmean_ternary(epsilon=1e-4)", AbsmeanTernary), ("absmax_per_token(bits=6)", AbsmaxPerToken)):
        quantizer = ste.quantizers.get(spec)
        assert isinstance(quantizer, cls)
        again = ste.quantizers.get(ste.quantizers.serialize(quantizer))
        assert type(again) is cls and again.get_config() == quantizer.get_config()
