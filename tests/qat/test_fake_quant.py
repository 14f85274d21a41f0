"""ste's fake-quantization op against an independent numpy formula and against TensorFlow's own op and gradient."""

from __future__ import annotations

import decimal

import numpy as np
import pytest
import tensorflow as tf

import ste
from ste.qat import fake_quant_op, nudged_range

from .helpers import numpy_fake_quant

FLOATS = [tf.float16, tf.bfloat16, tf.float32, tf.float64]


@pytest.mark.parametrize("narrow_range", [False, True])
@pytest.mark.parametrize("dtype", FLOATS)
def test_values_match_the_numpy_formula(dtype, narrow_range):
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 5, size=(64, 5))
    xt = tf.constant(x, dtype)
    expected, _, scale = numpy_fake_quant(np.asarray(tf.cast(xt, tf.float64)), -2.3, 3.7, narrow_range=narrow_range)
    got = fake_quant_op(xt, tf.constant(-2.3), tf.constant(3.7), narrow_range=narrow_range)
    assert got.dtype == dtype
    diff = np.abs(np.asarray(tf.cast(got, tf.float64)) - expected)
    if dtype in (tf.float32, tf.float64):
        assert diff.max() < 1e-5
    else:  # computed in the low-precision dtype: an input near a rounding tie may land on the next level
        level = 0.01 * np.abs(expected).max()  # the dtype's own rounding of a level
        assert diff.max() <= 1.01 * scale + level and np.mean(diff <= level) >= 0.9


def test_float32_is_tensorflows_op_exactly():
    x = tf.random.stateless_uniform([1000], seed=[1, 2], minval=-8, maxval=8)
    ours = fake_quant_op(x, tf.constant(-6.0), tf.constant(6.0))
    theirs = tf.quantization.fake_quant_with_min_max_vars(x, -6.0, 6.0)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("dtype", FLOATS)
def test_gradient_is_the_clipped_straight_through_estimator(dtype):
    rng = np.random.default_rng(1)
    x = rng.uniform(-4, 4, size=(200,))
    dy = rng.normal(size=(200,))
    _, inside, _ = numpy_fake_quant(x, -1.5, 2.5)
    xt, low, high = tf.constant(x, dtype), tf.constant(-1.5), tf.constant(2.5)
    with tf.GradientTape() as tape:
        tape.watch([xt, low, high])
        y = fake_quant_op(xt, low, high)
    dx, dlow, dhigh = tape.gradient(y, [xt, low, high], output_gradients=tf.constant(dy, dtype))
    atol = 2e-2 if dtype in (tf.float16, tf.bfloat16) else 1e-6
    dy_cast = np.asarray(tf.cast(tf.constant(dy, dtype), tf.float64))
    np.testing.assert_allclose(np.asarray(tf.cast(dx, tf.float64)), dy_cast * inside, atol=atol)
    below = x < -1.5
    np.testing.assert_allclose(float(dlow), dy_cast[below & ~inside].sum(), rtol=1e-2, atol=atol)
    np.testing.assert_allclose(float(dhigh), dy_cast[(x > 2.5) & ~inside].sum(), rtol=1e-2, atol=atol)


def test_float32_gradient_is_tensorflows_registered_gradient():
    x = tf.random.stateless_uniform([500], seed=[3, 4], minval=-8, maxval=8)
    low, high = tf.constant(-3.0), tf.constant(5.0)
    weights = tf.random.stateless_normal([500], seed=[5, 6])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([x, low, high])
        ours = fake_quant_op(x, low, high) * weights
        theirs = tf.quantization.fake_quant_with_min_max_vars(x, low, high) * weights
    for a, b in zip(tape.gradient(ours, [x, low, high]), tape.gradient(theirs, [x, low, high])):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)


@pytest.mark.parametrize("jit", [False, True])
def test_per_channel_under_tf_function_and_xla(jit):
    rng = np.random.default_rng(2)
    w = rng.normal(size=(3, 3, 4, 6)).astype(np.float32)
    m = np.abs(w).max(axis=(0, 1, 2))
    expected, inside, _ = numpy_fake_quant(w, -m, m, narrow_range=True)

    @tf.function(jit_compile=jit)
    def run(w):
        with tf.GradientTape() as tape:
            tape.watch(w)
            y = fake_quant_op(w, tf.constant(-m), tf.constant(m), narrow_range=True)
        return y, tape.gradient(y, w)

    y, g = run(tf.constant(w))
    np.testing.assert_allclose(y.numpy(), expected, atol=1e-6)
    np.testing.assert_array_equal(g.numpy(), inside.astype(np.float32))


def test_weight_quantizer_is_symmetric_narrow_range_per_channel():
    rng = np.random.default_rng(3)
    w = rng.normal(size=(3, 3, 5, 2)).astype(np.float32)  # a depthwise kernel: channel = in·multiplier
    got = ste.qat.WeightFakeQuant(channel_axes=2)(w).numpy().reshape(3, 3, 10)
    m = np.abs(w.reshape(3, 3, 10)).max(axis=(0, 1))
    levels = got / (m / 127)
    np.testing.assert_allclose(levels, np.round(levels), atol=1e-3)  # integers in [−127, 127] times m/127
    assert np.abs(np.round(levels)).max() == 127


def test_activation_quantizer_follows_tfmots_moving_average():
    q = ste.qat.ActivationFakeQuant()
    x = np.array([[-1.0, 0.5, 3.0]], np.float32)
    q(x, training=True)
    # TFMOT: min ← 0.999·(−6) + 0.001·min(−1, 0); max ← 0.999·6 + 0.001·max(3, 0)
    np.testing.assert_allclose([float(q.min.numpy()), float(q.max.numpy())], [-6 * 0.999 - 0.001, 6 * 0.999 + 0.003])
    q(x, training=False)
    assert float(q.max.numpy()) == pytest.approx(6 * 0.999 + 0.003)


def test_activation_quantizer_gradient_is_tfmots_straight_through_on_the_moved_range():
    """TFMOT assigns the moving average to its variables and fake-quantizes with them, so x's gradient is
    dy·1[min' <= x <= max'] on the nudged new range: the batch's min and max pass no gradient (they once did,
    (1 − decay)·Σ dy outside the range, to the extreme elements)."""
    q = ste.qat.ActivationFakeQuant(initial_min=-1.0, initial_max=1.0)
    x = tf.constant(np.random.default_rng(4).normal(scale=3.0, size=(4, 64)).astype(np.float32))
    dy = tf.constant(np.random.default_rng(5).uniform(0.5, 1.5, size=(4, 64)).astype(np.float32))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = q(x, training=True)
    got = tape.gradient(y, x, output_gradients=dy).numpy()
    lo, hi = float(q.min.numpy()), float(q.max.numpy())
    scale = (hi - lo) / 255.0
    zero = np.clip(np.round(-lo / scale), 0, 255)  # TensorFlow's nudge (-lo/scale > 0: half away from zero)
    n_min, n_max = -zero * scale, (255 - zero) * scale
    inside = (x.numpy() >= n_min) & (x.numpy() <= n_max)
    assert 0 < inside.sum() < inside.size  # some elements outside the range: the case that differed
    np.testing.assert_allclose(got, np.where(inside, dy.numpy(), 0.0), rtol=1e-6, atol=0)


@pytest.mark.parametrize(
    "kwargs",
    [{"bits": 1}, {"ema_decay": 1.5}, {"initial_min": 1.0}, {"narrow_range": "yes"}],
)
def test_invalid_parameters_raise_ste_errors(kwargs):
    with pytest.raises(ste.errors.ParameterError):
        ste.qat.ActivationFakeQuant(**kwargs)


# -- the nudged range in the input's dtype, the largest weight's gradient, gradients of gradients ---------------


def tensorflow_nudge(low, high, bits, narrow_range, dtype):
    """TensorFlow's ``Nudge`` (fake_quant_ops_functor.h) transcribed with numpy scalars of ``dtype``; the zero point's
    std::round (half away from zero) done exactly with ``decimal``."""
    q_min, q_max = dtype(1 if narrow_range else 0), dtype(2**bits - 1)
    low, high = dtype(low), dtype(high)
    scale = (high - low) / (q_max - q_min)
    zero_from_min = q_min - low / scale
    rounded = float(decimal.Decimal(float(zero_from_min)).quantize(decimal.Decimal(1), decimal.ROUND_HALF_UP))
    zero = dtype(min(max(rounded, float(q_min)), float(q_max)))
    return (q_min - zero) * scale, (q_max - zero) * scale, scale


def around(*bounds):
    """Each bound and its two neighbours in its dtype."""
    return [b + d for b in bounds for d in (np.nextafter(b, -np.inf) - b, 0 * b, np.nextafter(b, np.inf) - b)]


# [−2, 2] and [−6, 6] (TFMOT's initial activation range) put the zero point at a tie, 127.5
RANGES = [
    (-2.0, 2.0, 8, False),
    (-6.0, 6.0, 8, False),
    (-1.7, 2.9, 8, False),
    (-0.3, 5.1, 4, True),
    (-3.1, 3.1, 8, True),
]


@pytest.mark.parametrize("run", ["eager", "graph"])
@pytest.mark.parametrize("low, high, bits, narrow_range", RANGES)
def test_float64_nudges_in_float64_and_clamps_where_its_mask_ends(low, high, bits, narrow_range, run):
    """float64 values and gradients against TensorFlow's nudging transcribed in float64: an input at a nudged bound
    is inside (gradient 1), one unit in the last place beyond it is clamped (gradient 0) and passes dy to the
    range. Also in a graph, where grappler once turned the division by 255 into a product with its reciprocal."""
    n_min, n_max, scale = tensorflow_nudge(low, high, bits, narrow_range, np.float64)
    x = np.array([*around(n_min, n_max, np.float64(low), np.float64(high)), -9.0, 0.0, 0.37, 9.0])
    expected = np.floor((np.clip(x, n_min, n_max) - n_min) / scale + 0.5) * scale + n_min
    inside = (x >= n_min) & (x <= n_max)
    dy = np.random.default_rng(0).uniform(0.5, 1.5, x.shape)

    def gradient(xt, lo, hi):  # type: ignore[no-untyped-def]
        with tf.GradientTape() as tape:
            tape.watch([xt, lo, hi])
            y = fake_quant_op(xt, lo, hi, bits=bits, narrow_range=narrow_range)
        return y, tape.gradient(y, [xt, lo, hi], output_gradients=tf.constant(dy))

    run_it = gradient if run == "eager" else tf.function(gradient)
    y, (dx, dlow, dhigh) = run_it(tf.constant(x), tf.constant(low, tf.float64), tf.constant(high, tf.float64))
    np.testing.assert_allclose(y.numpy(), expected, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(dx.numpy(), np.where(inside, dy, 0.0))
    np.testing.assert_allclose([float(dlow), float(dhigh)], [dy[x < n_min].sum(), dy[x > n_max].sum()], rtol=1e-15)
    assert inside[1] and inside[4] and not inside[0] and not inside[5]


def largest_weights_clamped_by_their_own_nudge(dtype, count=3):
    """Values m for which TensorFlow's nudging of [−m, m] (narrow, 8 bits) in ``dtype`` gives bounds strictly inside
    [−m, m], so that a weight at ±m is clamped by the op (the case that lost its gradient)."""
    found = []
    for m in np.linspace(0.01, 4.0, 200_001, dtype=dtype):
        n_min, n_max, _ = tensorflow_nudge(-m, m, 8, True, dtype)
        if n_max < m and n_min > -m:
            found.append(float(m))
            if len(found) == count:
                return found
    raise AssertionError("no such value")


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
@pytest.mark.parametrize("channel_axes", [0, 1, 2], ids=["per-tensor", "per-channel", "depthwise"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_every_weight_gets_its_gradient_in_every_dtype_and_path(dtype, channel_axes, jit):
    """Every weight lies inside its range ±max|w|, the largest ones too: the weight quantizer's gradient is dy,
    also where the nudged bounds, rounded in float32 or float64, fall inside ±max|w|."""
    extremes = largest_weights_clamped_by_their_own_nudge(np.float32) + largest_weights_clamped_by_their_own_nudge(
        np.float64
    )
    rng = np.random.default_rng(1)
    # per channel: 3 output channels, or 2 x 3 for a depthwise kernel; every other weight is smaller than these
    w = rng.uniform(-0.9, 0.9, size=(3, 3, 2, 3)) * min(extremes)
    w_flat = w.reshape(9, 6) if channel_axes == 2 else w.reshape(18, 3) if channel_axes == 1 else w.reshape(54, 1)
    for column in range(w_flat.shape[1]):  # each channel's largest |w| is one of the values above, at ±
        m = extremes[column % len(extremes)]
        w_flat[column % w_flat.shape[0], column] = m if column % 2 else -m
    w = w_flat.reshape(3, 3, 2, 3)
    dy = tf.constant(rng.uniform(0.5, 1.5, w.shape), dtype)
    quantizer = ste.qat.WeightFakeQuant(channel_axes=channel_axes)

    @tf.function(jit_compile=jit)
    def gradient(w):
        with tf.GradientTape() as tape:
            tape.watch(w)
            y = quantizer(w)
        return y, tape.gradient(y, w, output_gradients=dy)

    y, g = gradient(tf.constant(w, dtype))
    np.testing.assert_array_equal(g.numpy(), dy.numpy())
    assert g.dtype == dtype and y.dtype == dtype


def test_an_all_zero_weight_quantizes_to_zero_under_xla():
    """A [0, 0] range (an all-zero kernel, or a channel whose folded γ is 0) gives 0, as TensorFlow's kernel does;
    XLA's lowering of the per-tensor op gave NaN."""

    @tf.function(jit_compile=True)
    def run(w):
        with tf.GradientTape() as tape:
            tape.watch(w)
            y = ste.qat.WeightFakeQuant(channel_axes=0)(w)
            z = fake_quant_op(w + 1.0, tf.constant(0.0), tf.constant(0.0))
        return y, z, tape.gradient([y, z], w)

    y, z, g = run(tf.zeros((4, 3)))
    np.testing.assert_array_equal(y.numpy(), np.zeros((4, 3)))
    np.testing.assert_array_equal(z.numpy(), np.zeros((4, 3)))
    np.testing.assert_array_equal(g.numpy(), np.full((4, 3), 2.0))


@pytest.mark.parametrize("run", ["eager", "graph"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
def test_float32_gradient_equals_tensorflows_gradient_op_at_the_bounds(per_channel, run):
    """The float32 gradient equals TensorFlow's FakeQuantWithMinMaxVars(PerChannel)Gradient bit for bit on random
    ranges (a [0, 0] one, and [−6, 6], [−2, 2], [−1, 1] whose zero point is a tie, among them) at the nudged bounds,
    at the given ones, one unit in the last place on either side, and elsewhere; eagerly and in a graph."""
    rng = np.random.default_rng(2)
    for trial in range(24):
        bits, narrow_range = int(rng.integers(2, 9)), bool(trial % 2)
        low = -rng.uniform(0, 8, 3) * (rng.uniform(size=3) < 0.8)
        high = rng.uniform(0, 8, 3)
        if trial % 5 == 0:
            low, high = -high, high
        if trial % 10 == 0:
            low[0] = high[0] = 0.0
        if trial % 4 == 0:
            low, high, bits, narrow_range = -np.array([6.0, 2.0, 1.0]), np.array([6.0, 2.0, 1.0]), 8, False
        low, high = low.astype(np.float32), high.astype(np.float32)
        if not per_channel:
            low, high = low[:1], high[:1]
        columns = []
        for lo, hi in zip(low, high):
            n_min, n_max, _ = nudged_range(tf.constant(lo), tf.constant(hi), bits=bits, narrow_range=narrow_range)
            points = around(np.float32(n_min), np.float32(n_max), lo, hi)
            columns.append(np.concatenate([points, rng.uniform(-10, 10, 20)]).astype(np.float32))
        x = tf.constant(np.stack(columns, axis=-1))
        dy = tf.constant(rng.normal(size=x.shape).astype(np.float32))
        lo_t, hi_t = (
            (tf.constant(low), tf.constant(high)) if per_channel else (tf.constant(low[0]), tf.constant(high[0]))
        )

        def gradient(x, lo_t, hi_t, dy, bits=bits, narrow_range=narrow_range):  # type: ignore[no-untyped-def]
            with tf.GradientTape() as tape:
                tape.watch([x, lo_t, hi_t])
                y = fake_quant_op(x, lo_t, hi_t, bits=bits, narrow_range=narrow_range)
            return tape.gradient(y, [x, lo_t, hi_t], output_gradients=dy)

        ours = (gradient if run == "eager" else tf.function(gradient))(x, lo_t, hi_t, dy)
        op = (
            tf.raw_ops.FakeQuantWithMinMaxVarsPerChannelGradient
            if per_channel
            else tf.raw_ops.FakeQuantWithMinMaxVarsGradient
        )
        theirs = op(gradients=dy, inputs=x, min=lo_t, max=hi_t, num_bits=bits, narrow_range=narrow_range)
        np.testing.assert_array_equal(ours[0].numpy(), theirs[0].numpy())
        for a, b in zip(ours[1:], theirs[1:]):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("run", ["eager", "graph"])
@pytest.mark.parametrize("dtype", FLOATS, ids=[d.name for d in FLOATS])
def test_gradient_of_the_gradient_is_exact_in_every_dtype(dtype, run):
    """With L = Σ v·q(x) and the penalty P = ‖∂L/∂x‖² + ‖∂L/∂min‖² + ‖∂L/∂max‖²: dP/dv = 2·v·1[inside] +
    2·(Σ v·1[below])·1[below] + 2·(Σ v·1[above])·1[above] (sums per channel for a per-channel range), for the
    per-tensor, per-channel and weight fake quantization (whose range has no gradient), in every dtype. float32 gave
    None: TensorFlow's gradient op has no gradient."""
    rng = np.random.default_rng(3)
    x64 = rng.uniform(-4, 4, size=(50, 3))
    v64 = rng.uniform(0.5, 1.5, size=(50, 3))
    low, high = np.array([-1.5, -2.0, -0.5]), np.array([2.5, 1.0, 3.0])
    x, v = tf.constant(x64, dtype), tf.constant(v64, dtype)
    weight = ste.qat.WeightFakeQuant(channel_axes=1)
    cases = {
        "per-tensor": (tf.constant(low[0]), tf.constant(high[0])),
        "per-channel": (tf.constant(low), tf.constant(high)),
        "weight": None,
    }
    xs, vs = np.asarray(tf.cast(x, tf.float64)), np.asarray(tf.cast(v, tf.float64))
    for name, bounds in cases.items():

        def penalty_gradient(x, v, bounds):  # type: ignore[no-untyped-def]
            with tf.GradientTape() as outer:
                outer.watch(v)
                with tf.GradientTape() as inner:
                    inner.watch(x)
                    if bounds is None:
                        loss = tf.reduce_sum(v * weight(x))
                    else:
                        inner.watch(bounds)
                        loss = tf.reduce_sum(v * fake_quant_op(x, *bounds))
                gradients = inner.gradient(loss, [x, *(bounds or ())])
                penalty = sum(tf.reduce_sum(tf.square(tf.cast(g, tf.float64))) for g in gradients)
            return outer.gradient(penalty, v)

        got = (penalty_gradient if run == "eager" else tf.function(penalty_gradient))(x, v, bounds)
        assert got is not None, name
        expected = 2 * vs
        if bounds is not None:
            wide = np.float64 if dtype == tf.float64 else np.float32
            lo, hi = (
                np.broadcast_to(low if name == "per-channel" else low[0], 3),
                np.broadcast_to(high if name == "per-channel" else high[0], 3),
            )
            nudged = [tensorflow_nudge(a, b, 8, False, wide) for a, b in zip(lo, hi)]
            as_x = lambda t: np.asarray(tf.cast(tf.constant(t), dtype).numpy(), np.float64)  # noqa: E731
            below = xs < np.array([as_x(t[0]) for t in nudged])
            above = xs > np.array([as_x(t[1]) for t in nudged])
            axis = 0 if name == "per-channel" else None
            expected = (
                2 * vs * ~(below | above)
                + 2 * (vs * below).sum(axis=axis) * below
                + 2 * (vs * above).sum(axis=axis) * above
            )
            assert below.any() and above.any()
        tolerance = 2e-2 if dtype in (tf.float16, tf.bfloat16) else 1e-6
        np.testing.assert_allclose(np.asarray(tf.cast(got, tf.float64)), expected, rtol=tolerance, err_msg=name)


def test_a_gradient_penalty_through_a_quantized_model_is_the_same_in_float32_and_float64():
    """``ste.quantize_model`` of Dense → ReLU → Dense: the kernels' gradient of ‖∂L/∂x‖² in float32 (TensorFlow's
    fake-quant kernels forward) equals float64's (the formula), where it was None."""
    import keras

    rng = np.random.default_rng(4)
    weights = [rng.normal(size=(5, 8)), rng.normal(size=8) * 0.1, rng.normal(size=(8, 3)), rng.normal(size=3) * 0.1]
    x64 = rng.normal(size=(16, 5))
    results = []
    for dtype in ("float32", "float64"):
        inputs = keras.Input((5,), dtype=dtype)
        hidden = keras.layers.Dense(8, activation="relu", dtype=dtype)(inputs)
        model = keras.Model(inputs, keras.layers.Dense(3, dtype=dtype)(hidden))
        model.set_weights([w.astype(dtype) for w in weights])
        qat = ste.quantize_model(model)
        x = tf.constant(x64, dtype)
        kernels = [layer.kernel for layer in qat.layers if isinstance(layer, ste.layers.QuantDense)]
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                inner.watch(x)
                loss = tf.reduce_sum(tf.square(qat(x, training=False)))
            penalty = tf.reduce_sum(tf.square(inner.gradient(loss, x)))
        results.append(outer.gradient(penalty, kernels))
    for a, b in zip(*results):
        assert a is not None and b is not None
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6 * np.abs(b.numpy()).max())


@pytest.mark.parametrize("dtype", FLOATS, ids=[d.name for d in FLOATS])
def test_a_tied_zero_point_is_tensorflows_in_a_graph_in_every_dtype(dtype):
    """TFMOT's initial activation range [−6, 6] puts the zero point at 127.5 exactly, which TensorFlow's kernel
    rounds to 128: the nudged range is [−6.0235, 5.9765], so −6 is inside and 6 is clamped, in every dtype inside a
    tf.function too (grappler turned the formula's division by 255 into a product with its reciprocal, 127.499985,
    zero point 127: the other way round)."""
    x = tf.constant([-6.0, 6.0])
    theirs = tf.raw_ops.FakeQuantWithMinMaxVarsGradient(gradients=tf.ones(2), inputs=x, min=-6.0, max=6.0)[0]
    np.testing.assert_array_equal(theirs.numpy(), [1.0, 0.0])

    @tf.function
    def gradient(x, low, high):  # type: ignore[no-untyped-def]
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fake_quant_op(x, low, high)  # the range is an input, as a variable's value is
        return tape.gradient(y, x)

    got = gradient(tf.cast(x, dtype), tf.constant(-6.0), tf.constant(6.0))
    np.testing.assert_array_equal(np.asarray(tf.cast(got, tf.float32)), [1.0, 0.0])


def largest_elements_clamped_by_a_wide_symmetric_nudge(count=3):
    """Values m for which TFMOT's wide symmetric range of a tensor with max m (and min above −m·256/254),
    [m/(−254/256), m] in float32, nudges (8 bits) to an upper bound below m."""
    found, ratio = [], np.float32(-254 / 256)
    for m in np.linspace(0.01, 4.0, 200_001, dtype=np.float32):
        _, n_max, _ = tensorflow_nudge(m / ratio, m, 8, False, np.float32)
        if n_max < m:
            found.append(float(m))
            if len(found) == count:
                return found
    raise AssertionError("no such value")


@pytest.mark.parametrize("per_axis", [False, True], ids=["per-tensor", "per-axis"])
@pytest.mark.parametrize("narrow_range", [True, False], ids=["narrow", "wide"])
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=["float32", "float64"])
def test_tfmots_symmetric_last_value_quantizer_gives_every_element_its_gradient(dtype, narrow_range, per_axis):
    """TFMOT's symmetric widening of a tensor's own range holds every element (its zero point is 2^(b−1), the
    nudged bounds are the range's own): the gradient is dy, the largest elements' included, where rounding puts a
    nudged bound inside them in float32."""
    extremes = (
        largest_weights_clamped_by_their_own_nudge(np.float32)
        if narrow_range
        else largest_elements_clamped_by_a_wide_symmetric_nudge()
    )
    rng = np.random.default_rng(5)
    w = rng.uniform(-0.9, 0.9, size=(6, 3)) * min(extremes)
    for column, m in enumerate(extremes):
        w[column, column] = m  # each column's (and the tensor's) largest element is positive
    dy = tf.constant(rng.uniform(0.5, 1.5, w.shape), dtype)
    quantizer = ste.qat.LastValueQuantizer(8, per_axis=per_axis, symmetric=True, narrow_range=narrow_range)
    x = tf.constant(w, dtype)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = quantizer(x)
    np.testing.assert_array_equal(tape.gradient(y, x, output_gradients=dy).numpy(), dy.numpy())


#: every quantizer ste.qat exports, as a config returns it (several argument sets where the grid differs)
QAT_QUANTIZERS = {
    "WeightFakeQuant": [
        lambda: ste.qat.WeightFakeQuant(),
        lambda: ste.qat.WeightFakeQuant(bits=4, channel_axes=1, narrow_range=False),
    ],
    "PreservingWeightFakeQuant": [lambda: ste.qat.PreservingWeightFakeQuant(channel_axes=1)],
    "ActivationFakeQuant": [lambda: ste.qat.ActivationFakeQuant(), lambda: ste.qat.ActivationFakeQuant(bits=4)],
    "LastValueQuantizer": [
        lambda: ste.qat.LastValueQuantizer(8, per_axis=False, symmetric=True, narrow_range=True),
        lambda: ste.qat.LastValueQuantizer(4, per_axis=True, symmetric=True, narrow_range=False),
        lambda: ste.qat.LastValueQuantizer(8, per_axis=False, symmetric=False, narrow_range=False),
        lambda: ste.qat.LastValueQuantizer(3, per_axis=True, symmetric=False, narrow_range=True),
    ],
    "MovingAverageQuantizer": [lambda: ste.qat.MovingAverageQuantizer(8, False, False, False)],
    "AllValuesQuantizer": [lambda: ste.qat.AllValuesQuantizer(5, False, True, False)],
    "FixedQuantizer": [
        lambda: ste.qat.FixedQuantizer(8, -1.0, 1.0, False),
        lambda: ste.qat.FixedQuantizer(3, -0.3, 1.7, True),
    ],
}


def test_every_qat_quantizer_is_in_the_zero_table():
    exported = {
        name
        for name in ste.qat.__all__
        if isinstance(getattr(ste.qat, name), type) and issubclass(getattr(ste.qat, name), ste.quantizers.Quantizer)
    }
    assert exported == set(QAT_QUANTIZERS)


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(QAT_QUANTIZERS))
def test_every_qat_quantizer_maps_an_exact_zero_to_an_exact_zero(name, dtype, training):
    """TensorFlow nudges a range so that 0 is a level (its zero point is an integer; numpy's transcription below
    checks the grid): a pruned weight or a zero activation stays exactly 0, in every float dtype."""
    x = np.random.default_rng(3).normal(0.2, 1.0, size=(6, 5))
    x[::2] = 0.0
    x[:, 3] = 0.0
    x[1, 3] = -0.0
    zeros = x == 0.0
    for make in QAT_QUANTIZERS[name]:
        quantizer = make()
        quantizer.build(x.shape)
        y = tf.cast(quantizer(tf.constant(x, dtype), training=training), tf.float64).numpy()
        np.testing.assert_array_equal(y[zeros], 0.0, err_msg=f"{quantizer!r} on {dtype.name}")
        if name != "AllValuesQuantizer" or training:  # its range starts at [0, 0]: all 0 until a training call
            assert np.any(y[~zeros] != 0.0)
    for low, high in ((-6.0, 6.0), (-1.0, 1.0), (-0.3, 1.7), (-2.1, 0.4)):
        for bits, narrow_range in ((8, False), (4, True), (3, True)):
            assert numpy_fake_quant(np.zeros(1), low, high, bits=bits, narrow_range=narrow_range)[0][0] == 0.0
