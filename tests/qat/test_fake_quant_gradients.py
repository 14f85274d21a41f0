"""QAT's fake-quant and folded batch-norm gradients, checked from docs/qat.md and the ``ste.qat`` docstrings only.

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

from .helpers import CONVERTS_PER_CHANNEL

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
    n_min, n_max, _ = nudge(np.float32(lo), np.float32(hi), bits, narrow, nudge_dtype(dtype))
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

        def grad(x: tf.Tensor, lo: float = lo, hi: float = hi) -> tf.Tensor:
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
    n_min, n_max, _ = nudge(
        float(layer.weights[0].numpy()), float(layer.weights[1].numpy()), 8, False, nudge_dtype(dtype)
    )
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


# ---------------------------------------------------------------------------------------------------------------
# A1: folded batch norm with γ = 0 learns: dγ equals the unfolded batch norm's Σ dy·x̂.
# ---------------------------------------------------------------------------------------------------------------

EPS = 1e-3
MOMENTUM = 0.9
TOL = {"float16": 3e-2, "bfloat16": 1.5e-1, "float32": 2e-4, "float64": 1e-9}


def _bn_reference(
    kind: str, x: np.ndarray, w: np.ndarray, b: np.ndarray, gamma: np.ndarray, beta: np.ndarray, r: np.ndarray
) -> dict[str, np.ndarray]:
    """Autodiff of conv (+ bias) then batch norm with batch statistics, in float64 (Σ r·y as the loss)."""
    xt, wt, bt, gt, btt = (tf.Variable(a, dtype=tf.float64) for a in (x, w, b, gamma, beta))
    with tf.GradientTape() as tape:
        if kind == "conv":
            z = tf.nn.conv2d(xt, wt, 1, "VALID") + bt
        else:
            z = tf.nn.depthwise_conv2d(xt, wt, [1, 1, 1, 1], "VALID") + bt
        mean = tf.reduce_mean(z, axis=[0, 1, 2])
        var = tf.reduce_mean(tf.square(z - mean), axis=[0, 1, 2])
        xhat = (z - mean) / tf.sqrt(var + EPS)
        y = gt * xhat + btt
        loss = tf.reduce_sum(y * r)
    grads = tape.gradient(loss, [xt, wt, bt, gt, btt])
    return {
        "y": y.numpy(),
        "x": grads[0].numpy(),
        "kernel": grads[1].numpy(),
        "bias": grads[2].numpy(),
        "gamma": grads[3].numpy(),
        "beta": grads[4].numpy(),
        "mean": mean.numpy(),
        "var": var.numpy(),
        "sum_dy_xhat": tf.reduce_sum(r * xhat, axis=[0, 1, 2]).numpy(),
    }


def _folded(kind: str, dtype: str, quantized: bool) -> tuple[keras.layers.Layer, tuple[int, ...]]:
    bn = {"momentum": MOMENTUM, "epsilon": EPS, "center": True, "scale": True}
    if kind == "conv":
        kq = qat.WeightFakeQuant(channel_axes=1) if quantized else None
        layer = qat.FoldedConv2D(4, 3, kernel_quantizer=kq, batch_norm=bn, dtype=dtype)
        return layer, (3, 3, 2, 4)
    kq = qat.WeightFakeQuant(channel_axes=2) if quantized else None
    layer = qat.FoldedDepthwiseConv2D(3, kernel_quantizer=kq, batch_norm=bn, dtype=dtype)
    return layer, (3, 3, 4, 1)


def _bn_case(kind: str, dtype: str, mode: str, quantized: bool) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    rng = np.random.default_rng(11)
    layer, kshape = _folded(kind, dtype, quantized)
    channels = 4
    cin = 2 if kind == "conv" else 4
    x = rng.normal(size=(6, 7, 7, cin))
    w = rng.normal(size=kshape) * 0.5
    b = rng.normal(size=channels) * 0.1
    gamma = np.array([0.0, 0.7, -1.3, 0.0])
    beta = np.array([0.25, -0.5, 0.1, 0.0])
    r = rng.normal(size=(6, 5, 5, channels))
    mm0, mv0 = np.full(channels, 0.2), np.full(channels, 1.5)
    layer.build((None, 7, 7, cin))
    by_name = {v.path.split("/")[-1]: v for v in layer.weights}
    for name, value in [
        ("kernel", w),
        ("bias", b),
        ("gamma", gamma),
        ("beta", beta),
        ("moving_mean", mm0),
        ("moving_variance", mv0),
    ]:
        by_name[name].assign(value.astype(by_name[name].dtype))
    ref = _bn_reference(kind, x, w, b, gamma, beta, r)
    xt = tf.constant(x, dtype)
    rt = tf.constant(r, dtype)
    trainables = [by_name[n] for n in ("kernel", "bias", "gamma", "beta")]

    def step(xt: tf.Tensor) -> Any:
        with tf.GradientTape() as tape:
            tape.watch(xt)
            y = layer(xt, training=True)
            loss = tf.reduce_sum(tf.cast(y, tf.float64) * tf.cast(rt, tf.float64))
        return (y, *tape.gradient(loss, [xt, *trainables]))

    y, gx, gk, gb, gg, gbeta = _run(step, mode)(xt)
    got = {
        "y": as_np(y),
        "x": as_np(gx),
        "kernel": as_np(gk),
        "bias": as_np(gb),
        "gamma": as_np(gg),
        "beta": as_np(gbeta),
        "moving_mean": as_np(by_name["moving_mean"]),
        "moving_variance": as_np(by_name["moving_variance"]),
    }
    ref["moving_mean"] = MOMENTUM * mm0 + (1 - MOMENTUM) * ref["mean"]
    ref["moving_variance"] = MOMENTUM * mv0 + (1 - MOMENTUM) * ref["var"]
    return ref, got


def _close(got: np.ndarray, want: np.ndarray, tol: float, what: str) -> None:
    scale = max(1.0, float(np.max(np.abs(want))))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale, err_msg=what)


@pytest.mark.parametrize("kind", ["conv", "depthwise"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
def test_folded_zero_gamma_unquantized_equals_unfolded_formula(kind: str, dtype: str, mode: str) -> None:
    """Without a kernel quantizer the folded layer is conv + batch norm: outputs, every first-order gradient and
    the moving statistics, for γ = 0, γ < 0 and γ > 0."""
    ref, got = _bn_case(kind, dtype, mode, quantized=False)
    tol = TOL[dtype]
    for key in ("y", "x", "kernel", "bias", "gamma", "beta", "moving_mean", "moving_variance"):
        _close(got[key], ref[key], tol, f"{key} ({kind}, {dtype}, {mode})")
    assert abs(got["gamma"][0]) > 0.1 and abs(got["gamma"][3]) > 0.1  # it learns


@pytest.mark.parametrize("kind", ["conv", "depthwise"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
def test_folded_zero_gamma_quantized_gets_sum_dy_xhat(kind: str, dtype: str, mode: str) -> None:
    """With the int8 kernel quantizer a γ = 0 channel convolves with its float kernel: it outputs β, its γ gets
    Σ dy·x̂ and its moving statistics follow z's (docs/qat.md, Batch-norm folding)."""
    ref, got = _bn_case(kind, dtype, mode, quantized=True)
    tol = TOL[dtype]
    for c in (0, 3):
        _close(got["y"][..., c], np.broadcast_to(ref["y"][..., c], got["y"][..., c].shape), tol, f"y[{c}]")
        _close(got["gamma"][c], ref["sum_dy_xhat"][c], tol, f"dgamma[{c}] ({kind}, {dtype}, {mode})")
        _close(got["moving_mean"][c], ref["moving_mean"][c], tol, f"moving_mean[{c}]")
        _close(got["moving_variance"][c], ref["moving_variance"][c], tol, f"moving_variance[{c}]")
    _close(got["gamma"][0], ref["gamma"][0], tol, "the reference's own dγ equals Σ dy·x̂")


@pytest.mark.parametrize("kind", ["conv", "depthwise"])
def test_folded_second_order_equals_unfolded_formula(kind: str) -> None:
    """docs/qat.md: without a kernel quantizer the gradients are the batch norm's, first and second order
    (a gradient penalty ||∂L/∂x||² differentiated with respect to γ, β and the kernel), γ = 0 included."""
    rng = np.random.default_rng(2)
    layer, kshape = _folded(kind, "float64", quantized=False)
    cin = 2 if kind == "conv" else 4
    x = rng.normal(size=(4, 6, 6, cin))
    w, b = rng.normal(size=kshape) * 0.5, rng.normal(size=4) * 0.1
    gamma, beta = np.array([0.0, 0.7, -1.3, 0.4]), np.array([0.25, -0.5, 0.1, 0.0])
    r = rng.normal(size=(4, 4, 4, 4))
    layer.build((None, 6, 6, cin))
    by_name = {v.path.split("/")[-1]: v for v in layer.weights}
    for name, value in [("kernel", w), ("bias", b), ("gamma", gamma), ("beta", beta)]:
        by_name[name].assign(value)
    xt = tf.constant(x)

    def penalty(fn: Callable[[tf.Tensor], tf.Tensor], params: list[Any]) -> list[Any]:
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                inner.watch(xt)
                loss = tf.reduce_sum(fn(xt) * r)
            gx = inner.gradient(loss, xt)
            pen = tf.reduce_sum(gx * gx)
        return outer.gradient(pen, params)

    got = penalty(lambda t: layer(t, training=True), [by_name[n] for n in ("kernel", "gamma", "beta")])
    wv, gv, bv = tf.Variable(w), tf.Variable(gamma), tf.Variable(beta)

    def unfolded(t: tf.Tensor) -> tf.Tensor:
        if kind == "conv":
            z = tf.nn.conv2d(t, wv, 1, "VALID") + b
        else:
            z = tf.nn.depthwise_conv2d(t, wv, [1, 1, 1, 1], "VALID") + b
        mean = tf.reduce_mean(z, axis=[0, 1, 2])
        var = tf.reduce_mean(tf.square(z - mean), axis=[0, 1, 2])
        return gv * (z - mean) / tf.sqrt(var + EPS) + bv

    want = penalty(unfolded, [wv, gv, bv])
    for name, g, h, shape in zip(("kernel", "gamma", "beta"), got, want, (w.shape, (4,), (4,))):
        # the penalty does not depend on β: None (no path) and zeros are the same answer
        g = np.zeros(shape) if g is None else as_np(g)
        h = np.zeros(shape) if h is None else h.numpy()
        _close(g, h, 1e-8, name)
    if kind == "conv":  # channels mix in ∂L/∂x: the γ = 0 channel has a non-zero second-order gradient to check
        assert np.abs(want[1].numpy()[0]) > 1e-3


@pytest.mark.parametrize("dtype", ["float32", "float64", "mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("kind", ["conv", "depthwise", "separable", "dense"])
def test_quantize_model_zero_gamma_batch_norm_learns(kind: str, dtype: str) -> None:
    """A zero-initialized batch norm after every layer that can carry one, through quantize_model and fit: γ moves
    off 0 (a γ with gradient 0 stays 0 for good)."""
    policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy(dtype)
    try:
        i = keras.Input((6, 6, 3))
        layer = {
            "conv": keras.layers.Conv2D(4, 3),
            "depthwise": keras.layers.DepthwiseConv2D(3, depth_multiplier=2),
            "separable": keras.layers.SeparableConv2D(4, 3),
            "dense": keras.layers.Dense(4),
        }[kind]
        h = layer(i)
        h = keras.layers.BatchNormalization(gamma_initializer="zeros", beta_initializer="ones", name="bn")(h)
        h = keras.layers.ReLU()(h)
        h = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(4, 1, padding="same")(h))
        model = keras.Model(i, keras.layers.Dense(2, dtype="float32")(h))
        qmodel = ste.quantize_model(model)
        qmodel.compile(keras.optimizers.SGD(0.1), "mse")
        rng = np.random.default_rng(0)
        x, y = rng.normal(size=(32, 6, 6, 3)).astype("float32"), rng.normal(size=(32, 2)).astype("float32")
        gammas = [v for v in qmodel.weights if v.path.endswith("gamma")]
        assert len(gammas) == 1, [v.path for v in qmodel.weights]
        assert np.all(as_np(gammas[0]) == 0)
        qmodel.fit(x, y, batch_size=16, epochs=2, verbose=0)
        assert np.all(np.abs(as_np(gammas[0])) > 0), (kind, dtype, as_np(gammas[0]))
    finally:
        keras.config.set_dtype_policy(policy)


# ---------------------------------------------------------------------------------------------------------------
# A3: second-order gradients through a QAT model: exact in every dtype, or HigherOrderError in every dtype.
# ---------------------------------------------------------------------------------------------------------------


def _np_weight_quant(w: np.ndarray) -> np.ndarray:
    """Symmetric narrow-range int8 on ±max|w| per output channel (a Dense kernel's columns, as LiteRT's
    per-channel FULLY_CONNECTED) where TFLite converts it (CONVERTS_PER_CHANNEL), else per tensor; TensorFlow's
    formula in float64."""
    out = np.empty_like(w)
    for j in range(w.shape[-1]):
        m = np.max(np.abs(w[..., j]) if CONVERTS_PER_CHANNEL else np.abs(w))
        n_min, n_max, scale = nudge(-m, m, 8, True, np.float64)
        out[..., j] = np.floor((np.clip(w[..., j], n_min, n_max) - n_min) / scale + 0.5) * scale + n_min
    return out


def _np_act_quant(x: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    n_min, n_max, scale = nudge(np.float32(lo), np.float32(hi), 8, False, np.float32)
    n_min, n_max, scale = float(n_min), float(n_max), float(scale)
    q = np.floor((np.clip(x, n_min, n_max) - n_min) / scale + 0.5) * scale + n_min
    return q, ((x >= n_min) & (x <= n_max)).astype(np.float64)


def _penalty_model(dtype: str) -> keras.Model:
    policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy(dtype)
    try:
        rng = np.random.default_rng(4)
        model = keras.Sequential(
            [keras.Input((5,)), keras.layers.Dense(7, name="d1"), keras.layers.Dense(3, name="d2")]
        )
        model.set_weights(
            [rng.normal(size=(5, 7)), rng.normal(size=7) * 0.1, rng.normal(size=(7, 3)), rng.normal(size=3) * 0.1]
        )
        return ste.quantize_model(model)
    finally:
        keras.config.set_dtype_policy(policy)


def _penalty_reference(qmodel: keras.Model, x: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """P = ||∂(Σ r·f)/∂x||² with the straight-through rules written out: masks held constant, quantized kernels
    differentiated as the identity. Returns dP/dW1, dP/dW2 in float64."""
    kernels = [as_np(v) for v in qmodel.weights if v.path.endswith("kernel")]
    biases = [as_np(v) for v in qmodel.weights if v.path.endswith("bias")]
    ranges = [
        (as_np(lo), as_np(hi))
        for lo, hi in zip(
            [v for v in qmodel.weights if v.path.endswith("/min")],
            [v for v in qmodel.weights if v.path.endswith("/max")],
        )
    ]
    assert len(kernels) == 2 and len(ranges) == 3, [v.path for v in qmodel.weights]
    xq, m1 = _np_act_quant(x, *ranges[0])
    a, b = _np_weight_quant(kernels[0]), _np_weight_quant(kernels[1])
    h, m2 = _np_act_quant(xq @ a + biases[0], *ranges[1])
    _, m3 = _np_act_quant(h @ b + biases[1], *ranges[2])
    at, bt = tf.Variable(a), tf.Variable(b)
    with tf.GradientTape() as tape:
        gx = m1 * tf.matmul(m2 * tf.matmul(m3 * r, bt, transpose_b=True), at, transpose_b=True)
        p = tf.reduce_sum(gx * gx)
    da, db = tape.gradient(p, [at, bt])
    return da.numpy(), db.numpy()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("mode", MODES)
def test_gradient_penalty_through_int8_model_is_exact(dtype: str, mode: str) -> None:
    qmodel = _penalty_model(dtype)
    rng = np.random.default_rng(9)
    x = rng.normal(size=(16, 5)) * 3.0  # some inputs beyond the initial range ±6: a mask with zeros
    r = rng.normal(size=(16, 3))
    compute = qmodel.layers[1].compute_dtype
    xt = tf.constant(np.asarray(tf.cast(tf.cast(x, compute), tf.float64)))
    kernels = [v for v in qmodel.trainable_weights if v.path.endswith("kernel")]

    def penalty(xt: tf.Tensor) -> Any:
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                inner.watch(xt)
                loss = tf.reduce_sum(tf.cast(qmodel(xt, training=False), tf.float64) * r)
            gx = inner.gradient(loss, xt)
            p = tf.reduce_sum(gx * gx)
        return outer.gradient(p, kernels)

    got = _run(penalty, mode)(xt)
    want = _penalty_reference(qmodel, np.asarray(xt), r)
    tol = {"float16": 2e-2, "bfloat16": 1e-1, "mixed_float16": 2e-2, "mixed_bfloat16": 1e-1}.get(dtype, 1e-5)
    for g, w, name in zip(got, want, ("d1", "d2")):
        assert g is not None, f"{name}: second-order gradient is None in {dtype} ({mode})"
        _close(as_np(g), w, tol, f"{name} {dtype} {mode}")


@pytest.mark.parametrize("scheme", ["binary", "ternary"])
def test_low_bit_second_order_same_kind_in_every_dtype(scheme: str) -> None:
    """The same gradient penalty through a low-bit model gives the same kind of answer in every dtype: numbers
    everywhere, or ste.errors.HigherOrderError naming the layer everywhere."""
    kinds = {}
    for dtype in ["float16", "bfloat16", "float32", "float64"]:
        policy = keras.config.dtype_policy()
        keras.config.set_dtype_policy(dtype)
        try:
            model = keras.Sequential(
                [
                    keras.Input((6,)),
                    keras.layers.Dense(5, name="first"),
                    keras.layers.Dense(5, name="middle"),
                    keras.layers.Dense(2, name="last"),
                ]
            )
            qmodel = ste.quantize_model(model, scheme=scheme)
        finally:
            keras.config.set_dtype_policy(policy)
        xt = tf.constant(np.random.default_rng(0).normal(size=(4, 6)), qmodel.compute_dtype)
        try:
            with tf.GradientTape() as outer:
                with tf.GradientTape() as inner:
                    inner.watch(xt)
                    loss = tf.reduce_sum(tf.cast(qmodel(xt, training=True), tf.float32) ** 2)
                gx = inner.gradient(loss, xt)
                p = tf.reduce_sum(tf.cast(gx, tf.float32) ** 2)
            grads = outer.gradient(p, qmodel.trainable_weights)
            kinds[dtype] = "none" if any(g is None for g in grads) and all(g is None for g in grads) else "numbers"
            if kinds[dtype] == "numbers":
                assert all(np.all(np.isfinite(as_np(g))) for g in grads if g is not None)
        except ste.errors.HigherOrderError as error:
            kinds[dtype] = "HigherOrderError"
            assert "middle" in str(error), str(error)
    assert len(set(kinds.values())) == 1, kinds
    assert set(kinds.values()) != {"none"}, kinds


def _exact_fake_quant(x: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, float]:
    n_min, n_max, scale = (float(v) for v in nudge(np.float32(lo), np.float32(hi), 8, False, np.float32))
    return np.floor((np.clip(x, n_min, n_max) - n_min) / scale + 0.5) * scale + n_min, scale


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("mode", MODES)
def test_bfloat16_fake_quant_within_one_step(dtype: str, mode: str) -> None:
    """A half-precision activation is fake-quantized to within about one step of TensorFlow's formula on the same
    (half-precision) input, the same in eager, tf.function and XLA."""
    rng = np.random.default_rng(0)
    for lo, hi in [(-6.0, 6.0), (-2.3, 3.7), (0.0, 1.0), (-0.1, 25.0)]:
        x = tf.cast(rng.uniform(lo * 1.1, hi * 1.1, (100, 70)), dtype)
        want, scale = _exact_fake_quant(as_np(x), lo, hi)
        got = as_np(_run(lambda t, lo=lo, hi=hi: qat.fake_quant_op(t, tf.constant(lo), tf.constant(hi)), mode)(x))
        # one step (a tie the half-precision division rounds across) plus the output's own rounding
        assert np.max(np.abs(got - want)) <= 1.5 * scale, (lo, hi, np.max(np.abs(got - want)) / scale)
