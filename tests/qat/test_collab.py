"""Collaborative optimization: pruning-preserving (PQAT), cluster-preserving (CQAT) and both (PCQAT) QAT.

References: numpy of the masked and centroid-gather forward and of one SGD update, and the int8 kernels the TFLite
interpreter reads from the converted model.
"""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
from tests.qat.helpers import interpreter, numpy_fake_quant

L = keras.layers
KINDS = ["prune_preserve", "cluster_preserve", "prune_cluster_preserve"]
DTYPES = ["float16", "bfloat16", "float32", "float64"]
CENTROIDS = np.array([-0.5, -0.125, 0.25, 0.625])  # exact in every float dtype
PC_CENTROIDS = np.array([-0.5, 0.25, 0.625])  # with 0: four values


def crafted(shape: tuple[int, ...], kind: str, seed: int) -> np.ndarray:
    """A kernel as pruning (half zeros), clustering (four values) or both left it."""
    rng = np.random.default_rng(seed)
    if kind == "prune_preserve":
        kernel = rng.normal(0, 0.3, shape)
        kernel[rng.random(shape) < 0.5] = 0.0
        return kernel
    if kind == "cluster_preserve":
        return CENTROIDS[rng.integers(0, 4, shape)]
    kernel = PC_CENTROIDS[rng.integers(0, 3, shape)]
    kernel[rng.random(shape) < 0.5] = 0.0
    return kernel


def net(kind: str, dtype: str | None = "float32", batch_norm: bool = False) -> keras.Model:
    """A small CNN with crafted kernels; ``dtype=None``: the global policy's."""
    layers: list[keras.layers.Layer] = [L.Conv2D(6, 3, dtype=dtype, name="conv")]
    if batch_norm:
        layers.append(L.BatchNormalization(dtype=dtype, name="bn"))
    layers += [L.ReLU(dtype=dtype), L.Flatten(dtype=dtype), L.Dense(16, dtype=dtype, name="dense")]
    model = keras.Sequential([keras.Input((6, 6, 3)), *layers])
    for seed, name in enumerate(("conv", "dense")):
        layer = model.get_layer(name)
        layer.kernel.assign(crafted(tuple(layer.kernel.shape), kind, seed).astype(layer.kernel.dtype))
    return model


def data(n: int = 32) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    return rng.normal(size=(n, 6, 6, 3)).astype("float32"), rng.integers(0, 16, n)


def fit(model: keras.Model, epochs: int = 3, jit: bool = False, lr: float = 0.05) -> None:
    x, y = data()
    model.compile(
        keras.optimizers.SGD(lr, momentum=0.9),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=jit,
    )
    model.fit(x, y, batch_size=8, epochs=epochs, verbose=0)


def distinct(values: np.ndarray) -> int:
    return int(np.unique(np.asarray(values, np.float64)).size)


def channel_counts(kernel: np.ndarray, axis: int) -> list[int]:
    moved = np.moveaxis(np.asarray(kernel, np.float64), axis, 0)
    return [distinct(channel) for channel in moved]


# -- the quantizer against numpy ------------------------------------------------------------------------------------


def numpy_reference(w: np.ndarray, mask, centroids, dy: np.ndarray):
    """The kernel the constraints read, its fake quantization, and the gradients of sum(dy · q(w))."""
    read, index = w, None
    if centroids is not None:
        index = np.argmin(np.abs(w[..., None] - centroids), axis=-1)  # the first centroid on a tie
        read = centroids[index]
    if mask is not None:
        read = read * mask
    m = np.abs(read).max()
    quantized, _, _ = numpy_fake_quant(read, -m, m, bits=8, narrow_range=True)
    dw = dy * (1.0 if mask is None else mask)  # fake quantization passes dy; the mask stops it
    dc = None
    if centroids is not None:
        dc = np.array([dw[index == j].sum() for j in range(centroids.size)])
    return read, quantized, dw, dc


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS)
def test_quantizer_forward_gradients_and_sgd_update_match_numpy(kind, dtype):
    rng = np.random.default_rng(3)
    stripped = crafted((5, 7), kind, seed=1)
    mask = None if kind == "cluster_preserve" else (stripped != 0).astype(np.float64)
    centroids = {"prune_preserve": None, "cluster_preserve": CENTROIDS, "prune_cluster_preserve": PC_CENTROIDS}[kind]
    # latent weights after some training: off their centroids, the pruned ones too
    w = (stripped + rng.normal(0, 0.05, stripped.shape)).astype(dtype).astype(np.float64)
    dy = rng.normal(size=stripped.shape).astype(dtype).astype(np.float64)
    clusters = 0 if centroids is None else centroids.size
    q = ste.qat.PreservingWeightFakeQuant(sparsity=mask is not None, clusters=clusters)
    q.build(stripped.shape)
    q.initialize(mask, centroids, stripped)
    variable = keras.Variable(w.astype(dtype), dtype=dtype)
    with tf.GradientTape() as tape:
        out = q(variable.value, training=True)
        loss = tf.reduce_sum(tf.cast(out, tf.float64) * dy)
    trainables = [variable, *q.trainable_variables]
    grads = tape.gradient(loss, [v.value for v in trainables])
    read, quantized, dw, dc = numpy_reference(w, mask, centroids, dy)
    got = np.asarray(out, np.float64)
    assert out.dtype == dtype
    if mask is not None:
        assert np.all(got[mask == 0] == 0)
    if centroids is not None:
        assert distinct(got) <= 4
    # the constrained kernel is exact (a gather and a 0/1 mask); fake quantization rounds in the dtype
    np.testing.assert_array_equal(np.asarray(q.constrained(variable.value, training=True), np.float64), read)
    # outside training the indices of the last training call are read: the same kernel
    np.testing.assert_array_equal(np.asarray(q(variable.value), np.float64), got)
    tolerance = {"float16": 2e-3, "bfloat16": 2e-2}.get(dtype, 1e-6)
    np.testing.assert_allclose(got, quantized, atol=tolerance * np.abs(quantized).max())
    np.testing.assert_allclose(np.asarray(grads[0], np.float64), dw, rtol=0, atol=0)  # a 0/1 mask: exact
    if centroids is not None:
        np.testing.assert_allclose(np.asarray(grads[1], np.float64), dc, rtol=tolerance * 10, atol=tolerance * 10)
    # one SGD step: w − lr·dw, c − lr·dc
    lr = 0.5
    before_c = None if centroids is None else np.asarray(q.cluster_centroids.numpy(), np.float64)
    keras.optimizers.SGD(lr).apply(grads, trainables)
    expected_w = (w - lr * dw).astype(dtype).astype(np.float64)
    np.testing.assert_allclose(np.asarray(variable.numpy(), np.float64), expected_w, rtol=tolerance, atol=tolerance)
    if mask is not None:
        np.testing.assert_array_equal(np.asarray(variable.numpy(), np.float64)[mask == 0], w[mask == 0])
    if centroids is not None:
        np.testing.assert_allclose(q.cluster_centroids.numpy(), before_c - lr * dc, rtol=1e-5, atol=tolerance * 10)


def test_quantizer_gradient_under_xla_equals_eager():
    stripped = crafted((4, 6), "prune_cluster_preserve", seed=2)
    q = ste.qat.PreservingWeightFakeQuant(sparsity=True, clusters=3)
    q.build(stripped.shape)
    q.initialize((stripped != 0).astype(np.float64), PC_CENTROIDS, stripped)
    w = tf.constant(stripped + 0.01, tf.float32)
    dy = tf.constant(np.random.default_rng(0).normal(size=stripped.shape), tf.float32)

    def grads(w):
        with tf.GradientTape() as tape:
            tape.watch(w)
            loss = tf.reduce_sum(q(w, training=True) * dy)
        return tape.gradient(loss, [w, q.cluster_centroids.value])

    eager = grads(w)
    for jit in (False, True):
        compiled = tf.function(grads, jit_compile=jit)(w)
        for a, b in zip(eager, compiled):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)


# -- models: training keeps the structure ---------------------------------------------------------------------------


def check_kept(q: keras.Model, float_model: keras.Model, kind: str) -> None:
    """Zeros at the stripped model's zeros (latent and read kernels), and at most 4 values per quantization range."""
    for name, channel_axis in (("conv", -1), ("dense", None)):
        stripped = np.asarray(float_model.get_layer(name).kernel.numpy(), np.float64)
        layer = q.get_layer(name)
        read = np.asarray(layer.quantized_kernel, np.float64)
        if kind != "cluster_preserve":
            zeros = stripped == 0
            assert zeros.any()
            assert np.all(read[zeros] == 0), name
            assert np.all(np.asarray(layer.kernel.numpy(), np.float64)[zeros] == 0), name
        if kind != "prune_preserve":
            quantizer = layer.kernel_quantizer
            for training in (False, True):
                assert distinct(np.asarray(quantizer.constrained(layer.kernel.value, training), np.float64)) <= 4
            if channel_axis is None:
                assert distinct(read) <= 4, name
            else:
                assert max(channel_counts(read, channel_axis)) <= 4, name


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS)
def test_training_keeps_zeros_and_clusters_in_every_dtype(kind, dtype):
    model = net(kind, dtype)
    q = ste.quantize_model(model, scheme=kind)
    conv = q.get_layer("conv")
    assert isinstance(conv.kernel_quantizer, ste.qat.PreservingWeightFakeQuant)
    start = {id(v): v.numpy().copy() for v in q.trainable_variables}
    fit(q)
    check_kept(q, model, kind)
    moved = [v.path for v in q.trainable_variables if not np.array_equal(start[id(v)], v.numpy())]
    assert any("kernel" in path for path in moved)
    if kind != "prune_preserve":
        assert any("cluster_centroids" in path for path in moved)  # the centroids learn


@pytest.mark.parametrize("jit", [False, True])
def test_training_under_tf_function_and_xla_keeps_the_structure(jit):
    model = net("prune_cluster_preserve")
    q = ste.quantize_model(model, scheme=ste.qat.Default8BitClusterPreserveQuantizeScheme(preserve_sparsity=True))
    fit(q, jit=jit)
    check_kept(q, model, "prune_cluster_preserve")


def test_save_load_keeps_centroids_mask_and_outputs(tmp_path):
    model = net("prune_cluster_preserve")
    q = ste.quantize_model(model, scheme="prune_cluster_preserve")
    fit(q, epochs=1)
    path = tmp_path / "pcqat.keras"
    q.save(path)
    loaded = keras.models.load_model(path)
    x, _ = data(8)
    np.testing.assert_array_equal(q.predict(x, verbose=0), loaded.predict(x, verbose=0))
    for name in ("conv", "dense"):
        a, b = q.get_layer(name).kernel_quantizer, loaded.get_layer(name).kernel_quantizer
        assert isinstance(b, ste.qat.PreservingWeightFakeQuant) and (b.sparsity, b.clusters) == (True, 3)
        np.testing.assert_array_equal(a.cluster_centroids.numpy(), b.cluster_centroids.numpy())
        np.testing.assert_array_equal(a.sparsity_mask.numpy(), b.sparsity_mask.numpy())
    fit(loaded, epochs=1)
    check_kept(loaded, model, "prune_cluster_preserve")


def test_batch_norm_is_folded_and_keeps_zeros_and_per_channel_clusters():
    model = net("prune_preserve", batch_norm=True)
    q = ste.quantize_model(model, scheme="prune_preserve")
    assert isinstance(q.get_layer("conv"), ste.qat.FoldedConv2D)
    fit(q, epochs=1)
    zeros = model.get_layer("conv").kernel.numpy() == 0
    assert np.all(q.get_layer("conv").quantized_kernel.numpy()[zeros] == 0)  # the folded kernel W·s
    clustered = net("cluster_preserve", batch_norm=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # folded: no batch norm left uncovered
        q = ste.quantize_model(clustered, scheme="cluster_preserve")
    assert isinstance(q.get_layer("conv"), ste.qat.FoldedConv2D)
    fit(q, epochs=1)
    # the folded kernel constrained(W)·s: at most 4 values in each output channel (its own factor s)
    assert max(channel_counts(q.get_layer("conv").quantized_kernel.numpy(), -1)) <= 4


def test_layers_without_structure_are_quantized_as_int8():
    model = net("cluster_preserve")
    model.get_layer("dense").kernel.assign(np.random.default_rng(0).normal(size=(96, 16)).astype("float32"))
    q = ste.quantize_model(model, scheme="cluster_preserve")
    assert isinstance(q.get_layer("conv").kernel_quantizer, ste.qat.PreservingWeightFakeQuant)
    assert type(q.get_layer("dense").kernel_quantizer) is ste.qat.WeightFakeQuant


# -- the int8 TFLite model ------------------------------------------------------------------------------------------


def int8_kernels(flatbuffer: bytes) -> dict[str, np.ndarray]:
    """The int8 filter of each CONV_2D and FULLY_CONNECTED op, as the interpreter holds it."""
    it = interpreter(flatbuffer)
    found = {}
    names = {op["op_name"] for op in it._get_ops_details()}
    assert not names & {"ARG_MIN", "GATHER", "MUL"}, names  # the constraints are folded into the kernels
    for op in it._get_ops_details():
        if op["op_name"] in ("CONV_2D", "FULLY_CONNECTED"):
            detail = it.get_tensor_details()[op["inputs"][1]]
            assert detail["dtype"] == np.int8
            found[op["op_name"]] = it.get_tensor(op["inputs"][1]).copy()
    return found


def check_int8(flatbuffer: bytes, float_model: keras.Model, kind: str) -> None:
    kernels = int8_kernels(flatbuffer)
    conv = kernels["CONV_2D"]  # (out, h, w, in): one scale per output channel
    dense = kernels["FULLY_CONNECTED"]  # (out, in): one scale
    stripped_conv = np.transpose(float_model.get_layer("conv").kernel.numpy(), (3, 0, 1, 2))
    stripped_dense = float_model.get_layer("dense").kernel.numpy().T
    if kind != "cluster_preserve":
        assert np.all(conv[stripped_conv == 0] == 0) and np.all(dense[stripped_dense == 0] == 0)
    if kind != "prune_preserve":
        assert max(channel_counts(conv, 0)) <= 4
        assert distinct(dense) <= 4


@pytest.mark.parametrize("kind", ["prune_preserve", "cluster_preserve"])
def test_int8_tflite_keeps_zeros_and_clusters(kind):
    model = net(kind)
    q = ste.quantize_model(model, scheme=kind)
    fit(q, epochs=2)
    check_int8(ste.to_tflite(q), model, kind)


def test_pcqat_from_ste_pruning_and_clustering_to_int8_tflite():
    """The user's path: prune, strip, cluster keeping the zeros, strip, PCQAT, fine-tune, int8."""
    S, C = ste.sparsity, ste.clustering
    x, y = data()
    model = net("prune_preserve")
    model.get_layer("dense").kernel.assign(np.random.default_rng(1).normal(0, 0.2, (96, 16)).astype("float32"))
    pruned = S.prune_low_magnitude(model, S.ConstantSparsity(0.5, 0, frequency=1))
    pruned.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    pruned.fit(x, y, epochs=1, verbose=0, callbacks=[S.UpdatePruningStep()])
    clustered = C.cluster_weights(S.strip_pruning(pruned), number_of_clusters=4, preserve_sparsity=True)
    clustered.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    clustered.fit(x, y, epochs=1, verbose=0)
    stripped = C.strip_clustering(clustered)
    q = ste.quantize_model(stripped, scheme=ste.qat.Default8BitClusterPreserveQuantizeScheme(preserve_sparsity=True))
    fit(q, epochs=2, lr=0.02)
    check_kept(q, stripped, "prune_cluster_preserve")
    check_int8(ste.to_tflite(q), stripped, "prune_cluster_preserve")


# -- names and refusals ---------------------------------------------------------------------------------------------


def test_scheme_names_and_tfmot_names():
    assert {"prune_preserve", "cluster_preserve", "prune_cluster_preserve"} <= set(ste.qat.schemes())
    assert ste.qat.Default8BitPrunePreserveQuantizeScheme is ste.qat.PrunePreserveScheme
    assert ste.qat.Default8BitClusterPreserveQuantizeScheme is ste.qat.ClusterPreserveScheme
    assert ste.qat.ClusterPreserveScheme(preserve_sparsity=True).name == "prune_cluster_preserve"
    assert isinstance(ste.qat.PrunePreserveScheme(), ste.qat.Scheme)


def weights_of(model: keras.Model) -> list[np.ndarray]:
    return [w.copy() for w in model.get_weights()]


@pytest.mark.parametrize(
    ("kind", "scheme", "fix"),
    [
        ("dense", "cluster_preserve", "ste.clustering.cluster_weights"),  # never clustered
        ("cluster_preserve", "prune_cluster_preserve", "preserve_sparsity=False"),  # clustered, no zeros
        ("dense", "prune_preserve", "ste.sparsity.prune_low_magnitude"),  # no zeros
        ("prune_preserve", "cluster_preserve", "ste.clustering.cluster_weights"),  # pruned only
    ],
)
def test_nothing_to_preserve_is_refused_with_the_fix(kind, scheme, fix):
    if kind == "dense":
        model = net("cluster_preserve")
        rng = np.random.default_rng(0)
        for layer in (model.get_layer("conv"), model.get_layer("dense")):
            layer.kernel.assign(rng.normal(size=layer.kernel.shape).astype("float32"))
    else:
        model = net(kind)
    before = weights_of(model)
    with pytest.raises(ste.errors.ParameterError, match="Fix:") as caught:
        ste.quantize_model(model, scheme=scheme)
    assert fix in str(caught.value)
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_unstripped_wrappers_and_bad_arguments_are_refused():
    S = ste.sparsity
    pruned = S.prune_low_magnitude(net("prune_preserve"), S.ConstantSparsity(0.5, 0))
    with pytest.raises(ste.errors.ParameterError, match="strip_pruning"):
        ste.quantize_model(pruned, scheme="prune_preserve")
    clustered = ste.clustering.cluster_weights(net("prune_preserve"), number_of_clusters=3)
    with pytest.raises(ste.errors.ParameterError, match="strip_clustering"):
        ste.quantize_model(clustered, scheme="cluster_preserve")
    with pytest.raises(ste.errors.ParameterError, match="preserve_sparsity"):
        ste.qat.ClusterPreserveScheme(preserve_sparsity="yes")
    with pytest.raises(ste.errors.ParameterError, match="clusters"):
        ste.qat.PreservingWeightFakeQuant(clusters=-1)


def test_no_warning_on_a_clean_pqat_model():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ste.quantize_model(net("prune_preserve"), scheme="prune_preserve")


def test_mixed_float16_training_and_int8_export_keep_the_structure():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = net("prune_cluster_preserve", dtype=None)
        q = ste.quantize_model(model, scheme="prune_cluster_preserve")
        assert q.get_layer("conv").compute_dtype == "float16"
        assert q.get_layer("conv").kernel_quantizer.cluster_centroids.dtype == "float32"
        fit(q, epochs=1)
        check_kept(q, model, "prune_cluster_preserve")
        flatbuffer = ste.to_tflite(q)  # exported as a float32 copy with the same variables
    finally:
        keras.mixed_precision.set_global_policy("float32")
    check_int8(flatbuffer, model, "prune_cluster_preserve")
