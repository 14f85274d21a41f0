"""The low-bit schemes of ``ste.quantize_model``: ``"binary"`` (larq-style signs, first and last layers 8-bit,
Larq Compute Engine's ``LceBconv2d``) and ``"ternary"`` (BitNet b1.58), against numpy references."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

from .helpers import L

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.deploy_size import flatbuffer_ops  # noqa: E402
from tests.test_deploy import INTERPRETER, lce_python  # noqa: E402


def conv_net() -> keras.Model:
    """First conv, two binarizable convs (SAME and VALID), a binarizable Dense, the last Dense; BNs between."""
    keras.utils.set_random_seed(0)
    i = keras.Input((8, 8, 3))
    x = L.Conv2D(8, 3, padding="same", use_bias=False, name="first")(i)
    x = L.BatchNormalization(name="bn0")(x)
    x = L.Conv2D(8, 3, padding="same", use_bias=False, name="b1")(x)
    x = L.BatchNormalization(name="bn1")(x)
    x = L.Conv2D(8, 3, strides=2, use_bias=True, name="b2")(x)
    x = L.BatchNormalization(name="bn2")(x)
    x = L.GlobalAveragePooling2D()(x)
    x = L.Dense(12, use_bias=False, name="b3")(x)
    x = L.BatchNormalization(name="bn3")(x)
    return keras.Model(i, L.Dense(4, name="last")(x))


def task(n: int = 64) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 8, 8, 3)).astype(np.float32)
    return x, (x[:, :4, :4, 0].mean(axis=(1, 2)) > 0).astype(np.int64) + 2 * (x[:, 4:, 4:, 1].mean(axis=(1, 2)) > 0)


def np_sign(x: np.ndarray) -> np.ndarray:
    return np.where(x >= 0, 1.0, -1.0)


def np_conv(x: np.ndarray, w: np.ndarray, stride: int, same: bool) -> np.ndarray:
    """NHWC cross-correlation (Keras's Conv2D), zero padding for SAME (odd kernel, stride 1)."""
    k = w.shape[0]
    if same:
        x = np.pad(x, ((0, 0), (k // 2, k // 2), (k // 2, k // 2), (0, 0)))
    rows = (x.shape[1] - k) // stride + 1
    cols = (x.shape[2] - k) // stride + 1
    out = np.zeros((x.shape[0], rows, cols, w.shape[-1]))
    for i in range(rows):
        for j in range(cols):
            patch = x[:, i * stride : i * stride + k, j * stride : j * stride + k, :]
            out[:, i, j, :] = np.tensordot(patch, w, axes=([1, 2, 3], [0, 1, 2]))
    return out


def kinds(model: keras.Model) -> dict[str, str]:
    return {layer.name: type(layer).__name__ for layer in model.layers}


# ------------------------------------------------------------------------------------------------------ binary


def test_binary_scheme_binarizes_the_middle_and_keeps_the_ends_8_bit():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every layer is covered, every binary kernel has its constraint
        q = ste.quantize_model(conv_net(), scheme="binary")
    assert [type(layer).__name__ for layer in q.layers].count("BatchNormalization") == 4  # not folded, float
    assert "ActivationFakeQuant" not in kinds(q).values()  # the layers quantize their own inputs
    for name in ("b1", "b2", "b3"):
        layer = q.get_layer(name)
        assert isinstance(layer.input_quantizer, ste.quantizers.Sign)
        assert isinstance(layer.kernel_quantizer, ste.quantizers.Sign)
        surrogates = {repr(layer.input_quantizer.surrogate), repr(layer.kernel_quantizer.surrogate)}
        assert surrogates == {"straight_through(clip=1.0)"}
        assert isinstance(layer.kernel_constraint, ste.constraints.WeightClip)
    for name in ("first", "last"):
        layer = q.get_layer(name)
        assert isinstance(layer.input_quantizer, ste.qat.ActivationFakeQuant) and layer.input_quantizer.bits == 8
        assert isinstance(layer.kernel_quantizer, ste.qat.WeightFakeQuant) and layer.kernel_quantizer.bits == 8
    everything = ste.quantize_model(conv_net(), scheme=ste.qat.BinaryScheme(keep_ends=False))
    assert isinstance(everything.get_layer("first").kernel_quantizer, ste.quantizers.Sign)
    assert isinstance(everything.get_layer("last").kernel_quantizer, ste.quantizers.Sign)
    with pytest.raises(ste.errors.ParameterError, match="keep_ends"):
        ste.qat.BinaryScheme(keep_ends="yes")


@pytest.mark.parametrize("scheme", ["binary", "ternary"])
def test_low_bit_schemes_train_keras_batch_norm_on_the_fused_kernel(scheme):
    model = conv_net()
    x, _ = task(8)
    model(x, training=True)  # moving statistics away from their initial values
    q = ste.quantize_model(model, scheme=scheme)
    for name in ("bn0", "bn1", "bn2", "bn3"):
        ours, theirs = q.get_layer(name), model.get_layer(name)
        assert type(ours) is ste.layers.BatchNormalization
        assert ours.get_config() == theirs.get_config()
        for a, b in zip(ours.get_weights(), theirs.get_weights()):
            np.testing.assert_array_equal(a, b)
    # the same numbers as Keras's layer with those weights, in training (the fused kernel) and inference
    h = np.random.default_rng(5).normal(size=(4, 8, 8, 8)).astype(np.float32) * 2.0 + 0.5
    reference = L.BatchNormalization.from_config(model.get_layer("bn1").get_config())
    reference.build(h.shape)
    reference.set_weights(model.get_layer("bn1").get_weights())
    for training in (False, True):
        np.testing.assert_allclose(q.get_layer("bn1")(h, training=training), reference(h, training=training), atol=1e-5)
    np.testing.assert_allclose(q.get_layer("bn1").moving_mean.numpy(), reference.moving_mean.numpy(), atol=1e-6)
    # trained as converted, no layer asks for the fused batch norm (the fused-kernel hint stays silent)
    q.compile("sgd", "mse")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        q.fit(x, np.zeros((8, 4), np.float32), epochs=1, verbose=0)
    assert not [w for w in caught if "ste.layers.BatchNormalization" in str(w.message)]


def test_layers_the_scheme_does_not_make_low_bit_are_8_bit_with_their_own_input_quantizer():
    model = keras.Sequential(
        [
            keras.Input((6, 6, 2)),
            L.Conv2D(4, 3, padding="same", name="c1"),
            L.DepthwiseConv2D(3, padding="same", name="dw"),
            L.Conv2D(4, 3, name="c2"),
            L.Flatten(),
            L.Dense(3, activation="softmax", name="head"),
        ]
    )
    q = ste.quantize_model(model, scheme="binary")
    assert isinstance(q, keras.Sequential)
    dw = q.get_layer("dw")
    assert isinstance(dw.kernel_quantizer, ste.qat.WeightFakeQuant) and dw.kernel_quantizer.channel_axes == 2
    assert isinstance(dw.input_quantizer, ste.qat.ActivationFakeQuant)
    assert isinstance(q.get_layer("c2").kernel_quantizer, ste.quantizers.Sign)
    # softmax is not fused into the 8-bit head: it runs as its own layer on the head's unquantized output
    assert isinstance(q.layers[-1], L.Activation) and q.layers[-1].activation is keras.activations.softmax
    x = np.random.default_rng(9).normal(size=(3, 6, 6, 2)).astype(np.float32)
    np.testing.assert_allclose(q(x).numpy().sum(axis=-1), 1.0, rtol=1e-6)


def test_binary_forward_is_sign_of_inputs_and_kernels():
    model = conv_net()
    q = ste.quantize_model(model, scheme="binary")
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 8, 8, 8)).astype(np.float32)
    x[0, 0, :3, :] = 0.0  # sign(0) = +1
    for name, stride, same in (("b1", 1, True), ("b2", 2, False)):
        layer = q.get_layer(name)
        layer.kernel.assign(np.where(rng.uniform(size=layer.kernel.shape) < 0.1, 0.0, layer.kernel.numpy()))
        bias = layer.bias.numpy() if layer.use_bias else 0.0
        want = np_conv(np_sign(x), np_sign(layer.kernel.numpy()), stride, same) + bias
        np.testing.assert_allclose(layer(x).numpy(), want, rtol=1e-6, atol=1e-5, err_msg=name)
    dense = q.get_layer("b3")
    h = rng.normal(size=(5, 8)).astype(np.float32)
    h[0, 0] = 0.0
    np.testing.assert_allclose(dense(h).numpy(), np_sign(h) @ np_sign(dense.kernel.numpy()), rtol=1e-6, atol=1e-5)
    # the first layer keeps 8 bits: symmetric narrow-range int8 per output channel, of the trained float kernel
    w = model.get_layer("first").kernel.numpy()
    step = np.abs(w).max(axis=(0, 1, 2)) / 127
    np.testing.assert_allclose(q.get_layer("first").quantized_kernel.numpy(), np.round(w / step) * step, atol=1e-6)


def loss(model: keras.Model, x: np.ndarray, y: np.ndarray) -> float:
    logits = model(x, training=False)  # eager: no traced evaluate/predict functions (the suite's time budget)
    return float(keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y, logits))


def train_save_load(q: keras.Model, x: np.ndarray, y: np.ndarray, tmp_path: Path) -> tuple[float, keras.Model]:
    """The loss after three full-batch steps (eager: no traced train step to build) relative to before, and the
    reloaded model (its outputs and weights checked against the trained one)."""
    before = loss(q, x, y)
    q.compile(
        keras.optimizers.Adam(0.02), keras.losses.SparseCategoricalCrossentropy(from_logits=True), run_eagerly=True
    )
    q.fit(x, y, epochs=3, batch_size=len(x), verbose=0)
    ratio = loss(q, x, y) / before
    q.save(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras")
    np.testing.assert_array_equal(loaded(x, training=False).numpy(), q(x, training=False).numpy())
    for a, b in zip(loaded.get_weights(), q.get_weights()):
        np.testing.assert_array_equal(a, b)
    return ratio, loaded


def test_binary_model_trains_and_saves_and_loads_identically(tmp_path):
    x, y = task()
    q = ste.quantize_model(conv_net(), scheme="binary")
    ratio, _ = train_save_load(q, x, y, tmp_path)
    assert ratio < 0.8
    for name in ("b1", "b2", "b3"):  # weight_clip keeps the latent weights in [−1, 1]
        assert np.abs(q.get_layer(name).kernel.numpy()).max() <= 1.0


def test_binary_model_converts_to_lce_bconv2d_and_computes_what_keras_does(tmp_path):
    lce = pytest.importorskip(
        "larq_compute_engine", reason="larq-compute-engine is not installed (pip install 'ste[deploy]')"
    )
    q = ste.quantize_model(conv_net(), scheme="binary")
    for name in ("bn1", "bn2"):
        # b1 and b2 sum 72 products ±1 (even integers): a mean of 1 keeps what feeds the next sign away from 0,
        # where folding batch norm into the convolution could flip it (REFERENCE.md §7)
        q.get_layer(name).moving_mean.assign(np.ones(8))
    q.export(str(tmp_path / "saved"), verbose=False)
    flatbuffer = lce.convert_saved_model(str(tmp_path / "saved"))
    ops = flatbuffer_ops(flatbuffer)
    assert ops["LceBconv2d"] == 2  # b1 and b2
    assert ops["CONV_2D"] == 1  # the first layer, 8-bit
    assert ops["FULLY_CONNECTED"] == 2  # LCE has no binary Dense op: b3 and the last layer

    python = lce_python()
    if python is None:
        pytest.skip(
            "flatbuffer checked; the output comparison needs LCE's interpreter, which needs numpy < 2: set "
            "STE_LCE_PYTHON (see lce_python in tests/test_deploy.py)"
        )
    x = task(8)[0]
    (tmp_path / "model.tflite").write_bytes(flatbuffer)
    np.save(tmp_path / "x.npy", x)
    paths = [str(tmp_path / n) for n in ("model.tflite", "x.npy", "y.npy")]
    subprocess.run([python, "-c", INTERPRETER, *paths], check=True, capture_output=True, timeout=120)
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), q(x, training=False).numpy(), rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------------------------------- ternary


def token_net() -> keras.Model:
    """A tiny per-token model: 8-bit first Dense, LayerNorm, two ternary Dense (one with ReLU), 8-bit head."""
    keras.utils.set_random_seed(1)
    i = keras.Input((6, 8))
    x = L.Dense(16, name="first")(i)
    x = L.LayerNormalization()(x)
    x = L.Dense(16, activation="relu", name="t1")(x)
    x = L.Dense(16, use_bias=False, name="t2")(x)
    x = L.Flatten()(x)
    return keras.Model(i, L.Dense(3, name="last")(x))


def np_ternary(w: np.ndarray) -> np.ndarray:
    gamma = np.mean(np.abs(w))
    return np.clip(np.round(w / (gamma + 1e-5)), -1, 1) * gamma


def np_tokens(x: np.ndarray) -> np.ndarray:
    m = np.maximum(np.abs(x).max(axis=-1, keepdims=True), 1e-5)
    return np.clip(np.round(x * 127 / m), -128, 127) * m / 127


def test_ternary_scheme_is_bitnet_b158_in_the_middle():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        q = ste.quantize_model(token_net(), scheme="ternary")
    assert "LayerNormalization" in kinds(q).values()
    for name in ("t1", "t2"):
        layer = q.get_layer(name)
        assert isinstance(layer.input_quantizer, ste.quantizers.AbsmaxPerToken) and layer.input_quantizer.bits == 8
        assert isinstance(layer.kernel_quantizer, ste.quantizers.AbsmeanTernary)
    assert isinstance(q.get_layer("last").kernel_quantizer, ste.qat.WeightFakeQuant)
    assert ste.qat.schemes() == [
        "binary",
        "cluster_preserve",
        "int8",
        "prune_cluster_preserve",
        "prune_preserve",
        "ternary",
    ]


def test_ternary_forward_and_straight_through_gradients_match_numpy():
    q = ste.quantize_model(token_net(), scheme="ternary")
    layer = q.get_layer("t1")
    rng = np.random.default_rng(5)
    x = (rng.normal(size=(3, 6, 16)) * rng.uniform(0.1, 10, size=(3, 6, 1))).astype(np.float32)
    dy = rng.normal(size=(3, 6, 16)).astype(np.float32)
    w, b = layer.kernel.numpy().astype(np.float64), layer.bias.numpy()
    pre = np_tokens(x.astype(np.float64)) @ np_ternary(w) + b
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = layer(xt)
    dx, dw = tape.gradient(y, [xt, layer.kernel], output_gradients=tf.constant(dy))
    np.testing.assert_allclose(y.numpy(), np.maximum(pre, 0), rtol=1e-5, atol=1e-5)
    upstream = dy * (pre > 0)  # through the ReLU; the quantizers pass gradients straight through
    np.testing.assert_allclose(dx.numpy(), upstream @ np_ternary(w).T, rtol=1e-5, atol=1e-5)
    tokens = np_tokens(x.astype(np.float64)).reshape(-1, 16)
    np.testing.assert_allclose(dw.numpy(), tokens.T @ upstream.reshape(-1, 16), rtol=1e-5, atol=1e-4)


def test_ternary_model_trains_and_saves_and_loads_identically(tmp_path):
    rng = np.random.default_rng(6)
    x = rng.normal(size=(64, 6, 8)).astype(np.float32)
    y = (x[:, :, 0].sum(axis=1) > 0).astype(np.int64) + (x[:, :, 1].sum(axis=1) > 0)
    ratio, loaded = train_save_load(ste.quantize_model(token_net(), scheme="ternary"), x, y, tmp_path)
    assert ratio < 0.8
    assert len(np.unique(np.abs(loaded.get_layer("t2").quantized_kernel.numpy()))) == 2  # {0, γ}


@pytest.mark.parametrize("scheme", ["binary", "ternary"])
def test_low_bit_schemes_under_mixed_float16_compute_in_float16(scheme):
    net, layer, shape = (conv_net, "b1", (4, 8, 8, 8)) if scheme == "binary" else (token_net, "t1", (4, 6, 16))
    reference = ste.quantize_model(net(), scheme=scheme)
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        q = ste.quantize_model(net(), scheme=scheme)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    q.set_weights(reference.get_weights())
    x = np.random.default_rng(7).normal(size=(4, *net().input_shape[1:])).astype(np.float32)
    with tf.GradientTape() as tape:
        y = q(x, training=False)
        total = tf.reduce_sum(tf.cast(y, tf.float32))
    grads = tape.gradient(total, q.trainable_variables)
    assert y.dtype == tf.float16
    assert all(g is not None and np.isfinite(g.numpy()).all() for g in grads)
    # one low-bit layer on a float16 input: binary sums of ±1 are exact in float16; BitNet's levels nearly so
    h = np.random.default_rng(8).normal(size=shape).astype(np.float16)
    got = q.get_layer(layer)(h).numpy()
    want = reference.get_layer(layer)(h.astype(np.float32)).numpy()
    assert got.dtype == np.float16
    if scheme == "binary":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * np.abs(want).max())
