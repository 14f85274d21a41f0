"""Round-4 outsider review of QAT's gradients, written from docs/qat.md and the ``ste.qat`` docstrings only.

References are independent of ste's code: a numpy transcription of TensorFlow's fake-quant nudging (the
``Nudge`` function of ``fake_quant_ops_functor.h``), autodiff of the unfolded batch-norm formula in float64, and
the straight-through gradient penalty written out by hand in float64.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
from ste import qat

DTYPES = ["float16", "bfloat16", "float32", "float64"]
MODES = ["eager", "function", "xla"]


def _run(fn: Callable[..., Any], mode: str) -> Callable[..., Any]:
    if mode == "eager":
        return fn
    return tf.function(fn, jit_compile=(mode == "xla"))


def nudge(low: float, high: float, bits: int, narrow: bool, dt: Any) -> tuple[Any, Any, Any]:
    """TensorFlow's ``Nudge`` written again in numpy, in ``dt`` (np.float32 as the kernels, or np.float64)."""
    low, high = dt(low), dt(high)
    q_min, q_max = dt(1 if narrow else 0), dt(2**bits - 1)
    scale = dt((high - low) / (q_max - q_min))
    zero_from_min = dt(q_min - low / scale)
    if zero_from_min < q_min:
        zero = q_min
    elif zero_from_min > q_max:
        zero = q_max
    else:  # std::round: half away from zero
        zero = dt(np.floor(zero_from_min + dt(0.5)))
    return dt((q_min - zero) * scale), dt((q_max - zero) * scale), scale


def nudge_dtype(dtype: str) -> Any:
    """The docs: nudged in float32 for float16, bfloat16 and float32, in float64 for float64."""
    return np.float64 if dtype == "float64" else np.float32


def as_np(t: Any) -> np.ndarray:
    return np.asarray(tf.cast(t, tf.float64))


# ---------------------------------------------------------------------------------------------------------------
# A2: weight fake quantization: every weight lies in ±max|w|, so its gradient is dy, the largest one included.
# ---------------------------------------------------------------------------------------------------------------


def _many_ranges(dtype: str, shape: tuple[int, ...], seed: int) -> tf.Tensor:
    """Weights whose per-channel maxima span many binades (so that many nudged bounds are tried)."""
    rng = np.random.default_rng(seed)
    w = rng.uniform(-1.0, 1.0, shape) * np.exp(rng.uniform(-6, 3, shape[-1]))
    return tf.constant(w, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("channel_axes", "shape"), [(0, (3, 5)), (1, (7, 3000)), (2, (1, 1, 60, 50))])
def test_weight_fake_quant_gradient_reaches_every_weight(dtype: str, mode: str, channel_axes: int, shape: Any) -> None:
    quantizer = qat.WeightFakeQuant(channel_axes=channel_axes, dtype=dtype)
    ws = [_many_ranges(dtype, shape, seed) for seed in range(8 if channel_axes == 0 else 1)]

    def grad(w: tf.Tensor, dy: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            tape.watch(w)
            y = quantizer(w)
        return tape.gradient(y, w, output_gradients=dy)

    run = _run(grad, mode)
    for w in ws:
        dy = tf.cast(tf.random.stateless_uniform(w.shape, (1, 2), 0.5, 1.5), dtype)
        g = run(w, dy)
        np.testing.assert_array_equal(as_np(g), as_np(dy))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("per_axis", [False, True])
def test_symmetric_last_value_quantizer_gradient_reaches_every_element(dtype: str, per_axis: bool) -> None:
    quantizer = qat.LastValueQuantizer(num_bits=8, per_axis=per_axis, symmetric=True, narrow_range=True, dtype=dtype)
    w = _many_ranges(dtype, (5, 2000), 3)
    with tf.GradientTape() as tape:
        tape.watch(w)
        y = quantizer(w, training=True)
    np.testing.assert_array_equal(as_np(tape.gradient(y, w)), np.ones(w.shape))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("narrow", [False, True])
def test_symmetric_wide_last_value_holds_every_element(dtype: str, narrow: bool) -> None:
    """symmetric=True on the wide range widens it to [−m, 127m/128]: the docs say the zero point is 2^(b−1) and the
    range holds every element, so the gradient is dy everywhere."""
    quantizer = qat.LastValueQuantizer(num_bits=8, per_axis=False, symmetric=True, narrow_range=narrow, dtype=dtype)
    for seed in range(6):
        w = _many_ranges(dtype, (40, 1), seed)
        with tf.GradientTape() as tape:
            tape.watch(w)
            y = quantizer(w, training=True)
        np.testing.assert_array_equal(as_np(tape.gradient(y, w)), np.ones(w.shape), err_msg=f"seed {seed}")


# ---------------------------------------------------------------------------------------------------------------
# A2: activation fake quantization: dy·1[min' ≤ x ≤ max'] with TensorFlow's nudged range, the bounds included.
# ---------------------------------------------------------------------------------------------------------------

RANGES = [(-6.0, 6.0), (-2.3, 3.7), (-0.1, 25.0), (0.0, 1.0), (-1.0, 1.0), (-3e-3, 7e-3), (-1000.0, 10.0)]


def _probe_points(lo: float, hi: float, dtype: str, bits: int, narrow: bool) -> tuple[np.ndarray, Any, Any]:
    # the range is a float32 tensor (as the quantizers' variables are), nudged in the input's nudging dtype
    n_min, n_max, scale = nudge(np.float32(lo), np.float32(hi), bits, narrow, nudge_dtype(dtype))
    b_min = np.asarray(tf.cast(tf.constant(n_min, tf.float64), dtype).numpy().astype(np.float64))
    b_max = np.asarray(tf.cast(tf.constant(n_max, tf.float64), dtype).numpy().astype(np.float64))
    inner = np.linspace(float(n_min), float(n_max), 41)
    x = np.concatenate([inner, [b_min, b_max], [b_min - abs(b_min) - 1.0, b_max + abs(b_max) + 1.0]])
    return as_np(tf.cast(x, dtype)), b_min, b_max


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("bits", "narrow"), [(8, False), (8, True), (4, False)])
def test_activation_fake_quant_gradient_mask(dtype: str, mode: str, bits: int, narrow: bool) -> None:
    for lo, hi in RANGES:
        x_np, b_min, b_max = _probe_points(lo, hi, dtype, bits, narrow)
        x = tf.constant(x_np, dtype)

        def grad(x: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = qat.fake_quant_op(x, tf.constant(lo), tf.constant(hi), bits=bits, narrow_range=narrow)
            return tape.gradient(y, x)

        g = as_np(_run(grad, mode)(x))
        expected = ((x_np >= b_min) & (x_np <= b_max)).astype(np.float64)
        np.testing.assert_array_equal(g, expected, err_msg=f"range [{lo}, {hi}] in {dtype}")
        # the bounds themselves are in range: their gradient is dy
        assert g[41] == 1.0 and g[42] == 1.0, (lo, hi, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_activation_fake_quant_forward_equals_numpy_nudging(dtype: str) -> None:
    dt = nudge_dtype(dtype)
    rng = np.random.default_rng(5)
    for lo, hi in RANGES:
        x = rng.uniform(lo * 1.2 - 0.1, hi * 1.2 + 0.1, 500).astype(dt)
        n_min, n_max, scale = nudge(np.float32(lo), np.float32(hi), 8, False, dt)
        expected = np.floor((np.clip(x, n_min, n_max) - n_min) / scale + dt(0.5)) * scale + n_min
        got = qat.fake_quant_op(tf.constant(x), tf.constant(lo), tf.constant(hi))
        np.testing.assert_allclose(as_np(got), expected.astype(np.float64), rtol=0, atol=float(scale) * 1e-3)


@pytest.mark.parametrize("dtype", DTYPES)
def test_per_channel_activation_gradient_mask(dtype: str) -> None:
    lows, highs = [-6.0, -2.3, 0.0, -1.0], [6.0, 3.7, 1.0, 1.0]
    cols, masks = [], []
    for lo, hi in zip(lows, highs):
        x_np, b_min, b_max = _probe_points(lo, hi, dtype, 8, False)
        cols.append(x_np)
        masks.append((x_np >= b_min) & (x_np <= b_max))
    x = tf.constant(np.stack(cols, axis=-1), dtype)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = qat.fake_quant_op(x, tf.constant(lows), tf.constant(highs))
    np.testing.assert_array_equal(as_np(tape.gradient(y, x)), np.stack(masks, -1).astype(np.float64))


@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_range_passes_the_gradient(dtype: str) -> None:
    """The docstring: a range of exactly [0, 0] gives 0 and passes the whole gradient to x."""
    x = tf.constant([-1.0, 0.0, 2.5], dtype)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = qat.fake_quant_op(x, tf.constant(0.0), tf.constant(0.0))
    np.testing.assert_array_equal(as_np(y), np.zeros(3))
    np.testing.assert_array_equal(as_np(tape.gradient(y, x)), np.ones(3))


@pytest.mark.parametrize("dtype", DTYPES)
def test_activation_quantizer_training_step_mask(dtype: str) -> None:
    """ActivationFakeQuant in training: the range moves first (EMA of min(x, 0), max(x, 0)), then x is quantized on
    it; every element inside the nudged new range gets dy."""
    layer = qat.ActivationFakeQuant(dtype=dtype)
    rng = np.random.default_rng(0)
    x_np = as_np(tf.cast(rng.uniform(-20.0, 30.0, (16, 50)), dtype))
    x = tf.constant(x_np, dtype)
    lo = np.float32(0.999) * np.float32(-6.0) + np.float32(0.001) * np.float32(min(x_np.min(), 0.0))
    hi = np.float32(0.999) * np.float32(6.0) + np.float32(0.001) * np.float32(max(x_np.max(), 0.0))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
    np.testing.assert_allclose(float(layer.weights[0].numpy()), lo, rtol=1e-6)
    np.testing.assert_allclose(float(layer.weights[1].numpy()), hi, rtol=1e-6)
    n_min, n_max, _ = nudge(float(layer.weights[0].numpy()), float(layer.weights[1].numpy()), 8, False,
                            nudge_dtype(dtype))
    b_min = float(tf.cast(tf.constant(float(n_min), tf.float64), dtype))
    b_max = float(tf.cast(tf.constant(float(n_max), tf.float64), dtype))
    expected = ((x_np >= b_min) & (x_np <= b_max)).astype(np.float64)
    np.testing.assert_array_equal(as_np(tape.gradient(y, x)), expected)


@pytest.mark.parametrize("dtype", DTYPES)
def test_asymmetric_last_value_mask_matches_nudged_range(dtype: str) -> None:
    """LastValueQuantizer(symmetric=False): the range is [min(min, 0), max(max, 0)] of the tensor; the gradient is
    TensorFlow's clipped estimator on its nudged range (the same as TFMOT)."""
    quantizer = qat.LastValueQuantizer(num_bits=8, per_axis=False, symmetric=False, narrow_range=False, dtype=dtype)
    for seed in range(5):
        rng = np.random.default_rng(seed)
        x_np = as_np(tf.cast(rng.uniform(-0.3, 1.0, 200) * 10.0 ** rng.uniform(-3, 3), dtype))
        x = tf.constant(x_np, dtype)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = quantizer(x, training=True)
        dt = nudge_dtype(dtype)
        n_min, n_max, _ = nudge(dt(min(x_np.min(), 0.0)), dt(max(x_np.max(), 0.0)), 8, False, dt)
        b_min = float(tf.cast(tf.constant(float(n_min), tf.float64), dtype))
        b_max = float(tf.cast(tf.constant(float(n_max), tf.float64), dtype))
        expected = ((x_np >= b_min) & (x_np <= b_max)).astype(np.float64)
        np.testing.assert_array_equal(as_np(tape.gradient(y, x)), expected, err_msg=f"seed {seed}")
