"""``ste.quantize_model`` on functional, Sequential and nested models: what is quantized, folded and fused, what
stays float, saving and resuming; the folded batch norm against Keras's Conv2D + BatchNormalization."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

from .helpers import L, data, residual_net


def kinds(model: keras.Model) -> list[str]:
    return [type(layer).__name__ for layer in model.layers]


def test_functional_model_is_rewritten_as_tfmots_scheme():
    q = ste.quantize_model(residual_net())
    assert kinds(q) == [
        "InputLayer",
        "ActivationFakeQuant",  # the float input
        "FoldedConv2D",  # conv + BN + ReLU
        "ActivationFakeQuant",
        "FoldedDepthwiseConv2D",  # depthwise + BN + ReLU6
        "ActivationFakeQuant",
        "Add",
        "ActivationFakeQuant",  # one quantizer layer for the concatenation's inputs and its output
        "QuantConv2D",  # activation="relu" fused
        "Concatenate",
        "MaxPooling2D",
        "Flatten",
        "Dropout",
        "QuantDense",
        "ActivationFakeQuant",
    ]
    concat = next(layer for layer in q.layers if isinstance(layer, L.Concatenate))
    shared = [layer for layer in q.layers if isinstance(layer, ste.qat.ActivationFakeQuant)][3]
    assert len(shared._inbound_nodes) == 3  # add output, conv output, concatenation output: one range
    assert concat.input[1]._keras_history[0] is shared


def test_trained_weights_are_kept_and_outputs_close_to_float():
    model = residual_net()
    x, y = data()
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, epochs=2, verbose=0)
    q = ste.quantize_model(model)
    dense = model.layers[-1]
    np.testing.assert_array_equal(q.get_layer(dense.name).kernel.numpy(), dense.kernel.numpy())
    float_out, q_out = model.predict(x, verbose=0), q.predict(x, verbose=0)
    step = 12 / 255  # the output range is still TFMOT's initial [−6, 6]
    assert np.abs(float_out - q_out).max() < 3 * step
    assert np.mean(np.abs(float_out - q_out) <= step) > 0.8


def test_original_model_is_untouched_by_qat_training():
    model = residual_net()
    before = [w.copy() for w in model.get_weights()]
    q = ste.quantize_model(model)
    q.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    q.fit(*data(), epochs=1, verbose=0)
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)


def folded_pair(
    depthwise: bool, quantizer: object = None
) -> tuple[keras.layers.Layer, keras.layers.Layer, keras.layers.Layer]:
    """A FoldedConv2D without weight quantizer and the Conv2D + BatchNormalization it stands for, same weights."""
    rng = np.random.default_rng(4)
    conv = L.DepthwiseConv2D(3, padding="same", use_bias=True) if depthwise else L.Conv2D(6, 3, use_bias=True)
    bn = L.BatchNormalization(momentum=0.9)
    x = keras.Input((7, 7, 4))
    bn(conv(x))
    for variable in [*conv.weights, bn.gamma, bn.beta, bn.moving_mean]:
        variable.assign(rng.normal(size=variable.shape))
    bn.moving_variance.assign(rng.uniform(0.5, 2, size=bn.moving_variance.shape))
    cls = ste.qat.FoldedDepthwiseConv2D if depthwise else ste.qat.FoldedConv2D
    folded = cls(**conv.get_config(), kernel_quantizer=quantizer, batch_norm={"momentum": 0.9, "epsilon": bn.epsilon})
    folded(x)
    ste.qat.Int8Scheme().copy_weights(folded, conv, bn)
    return folded, conv, bn


@pytest.mark.parametrize("depthwise", [False, True])
def test_unquantized_folding_equals_conv_then_batch_norm(depthwise):
    folded, conv, bn = folded_pair(depthwise)
    x = tf.random.stateless_normal([5, 7, 7, 4], seed=[1, 1])
    np.testing.assert_allclose(folded(x, training=False), bn(conv(x), training=False), rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(folded(x, training=True), bn(conv(x), training=True), rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(folded.moving_mean, bn.moving_mean, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(folded.moving_variance, bn.moving_variance, rtol=1e-4)


@pytest.mark.parametrize("depthwise", [False, True])
def test_folded_training_gradients_equal_conv_then_batch_norms(depthwise):
    """Without a weight quantizer, training-mode gradients (input, kernel, bias, γ, β) of a folded layer equal
    autodiff of Keras's Conv2D + BatchNormalization, with a negative γ and a channel with γ = 0 (output β)."""
    folded, conv, bn = folded_pair(depthwise)
    gamma = bn.gamma.numpy()
    gamma[0], gamma[1] = -abs(gamma[0]) - 0.5, 0.0
    for layer in (bn, folded):
        layer.gamma.assign(gamma)
    x = tf.random.stateless_normal([5, 7, 7, 4], seed=[2, 2])
    w = tf.random.stateless_normal(bn(conv(x)).shape, seed=[3, 3])

    def gradients(f, variables):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
            loss = tf.reduce_sum(w * y + 0.1 * y * y)
        return y, tape.gradient(loss, [x, *variables])

    reference = [conv.weights[0], conv.weights[1], bn.gamma, bn.beta]
    mine = [folded.weights[0], folded.weights[1], folded.gamma, folded.beta]
    y_ref, g_ref = gradients(lambda t: bn(conv(t), training=True), reference)
    y, g = gradients(lambda t: folded(t, training=True), mine)
    np.testing.assert_allclose(y, y_ref, rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(y.numpy()[..., 1], np.broadcast_to(bn.beta.numpy()[1], y.shape[:-1]), atol=1e-6)
    for a, b in zip(g, g_ref):
        a, b = np.asarray(a), np.asarray(b)
        # the bias's gradient is 0 (it cancels in the batch norm): Keras's is rounding noise of ~1e-7
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=max(2e-4 * np.abs(b).max(), 1e-5))


def test_folded_training_second_order_and_forward_mode_equal_conv_then_batch_norms():
    """The folded batch norm's closed-form gradient is differentiable: d/d(x, kernel, γ, β) of ‖∂L/∂x‖² and a
    forward-mode derivative along γ equal autodiff of the convolution and batch norm written out with plain ops
    (not Keras's layer: ``tf.nn.moments`` stops the gradient of the mean inside the variance, which leaves the
    first derivative right but not the second; in float64 the folded layer matches the plain formula to 1e-13)."""
    folded, conv, bn = folded_pair(False)
    x = tf.random.stateless_normal([3, 7, 7, 4], seed=[5, 5])
    w = tf.random.stateless_normal(bn(conv(x)).shape, seed=[6, 6])

    def second_order(f, variables):
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                loss = tf.reduce_sum(w * f(x) ** 2)
            penalty = tf.reduce_sum(inner.gradient(loss, x) ** 2)
        return outer.gradient(penalty, [x, *variables])

    def plain(t):
        z = conv(t)
        mean = tf.reduce_mean(z, [0, 1, 2])
        variance = tf.reduce_mean(tf.square(z - mean), [0, 1, 2])
        return (z - mean) * bn.gamma / tf.sqrt(variance + bn.epsilon) + bn.beta

    reference = second_order(plain, [conv.kernel, bn.gamma, bn.beta])
    mine = second_order(lambda t: folded(t, training=True), [folded.kernel, folded.gamma, folded.beta])
    for a, b in zip(mine, reference):
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=1e-4 * np.abs(b).max())
    tangent = tf.random.stateless_normal(bn.gamma.shape, seed=[7, 7])
    jvps = []
    for f, gamma in ((lambda: plain(x), bn.gamma), (lambda: folded(x, training=True), folded.gamma)):
        with tf.autodiff.ForwardAccumulator(gamma.value, tangent) as accumulator:
            y = f()
        jvps.append(accumulator.jvp(y))
    np.testing.assert_allclose(jvps[1], jvps[0], rtol=1e-3, atol=1e-4 * np.abs(jvps[0]).max())


def test_folded_training_with_quantized_kernel_is_the_division_formula():
    """With the per-channel weight quantizer: output and gradients equal Krishnamoorthi's formula written out with
    TensorFlow's own ops, z = conv(x, fq(W·s))/s + b and the batch norm of z with its batch statistics."""
    folded, _, bn = folded_pair(False, ste.qat.WeightFakeQuant(channel_axes=1))
    gamma = bn.gamma.numpy()
    gamma[0] = -abs(gamma[0]) - 0.5
    folded.gamma.assign(gamma)
    x = tf.random.stateless_normal([5, 7, 7, 4], seed=[4, 4])
    weights = [folded.weights[0], folded.gamma, folded.beta, folded.weights[1]]

    def formula(t):
        kernel, gamma, beta, bias = weights
        s = gamma * tf.math.rsqrt(folded.moving_variance + bn.epsilon)
        m = tf.stop_gradient(tf.reduce_max(tf.abs(kernel * s), axis=[0, 1, 2]))
        q = tf.quantization.fake_quant_with_min_max_vars_per_channel(kernel * s, -m, m, narrow_range=True)
        z = tf.nn.conv2d(t, q, 1, "VALID") / s + bias
        mean, variance = tf.nn.moments(z, [0, 1, 2])
        return (z - mean) * gamma / tf.sqrt(variance + bn.epsilon) + beta

    def gradients(f):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
            loss = tf.reduce_sum(tf.sin(y))
        return y, tape.gradient(loss, [x, *weights[:3]])

    y_ref, g_ref = gradients(formula)
    y, g = gradients(lambda t: folded(t, training=True))
    np.testing.assert_allclose(y, y_ref, rtol=1e-4, atol=1e-4)
    for a, b in zip(g, g_ref):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4 * np.abs(b).max())


def test_quantized_kernel_is_the_folded_one():
    folded, conv, bn = folded_pair(False, ste.qat.WeightFakeQuant(channel_axes=1))
    scale = bn.gamma.numpy() / np.sqrt(bn.moving_variance.numpy() + bn.epsilon)
    w = conv.kernel.numpy() * scale
    m = np.abs(w).max(axis=(0, 1, 2))
    expected = np.round(w / (m / 127)) * (m / 127)  # symmetric narrow-range levels of the folded kernel
    np.testing.assert_allclose(folded.quantized_kernel.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_sequential_stays_sequential_and_nested_models_are_quantized():
    inner = keras.Sequential([keras.Input((6,)), L.Dense(8), L.ReLU(), L.Dense(4)], name="inner")
    outer_in = keras.Input((6,))
    outer = keras.Model(outer_in, L.Dense(3)(inner(outer_in)))
    q = ste.quantize_model(outer)
    q_inner = q.get_layer("inner")
    assert isinstance(q_inner, keras.Sequential)
    assert kinds(q_inner) == [
        "ActivationFakeQuant",
        "QuantDense",
        "ActivationFakeQuant",
        "QuantDense",
        "ActivationFakeQuant",
    ]
    assert kinds(q) == ["InputLayer", "Sequential", "QuantDense", "ActivationFakeQuant"]  # no second quantizer
    x = np.random.default_rng(0).normal(size=(4, 6)).astype(np.float32)
    assert np.abs(q.predict(x, verbose=0) - outer.predict(x, verbose=0)).max() < 0.1


def test_uncovered_layers_are_named_in_one_warning_and_strict_raises():
    i = keras.Input((4, 6))
    x = L.Dense(6)(i)
    x = L.LayerNormalization(name="norm")(x)
    x = L.GRU(3, name="gru")(x)
    model = keras.Model(i, L.Dense(2)(x))
    with pytest.warns(UserWarning, match=r"2 layer\(s\).*norm \(LayerNormalization\).*gru \(GRU\)"):
        q = ste.quantize_model(model)
    assert kinds(q).count("QuantDense") == 2
    with pytest.raises(ste.errors.UnsupportedLayerError, match="quantize_annotate_layer"):
        ste.quantize_model(model, strict=True)


def test_annotation_and_quantize_apply():
    i = keras.Input((5,))
    a = ste.qat.quantize_annotate_layer(L.Dense(4, name="a"))
    norm = ste.qat.quantize_annotate_layer(L.LayerNormalization(name="n"), ste.qat.QuantizeConfig(quantize_output=True))
    model = keras.Model(i, L.Dense(2, name="b")(norm(a(i))))
    q = ste.qat.quantize_apply(model)
    assert type(q.get_layer("a")).__name__ == "QuantDense"
    assert type(q.get_layer("b")).__name__ == "Dense"  # not annotated: float
    assert type(q.get_layer("n")).__name__ == "LayerNormalization"
    assert kinds(q).count("ActivationFakeQuant") == 3  # input, a's output, n's output
    q_strict = ste.quantize_model(model, strict=True)  # the config covers the LayerNormalization
    assert type(q_strict.get_layer("b")).__name__ == "QuantDense"


@pytest.mark.parametrize(
    ("scheme", "meant"),
    [
        (
            "int4",
            "Fix: scheme=ste.qat.NBitScheme(num_bits_weight=4), or ste.qat.NBitScheme(num_bits_weight=4, "
            "num_bits_activation=None) for int4 weight-only.",
        ),
        (
            "4bit",
            "Fix: scheme=ste.qat.NBitScheme(num_bits_weight=4), or ste.qat.NBitScheme(num_bits_weight=4, "
            "num_bits_activation=None) for int4 weight-only.",
        ),
        (
            "4-bit",
            "Fix: scheme=ste.qat.NBitScheme(num_bits_weight=4), or ste.qat.NBitScheme(num_bits_weight=4, "
            "num_bits_activation=None) for int4 weight-only.",
        ),
        ("W4A8", "Fix: scheme=ste.qat.NBitScheme(num_bits_weight=4)."),
        ("w4a4", "Fix: scheme=ste.qat.NBitScheme(num_bits_weight=4, num_bits_activation=4)."),
        ("w2", "Fix: scheme=ste.qat.NBitScheme(num_bits_weight=2)."),
        ("8bit", 'Fix: scheme="int8".'),
        ("int_8", 'Fix: scheme="int8".'),
        ("w1a1", 'Fix: scheme="binary".'),
        ("binray", 'Fix: scheme="binary".'),
        ("ternery", 'Fix: scheme="ternary".'),
        ("1.58bit", 'Fix: scheme="ternary".'),
        ("prune-preserve", 'Fix: scheme="prune_preserve".'),
        ("Default8BitClusterPreserveQuantizeScheme", 'Fix: scheme="cluster_preserve".'),
        ("pcqat", 'Fix: scheme="prune_cluster_preserve".'),
        ("int16", "NBitScheme takes 2 to 8 bits for weights and for activations, not 16 and 8"),
        (ste.qat.NBitScheme, "Fix: scheme=ste.qat.NBitScheme()."),
    ],
)
def test_an_unknown_scheme_suggests_the_scheme_it_probably_meant(scheme, meant):
    """Near-miss names (difflib) and the usual bit-width spellings point to the call that gives that scheme."""
    model = keras.Sequential([keras.Input((4,)), L.Dense(2)])
    with pytest.raises(ste.errors.ParameterError, match="unknown scheme") as raised:
        ste.quantize_model(model, scheme=scheme)
    assert meant in str(raised.value) and "'binary', 'cluster_preserve', 'int8'" in str(raised.value)
    with pytest.raises(ste.errors.ParameterError, match=r"ste\.qat\.quantize_apply: unknown scheme"):
        ste.qat.quantize_apply(ste.qat.quantize_annotate_model(model), scheme=scheme)


def test_an_unknown_scheme_with_nothing_close_lists_the_names():
    with pytest.raises(ste.errors.ParameterError, match=r"unknown scheme 'float16'; expected one of \[") as raised:
        ste.quantize_model(keras.Sequential([keras.Input((4,)), L.Dense(2)]), scheme="float16")
    assert "Did you mean" not in str(raised.value)


def test_errors_for_bad_arguments():
    with pytest.raises(ste.errors.ParameterError, match="unknown scheme"):
        ste.quantize_model(residual_net(), scheme="int7")
    with pytest.raises(ste.errors.NotBuiltError, match="not built"):
        ste.quantize_model(keras.Sequential([L.Dense(2)]))
    with pytest.raises(ste.errors.ParameterError):
        ste.qat.quantize_annotate_layer("dense")


def train(model: keras.Model, x: np.ndarray, y: np.ndarray, epochs: int) -> None:
    model.fit(x, y, epochs=epochs, batch_size=16, shuffle=False, verbose=0)


def test_save_load_and_resumed_training_equal_uninterrupted(tmp_path):
    x, y = data()
    q = ste.quantize_model(residual_net(dropout=0.0))  # no random op: both runs see the same steps
    q.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    train(q, x, y, 1)
    path = tmp_path / "qat.keras"
    q.save(path)
    loaded = keras.models.load_model(path)  # plain `import ste`
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), q.predict(x, verbose=0))
    train(q, x, y, 1)
    train(loaded, x, y, 1)
    for a, b in zip(q.weights, loaded.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6, err_msg=a.path)


def test_quantize_scope_loads_class_names_without_package():
    config = keras.saving.serialize_keras_object(ste.qat.ActivationFakeQuant(name="q"))
    config.pop("module", None)
    config["registered_name"] = "ActivationFakeQuant"
    with ste.qat.quantize_scope():
        layer = keras.saving.deserialize_keras_object(config)
    assert isinstance(layer, ste.qat.ActivationFakeQuant)


@pytest.mark.parametrize("jit", [False, True])
def test_training_step_runs_under_tf_function_and_xla(jit):
    q = ste.quantize_model(residual_net())
    q.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=jit)
    x, y = data()
    history = q.fit(x, y, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    quantizer = q.layers[1]
    assert float(quantizer.min.numpy()) > -6.0  # the moving average moved towards the batch's min(x, 0) = 0


def test_mixed_float16_fake_quantizes_in_float16():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = residual_net()
        q = ste.quantize_model(model)
        seen = []
        original = ste.qat._quantizers.fake_quant_op

        def spy(x, *args, **kwargs):
            seen.append(x.dtype)
            return original(x, *args, **kwargs)

        ste.qat._quantizers.fake_quant_op = spy
        try:
            q(data(4)[0], training=True)
        finally:
            ste.qat._quantizers.fake_quant_op = original
        assert seen[0] == tf.float32  # the model's float32 input
        assert set(seen[1:]) == {tf.float16}  # every activation and kernel in the compute dtype
    finally:
        keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("rank", [1, 2])
def test_split_separable_conv_without_quantizers_is_kerass_separable_conv(rank, tmp_path):
    shape = (9, 4) if rank == 1 else (9, 9, 4)
    cls = L.SeparableConv1D if rank == 1 else L.SeparableConv2D
    i = keras.Input(shape)
    model = keras.Model(i, cls(5, 3, strides=2, depth_multiplier=2, padding="same", activation="relu")(i))
    q = ste.quantize_model(model, strict=True)
    split = q.layers[2]
    assert type(split).__name__ == f"SplitSeparableConv{rank}D"
    x = np.random.default_rng(1).normal(size=(3, *shape)).astype(np.float32)
    bare = type(split).from_config(
        {**split.get_config(), "depthwise_quantizer": None, "pointwise_quantizer": None, "intermediate_quantizer": None}
    )
    bare(x)
    bare.set_weights(model.layers[1].get_weights())
    np.testing.assert_allclose(bare(x), model(x), rtol=1e-5, atol=1e-6)
    # quantized: the kernels on their int8 grids, the depthwise output on its activation grid (fresh range [-6, 6])
    layer = model.layers[1]
    dw, pw = layer.depthwise_kernel.numpy(), layer.pointwise_kernel.numpy()
    if rank == 2:
        m_dw, m_pw = np.abs(dw).max(axis=(0, 1)), np.abs(pw).max(axis=(0, 1, 2))
    else:
        m_dw, m_pw = np.abs(dw).max(), np.abs(pw).max()
    dw_q = np.round(dw / (m_dw / 127)) * (m_dw / 127)
    pw_q = np.round(pw / (m_pw / 127)) * (m_pw / 127)
    kernels = split.quantized_kernels
    np.testing.assert_allclose(kernels["depthwise_kernel"], dw_q, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(kernels["pointwise_kernel"], pw_q, rtol=1e-5, atol=1e-7)
    q.save(tmp_path / "separable.keras")
    loaded = keras.models.load_model(tmp_path / "separable.keras")
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), q.predict(x, verbose=0))


def test_conv2d_transpose_kernel_per_tensor_and_relu_after_its_output_quantizer():
    i = keras.Input((4, 4, 3))
    model = keras.Model(i, L.Conv2DTranspose(5, 3, strides=2, activation="relu")(i))
    q = ste.quantize_model(model, strict=True)
    assert kinds(q) == [
        "InputLayer",
        "ActivationFakeQuant",
        "QuantConv2DTranspose",
        "ActivationFakeQuant",  # the linear output: TFLite's TRANSPOSE_CONV, then an int8 RELU
        "Activation",
        "ActivationFakeQuant",
    ]
    w = model.layers[1].kernel.numpy()
    step = np.abs(w).max() / 127
    np.testing.assert_allclose(q.layers[2].quantized_kernel, np.round(w / step) * step, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_folded_training_step_in_every_float_dtype_normalizes_with_the_batch_statistics(dtype):
    """Training-mode output and moving statistics of a FoldedConv2D in each dtype, against float64 convolution and
    the batch's mean and biased variance (numpy); a pure float16 or float64 layer used to fail on the moving
    update (float32 statistics added to float16/float64 variables)."""
    layer = ste.qat.FoldedConv2D(4, 3, kernel_quantizer=None, dtype=dtype, batch_norm={"momentum": 0.5})
    x = tf.cast(np.random.default_rng(0).normal(size=(4, 6, 6, 3)), dtype)
    y = layer(x, training=True)
    assert y.dtype == tf.as_dtype(dtype)
    as64 = lambda t: np.asarray(tf.cast(t, tf.float64))  # noqa: E731
    z = tf.nn.conv2d(as64(x), as64(layer.kernel), 1, "VALID").numpy() + as64(layer.bias)
    mean, variance = z.mean(axis=(0, 1, 2)), z.var(axis=(0, 1, 2))
    gamma, beta, epsilon = as64(layer.gamma), as64(layer.beta), layer.batch_norm["epsilon"]
    reference = gamma * (z - mean) / np.sqrt(variance + epsilon) + beta
    tolerance = {"float16": 2e-2, "bfloat16": 1.2e-1, "float32": 1e-4, "float64": 1e-9}[dtype]
    np.testing.assert_allclose(as64(y), reference, atol=tolerance)
    np.testing.assert_allclose(as64(layer.moving_mean), 0.5 * mean, atol=tolerance)
    np.testing.assert_allclose(as64(layer.moving_variance), 0.5 + 0.5 * variance, rtol=tolerance)
