"""A folded batch norm's gradients against autodiff of the unfolded float64 formula: the convolution, then the batch
norm with the batch's statistics (training) or the moving ones (inference), written with plain TensorFlow ops on
separate variables. Every folded layer, with channels whose γ is negative, exactly 0 and positive."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

L = keras.layers
EPSILON, MOMENTUM = 1e-3, 0.9
KINDS = ["conv", "depthwise"]


def gammas(channels: int, rng: np.random.Generator) -> np.ndarray:
    """Channel i has γ < 0, γ = 0 or γ > 0 as i mod 3 is 0, 1 or 2."""
    magnitude = rng.uniform(0.5, 1.5, channels)
    return np.choose(np.arange(channels) % 3, [-magnitude, np.zeros(channels), magnitude])


def make(kind: str, quantizer: object = None, seed: int = 0) -> tuple[keras.layers.Layer, dict, object]:
    """A float64 folded layer with random weights, the same weights as float64 variables, and the convolution."""
    rng = np.random.default_rng(seed)
    if kind == "conv":
        layer = ste.qat.FoldedConv2D(
            6, 3, kernel_quantizer=quantizer, dtype="float64", batch_norm={"momentum": MOMENTUM, "epsilon": EPSILON}
        )

        def convolve(x, kernel):  # type: ignore[no-untyped-def]
            return tf.nn.conv2d(x, kernel, 1, "VALID")

    else:
        layer = ste.qat.FoldedDepthwiseConv2D(
            3,
            padding="same",
            depth_multiplier=2,
            kernel_quantizer=quantizer,
            dtype="float64",
            batch_norm={"momentum": MOMENTUM, "epsilon": EPSILON},
        )

        def convolve(x, kernel):  # type: ignore[no-untyped-def]
            return tf.nn.depthwise_conv2d(x, kernel, [1, 1, 1, 1], "SAME")

    layer.build((None, 7, 7, 4))
    channels = layer.gamma.shape[0]
    values = {
        "kernel": rng.normal(size=layer.kernel.shape),
        "bias": rng.normal(size=(channels,)),
        "gamma": gammas(channels, rng),
        "beta": rng.normal(size=(channels,)),
        "moving_mean": rng.normal(size=(channels,)),
        "moving_variance": rng.uniform(0.5, 2.0, channels),
    }
    for name, value in values.items():
        getattr(layer, name).assign(value)
    return layer, {name: tf.Variable(value, dtype=tf.float64) for name, value in values.items()}, convolve


def unfolded(convolve, v: dict, x: tf.Tensor, training: bool) -> tf.Tensor:  # type: ignore[no-untyped-def]
    z = convolve(x, v["kernel"]) + v["bias"]
    if training:
        mean = tf.reduce_mean(z, [0, 1, 2])
        variance = tf.reduce_mean(tf.square(z - mean), [0, 1, 2])
    else:
        mean, variance = v["moving_mean"], v["moving_variance"]
    return (z - mean) * v["gamma"] / tf.sqrt(variance + EPSILON) + v["beta"]


def first_order(f, x: tf.Tensor, variables: list, w: tf.Tensor) -> tuple[tf.Tensor, list]:  # type: ignore[no-untyped-def]
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
        loss = tf.reduce_sum(w * y + 0.1 * y * y)
    return y, tape.gradient(loss, [x, *variables])


def inputs(seed: int = 1) -> tuple[tf.Tensor, tf.Tensor]:
    rng = np.random.default_rng(seed)
    return tf.constant(rng.normal(size=(5, 7, 7, 4))), tf.constant(rng.normal(size=(5, 7, 7, 8)))


NAMES = ["kernel", "bias", "gamma", "beta"]


@pytest.mark.parametrize("training", [True, False], ids=["training", "inference"])
@pytest.mark.parametrize("kind", KINDS)
def test_gradients_equal_the_unfolded_formula_for_every_sign_of_gamma(kind, training):
    layer, reference, convolve = make(kind)
    x, w = inputs()
    w = w[..., : layer.gamma.shape[0]] if kind == "depthwise" else w[:, :5, :5, :6]
    before = {name: reference[name].numpy() for name in ("moving_mean", "moving_variance")}
    y_ref, g_ref = first_order(
        lambda t: unfolded(convolve, reference, t, training), x, [reference[n] for n in NAMES], w
    )
    y, g = first_order(lambda t: layer(t, training=training), x, [getattr(layer, n) for n in NAMES], w)
    np.testing.assert_allclose(y, y_ref, rtol=1e-10, atol=1e-10)
    for name, a, b in zip(["x", *NAMES], g, g_ref):
        assert a is not None, name
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12, err_msg=name)  # training: db = 0
    assert np.all(np.abs(g_ref[3].numpy()[1::3]) > 1e-3)  # the γ = 0 channels' gradient is not 0
    if training:  # the moving statistics follow z's batch statistics, for the γ = 0 channels too
        z = convolve(x, reference["kernel"]).numpy() + reference["bias"].numpy()
        mean, variance = z.mean(axis=(0, 1, 2)), z.var(axis=(0, 1, 2))
        expected = {"moving_mean": mean, "moving_variance": variance}
        for name, batch in expected.items():
            np.testing.assert_allclose(
                getattr(layer, name).numpy(), MOMENTUM * before[name] + (1 - MOMENTUM) * batch, rtol=1e-10
            )


@pytest.mark.parametrize("kind", KINDS)
def test_second_order_and_forward_mode_at_zero_gamma_equal_the_unfolded_formula(kind):
    """d/d(x, kernel, γ, β) of a penalty on ∂L/∂x and ∂L/∂γ (which reaches γ = 0 channels' x̂ through x and the
    kernel), and a forward-mode derivative along γ."""
    layer, reference, convolve = make(kind, seed=2)
    x, w = inputs(3)
    w = w[..., : layer.gamma.shape[0]] if kind == "depthwise" else w[:, :5, :5, :6]

    def second_order(f, gamma, variables):  # type: ignore[no-untyped-def]
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                loss = tf.reduce_sum(w * f(x) ** 2)
            dx, dgamma = inner.gradient(loss, [x, gamma])
            penalty = tf.reduce_sum(dx**2) + tf.reduce_sum(dgamma**2)
        return outer.gradient(penalty, [x, *variables])

    mine = second_order(lambda t: layer(t, training=True), layer.gamma, [layer.kernel, layer.gamma, layer.beta])
    expected = second_order(
        lambda t: unfolded(convolve, reference, t, True),
        reference["gamma"],
        [reference["kernel"], reference["gamma"], reference["beta"]],
    )
    for a, b in zip(mine, expected):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-9 * np.abs(b).max())
    tangent = tf.constant(np.random.default_rng(4).normal(size=layer.gamma.shape))
    jvps = []
    for f, gamma in (
        (lambda: unfolded(convolve, reference, x, True), reference["gamma"]),
        (lambda: layer(x, training=True), layer.gamma.value),  # the Keras variable's tf.Variable
    ):
        with tf.autodiff.ForwardAccumulator(gamma, tangent) as accumulator:
            y = f()
        jvps.append(accumulator.jvp(y))
    np.testing.assert_allclose(jvps[1], jvps[0], rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("kind", KINDS)
def test_zero_gamma_with_a_quantized_kernel_gets_the_float_kernels_batch_norm_gradient(kind):
    """With the int8 kernel quantizer a γ = 0 channel outputs β, and its γ's gradient is Σ dy·x̂ with x̂ the batch
    normalization of conv(x, W) + b (the straight-through view of the quantizer; the folded kernel there is 0)."""
    quantizer = ste.qat.WeightFakeQuant(channel_axes=1 if kind == "conv" else 2)
    layer, reference, convolve = make(kind, quantizer, seed=5)
    x, w = inputs(6)
    w = w[..., : layer.gamma.shape[0]] if kind == "depthwise" else w[:, :5, :5, :6]
    y_ref, g_ref = first_order(lambda t: unfolded(convolve, reference, t, True), x, [reference["gamma"]], w)
    y, g = first_order(lambda t: layer(t, training=True), x, [layer.gamma], w)
    dead = np.arange(layer.gamma.shape[0]) % 3 == 1
    np.testing.assert_allclose(y.numpy()[..., dead], y_ref.numpy()[..., dead], rtol=1e-12, atol=1e-12)  # β
    np.testing.assert_allclose(g[1].numpy()[dead], g_ref[1].numpy()[dead], rtol=1e-9)


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
def test_zero_initialized_gamma_learns_in_fit(jit):
    """One SGD step of ``fit`` (learning rate 1) on a folded layer whose γ starts at 0 moves γ by minus the
    unfolded batch norm's gradient, under tf.function and XLA (float32, Keras's Conv2D + BatchNormalization)."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(8, 6, 6, 3)).astype(np.float32)
    target = rng.normal(size=(8, 4, 4, 5)).astype(np.float32)
    conv, bn = L.Conv2D(5, 3), L.BatchNormalization(gamma_initializer="zeros")
    bn(conv(keras.Input((6, 6, 3))))
    with tf.GradientTape() as tape:
        loss = keras.losses.MeanSquaredError()(target, bn(conv(x), training=True))
    expected = -tape.gradient(loss, bn.gamma).numpy()
    assert np.all(np.abs(expected) > 1e-4)
    folded = ste.qat.FoldedConv2D(**conv.get_config(), kernel_quantizer=None)
    model = keras.Sequential([keras.Input((6, 6, 3)), folded])
    ste.qat.Int8Scheme().copy_weights(folded, conv, bn)
    model.compile(keras.optimizers.SGD(1.0), "mse", jit_compile=jit)
    model.fit(x, target, batch_size=8, epochs=1, verbose=0)
    np.testing.assert_allclose(folded.gamma.numpy(), expected, rtol=1e-4, atol=1e-6)


def test_a_gamma_whose_folded_scale_underflows_in_float16_gets_its_gradient():
    """Under mixed_float16 s = γ/√(v + ε) is computed in float16: γ = 1e-8 gives s = 0, a zero folded kernel, as
    γ = 0 does. γ still gets Σ dy·x̂ (float64 formula), and the other channels the float layer's gradient."""
    layer = ste.qat.FoldedConv2D(3, 3, kernel_quantizer=None, dtype="mixed_float16")
    layer.build((None, 6, 6, 2))
    rng = np.random.default_rng(8)
    layer.kernel.assign(rng.normal(size=layer.kernel.shape))
    layer.gamma.assign([1e-8, 0.7, -1.1])
    x = rng.normal(size=(4, 6, 6, 2))
    w = rng.normal(size=(4, 4, 4, 3))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.cast(layer(tf.constant(x, tf.float16), training=True), tf.float32) * w)
    got = tape.gradient(loss, layer.gamma).numpy()
    z = tf.nn.conv2d(
        np.asarray(tf.cast(tf.cast(x, tf.float16), tf.float64)), layer.kernel.numpy().astype(np.float64), 1, "VALID"
    )
    z = np.asarray(tf.cast(tf.cast(z, tf.float16), tf.float64))  # the float16 convolution's rounding
    normalized = (z - z.mean(axis=(0, 1, 2))) / np.sqrt(z.var(axis=(0, 1, 2)) + 1e-3)
    np.testing.assert_allclose(got, (w * normalized).sum(axis=(0, 1, 2)), rtol=2e-2)
