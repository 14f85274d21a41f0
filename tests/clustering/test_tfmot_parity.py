"""``ste.clustering`` against independent references: TFMOT 0.8.1 run on tf-keras (its
outputs stored in tests/data/tfmot_cluster_parity.npz by tests/clustering/make_tfmot_parity.py), numpy written
here, and TensorFlow's own autodiff of ``tf.gather`` with a straight-through identity."""

from __future__ import annotations

import json
import os
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
from ste.clustering import (
    CentroidInitialization,
    ClusterableLayer,
    ClusterWeights,
    cluster_scope,
    cluster_weights,
    initial_centroids,
    strip_clustering,
)

L = keras.layers
DATA = Path(__file__).resolve().parents[1] / "data" / "tfmot_cluster_parity.npz"


@pytest.fixture(scope="module")
def tfmot() -> dict[str, np.ndarray]:
    with np.load(DATA) as data:
        return {key: data[key] for key in data.files}


# -- numpy references -----------------------------------------------------------------------------------------------


def np_assign(w: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest centroid, the first on a tie (numpy's argmin)."""
    index = np.argmin(np.abs(w[..., None].astype(np.float64) - c.astype(np.float64)), axis=-1)
    return c[index], index


def centroid_variable(wrapper: ClusterWeights, name: str = "kernel") -> keras.Variable:
    (found,) = [v for v in wrapper.weights if v.path.endswith(f"cluster_centroids_{name}")]
    return found


def wrappers_of(model: keras.Model) -> list[ClusterWeights]:
    return [la for la in model._flatten_layers(include_self=False) if isinstance(la, ClusterWeights)]


def plain_kernels(model: keras.Model) -> list[np.ndarray]:
    out = []
    for layer in model._flatten_layers(include_self=False):
        for attribute in ("kernel", "pointwise_kernel", "embeddings"):
            if isinstance(layer, (ClusterWeights, keras.Model)):
                continue
            if attribute in ("kernel",) and isinstance(layer, (L.SeparableConv1D, L.SeparableConv2D)):
                continue
            variable = getattr(layer, attribute, None)
            if isinstance(variable, keras.Variable):
                out.append(np.asarray(variable.numpy()))
    return out


def tflite_constants(flatbuffer: bytes) -> tuple[tf.lite.Interpreter, list[np.ndarray]]:
    interpreter = tf.lite.Interpreter(model_content=flatbuffer)
    interpreter.allocate_tensors()
    constants = []
    for detail in interpreter.get_tensor_details():
        try:
            constants.append(np.array(interpreter.get_tensor(detail["index"])))
        except ValueError:
            continue
    return interpreter, constants


# -- TFMOT 0.8.1 itself ---------------------------------------------------------------------------------------------

INIT_TENSORS = ("conv", "coarse", "positive_pruned", "two_sided")


def _init_keys() -> list[str]:
    with np.load(DATA) as data:
        return sorted(k for k in data.files if k.startswith("init|"))


@pytest.mark.parametrize("key", _init_keys())
def test_initial_centroids_equal_tfmot_s_own(tfmot, key: str) -> None:
    _, tensor, method, k, preserve = key.split("|")
    w = tfmot[f"w_{tensor}"]
    got = initial_centroids(
        tf.constant(w), int(k), CentroidInitialization[method], preserve_sparsity=preserve == "True"
    )
    got = np.asarray(got)
    assert got.dtype == np.float32 and got.shape == (int(k),)
    if method == "KMEANS_PLUS_PLUS" and int(k) > np.unique(w).size:
        # More centroids than distinct weights: after drawing every distinct weight, TensorFlow's k-means++ kernel
        # draws among zero distances, which is not reproducible from run to run (in TFMOT as well). Every distinct
        # weight is drawn, and only weights are.
        np.testing.assert_array_equal(np.unique(got), np.unique(w))
        return
    # The order of the centroids does not change any weight's value, so they are compared as sorted multisets.
    np.testing.assert_allclose(np.sort(got), np.sort(tfmot[key]), rtol=1e-5, atol=1e-6)


MODEL_CASES = {
    "linear4": ("LINEAR", 4, "SUM", False),
    "kmeans5": ("KMEANS_PLUS_PLUS", 5, "SUM", False),
    "density6": ("DENSITY_BASED", 6, "SUM", False),
    "linear4avg": ("LINEAR", 4, "AVG", False),
    "sparse5": ("KMEANS_PLUS_PLUS", 5, "SUM", True),
    "sparselinear4": ("LINEAR", 4, "SUM", True),
}


@pytest.mark.parametrize("case", list(MODEL_CASES))
def test_three_sgd_steps_and_strip_equal_tfmot(tfmot, case: str) -> None:
    """The same two-Dense model, clustered, trained three full-batch SGD steps by hand, then stripped: TFMOT's
    outputs, trained centroids, stripped kernels and biases, and the stripped layers' classes and names."""
    method, k, aggregation, preserve = MODEL_CASES[case]
    x, y = tfmot[f"{case}|x"], tfmot[f"{case}|y"]
    model = keras.Sequential([keras.Input((6,)), L.Dense(10, activation="tanh", name="d1"), L.Dense(3, name="d2")])
    model.layers[0].kernel.assign(tfmot[f"{case}|d1|kernel0"])
    model.layers[1].kernel.assign(tfmot[f"{case}|d2|kernel0"])
    rng = np.random.default_rng(11)  # the biases of make_tfmot_parity.model_weights
    rng.normal(0, 0.5, (6, 10)), rng.normal(0, 0.5, (10, 3))
    model.layers[0].bias.assign(rng.normal(0, 0.1, (10,)).astype(np.float32))
    model.layers[1].bias.assign(rng.normal(0, 0.1, (3,)).astype(np.float32))
    clustered = cluster_weights(model, k, method, preserve_sparsity=preserve, cluster_gradient_aggregation=aggregation)
    np.testing.assert_allclose(clustered(x, training=False), tfmot[f"{case}|out0"], rtol=1e-5, atol=1e-6)
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(clustered(x, training=True) - y))
        variables = clustered.trainable_variables
        for v, g in zip(variables, tape.gradient(loss, variables)):
            v.assign_sub(0.05 * tf.convert_to_tensor(g))
    for wrapper in wrappers_of(clustered):
        got = np.sort(np.asarray(centroid_variable(wrapper).numpy()))
        want = np.sort(tfmot[f"{case}|{wrapper.layer.name}|centroids3"])
        if preserve:  # TFMOT pins its zero centroid at the next call, not after the step: compare the others
            got, want = np.delete(got, np.argmin(np.abs(got))), np.delete(want, np.argmin(np.abs(want)))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    stripped = strip_clustering(clustered)
    assert [[type(la).__name__, la.name] for la in stripped.layers] == json.loads(str(tfmot[f"{case}|layers"]))
    for layer in stripped.layers:
        np.testing.assert_allclose(layer.kernel.numpy(), tfmot[f"{case}|{layer.name}|kernel3"], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(layer.bias.numpy(), tfmot[f"{case}|{layer.name}|bias3"], rtol=1e-4, atol=1e-5)
        assert np.unique(layer.kernel.numpy()).size <= k
        if preserve:
            kernel0 = tfmot[f"{case}|{layer.name}|kernel0"]
            assert np.all(layer.kernel.numpy()[kernel0 == 0] == 0)
    np.testing.assert_allclose(stripped(x), tfmot[f"{case}|out3"], rtol=1e-4, atol=1e-5)


# -- gradients and reassignment against numpy -----------------------------------------------------------------------


@pytest.mark.parametrize("aggregation", ["SUM", "AVG"])
def test_dense_gradients_are_numpy_s_sum_of_members_and_straight_through(aggregation: str) -> None:
    rng = np.random.default_rng(5)
    layer = L.Dense(7, use_bias=False)
    layer.build((None, 9))
    layer.kernel.assign(rng.normal(size=(9, 7)).astype(np.float32))
    wrapper = cluster_weights(layer, 6, "LINEAR", cluster_gradient_aggregation=aggregation)
    layer = wrapper.layer  # a copy: the layer given is never changed
    x = rng.normal(size=(4, 9)).astype(np.float32)
    dy = rng.normal(size=(4, 7)).astype(np.float32)
    wrapper(x)
    centroids = centroid_variable(wrapper)
    with tf.GradientTape() as tape:
        y = wrapper(x)
    g_w, g_c = tape.gradient(y, [layer.kernel, centroids], output_gradients=dy)

    w = layer.kernel.numpy().astype(np.float64)
    c = np.linspace(w.min(), w.max(), 6)
    clustered, index = np_assign(w, c)
    np.testing.assert_allclose(y, x @ clustered, rtol=1e-5, atol=1e-5)
    g_kernel = x.T.astype(np.float64) @ dy
    counts = np.bincount(index.ravel(), minlength=6)
    sums = np.array([g_kernel[index == j].sum() for j in range(6)])
    expected_c = sums if aggregation == "SUM" else np.where(counts > 0, sums / np.maximum(counts, 1), 0.0)
    np.testing.assert_allclose(tf.convert_to_tensor(g_w), g_kernel, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(g_c, expected_c, rtol=1e-5, atol=1e-5)


def test_embedding_gradients_are_numpy_s() -> None:
    rng = np.random.default_rng(6)
    layer = L.Embedding(12, 3)
    layer.build((None, 5))
    layer.embeddings.assign(rng.normal(size=(12, 3)).astype(np.float32))
    wrapper = cluster_weights(layer, 4, "LINEAR")
    layer = wrapper.layer  # a copy: the layer given is never changed
    ids = np.array([[1, 1, 4, 11, 0], [4, 4, 4, 2, 7]])
    dy = rng.normal(size=(2, 5, 3)).astype(np.float32)
    wrapper(ids)
    centroids = centroid_variable(wrapper, "embeddings")
    with tf.GradientTape() as tape:
        y = wrapper(ids)
    g_w, g_c = tape.gradient(y, [layer.embeddings, centroids], output_gradients=dy)
    w = layer.embeddings.numpy()
    clustered, index = np_assign(w, np.linspace(w.min(), w.max(), 4))
    np.testing.assert_allclose(y, clustered[ids], rtol=1e-6)
    g_table = np.zeros((12, 3))
    np.add.at(g_table, ids, dy)
    np.testing.assert_allclose(tf.convert_to_tensor(g_w), g_table, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g_c, [g_table[index == j].sum() for j in range(4)], rtol=1e-5, atol=1e-5)


def test_every_call_reassigns_each_weight_to_its_nearest_centroid() -> None:
    layer = L.Dense(3, use_bias=False)
    layer.build((None, 2))
    layer.kernel.assign(np.array([[-1.0, -0.5, 0.0], [0.4, 0.9, 1.0]], np.float32))
    wrapper = cluster_weights(layer, 3, "LINEAR")  # centroids -1, 0, 1
    layer = wrapper.layer  # a copy: the layer given is never changed
    x = np.eye(2, dtype=np.float32)
    np.testing.assert_array_equal(wrapper(x), [[-1.0, -1.0, 0.0], [0.0, 1.0, 1.0]])  # -0.5 ties: the first
    centroids = centroid_variable(wrapper)
    layer.kernel.assign(np.array([[-0.2, 0.6, 0.45], [0.55, -0.9, 1.0]], np.float32))  # the latent weights move
    np.testing.assert_array_equal(wrapper(x), np_assign(layer.kernel.numpy(), centroids.numpy())[0])
    centroids.assign(np.array([-0.8, 0.5, 0.7], np.float32))  # and then the centroids
    expected = np_assign(layer.kernel.numpy(), centroids.numpy())[0]
    np.testing.assert_array_equal(wrapper(x), expected)
    np.testing.assert_array_equal(
        strip_clustering(keras.Sequential([keras.Input((2,)), wrapper])).layers[0].kernel.numpy(), expected
    )


def test_second_order_gradients_equal_autodiff_of_gather_with_an_identity() -> None:
    """Reference: y = w + stop_gradient(gather(c, index) - w) + (gather(c, index) - stop_gradient(...)), i.e. TF's
    own autodiff of the gather and the straight-through identity, with numpy's index."""
    rng = np.random.default_rng(8)
    layer = L.Dense(4, activation="tanh", use_bias=False, dtype="float64")
    layer.build((None, 5))
    layer.kernel.assign(rng.normal(size=(5, 4)))
    wrapper = cluster_weights(layer, 3, "LINEAR")
    layer = wrapper.layer  # a copy: the layer given is never changed
    x = tf.constant(rng.normal(size=(3, 5)))
    wrapper(x)
    centroids = centroid_variable(wrapper)
    _, index = np_assign(layer.kernel.numpy(), centroids.numpy())

    def reference(w, c, x):
        gathered = tf.gather(c, index)
        return tf.tanh(x @ (gathered + w - tf.stop_gradient(w)))

    def second(fn):
        with tf.GradientTape(persistent=True) as outer:
            with tf.GradientTape() as inner:
                inner.watch(x)
                y = fn()
                loss = tf.reduce_sum(y**2)
            g_x = inner.gradient(loss, x)
            score = tf.reduce_sum(g_x**2)
        return [tf.convert_to_tensor(g) for g in outer.gradient(score, [layer.kernel, centroids])]

    got = second(lambda: wrapper(x))
    want = second(lambda: reference(layer.kernel.value, centroids.value, x))
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-12)


# -- promises: distinct values through save, load, strip and TFLite -------------------------------------------------

#: Each layer kind of the docs' table: how to make it, its input shape (None: token ids), the weights it clusters.
ALL_LAYERS = {
    "Dense": (lambda: L.Dense(5), (6,), ("kernel",)),
    "EinsumDense": (lambda: L.EinsumDense("abc,cd->abd", output_shape=(None, 5)), (4, 6), ("kernel",)),
    "Conv1D": (lambda: L.Conv1D(3, 2), (6, 2), ("kernel",)),
    "Conv2D": (lambda: L.Conv2D(3, 2), (5, 5, 2), ("kernel",)),
    "Conv3D": (lambda: L.Conv3D(2, 2), (3, 3, 3, 2), ("kernel",)),
    "Conv1DTranspose": (lambda: L.Conv1DTranspose(3, 2), (5, 2), ("kernel",)),
    "Conv2DTranspose": (lambda: L.Conv2DTranspose(3, 2), (4, 4, 2), ("kernel",)),
    "Conv3DTranspose": (lambda: L.Conv3DTranspose(2, 2), (3, 3, 3, 2), ("kernel",)),
    "DepthwiseConv1D": (lambda: L.DepthwiseConv1D(2, depth_multiplier=3), (6, 2), ("kernel",)),
    "DepthwiseConv2D": (lambda: L.DepthwiseConv2D(2, depth_multiplier=3), (5, 5, 2), ("kernel",)),
    "SeparableConv1D": (lambda: L.SeparableConv1D(4, 2), (6, 3), ("depthwise_kernel", "pointwise_kernel")),
    "SeparableConv2D": (lambda: L.SeparableConv2D(4, 2), (5, 5, 3), ("depthwise_kernel", "pointwise_kernel")),
    "Embedding": (lambda: L.Embedding(10, 4), None, ("embeddings",)),
    **(
        {
            "ReversibleEmbedding": (lambda: L.ReversibleEmbedding(10, 4), None, ("embeddings",)),
            "ReversibleEmbedding-untied": (
                lambda: L.ReversibleEmbedding(10, 4, tie_weights=False),
                None,
                ("embeddings", "reverse_embeddings"),
            ),
        }
        if hasattr(L, "ReversibleEmbedding")  # Keras 3.13+
        else {}
    ),
}


def _input(name: str, shape, batch: int = 2):
    rng = np.random.default_rng(2)
    if shape is None:
        return rng.integers(0, 10, (batch, 3))
    return rng.normal(size=(batch, *shape)).astype(np.float32)


@pytest.mark.parametrize("name", list(ALL_LAYERS))
def test_every_documented_layer_kind_clusters_its_weight_as_numpy(name: str) -> None:
    make, shape, attributes = ALL_LAYERS[name]
    keras.utils.set_random_seed(1)
    inputs = keras.Input((3,), dtype="int32") if shape is None else keras.Input(shape)
    layer = make()
    model = keras.Model(inputs, layer(inputs))
    before = {v.path: v.numpy().copy() for v in model.weights}
    latent = {attribute: getattr(layer, attribute).numpy() for attribute in attributes}
    clustered = cluster_weights(model, 3, "LINEAR")
    assert len(wrappers_of(clustered)) == 1
    x = _input(name, shape)
    out = clustered(x)
    stripped = strip_clustering(clustered)
    np.testing.assert_allclose(stripped(x), out, rtol=1e-5, atol=1e-5)
    (plain,) = [la for la in stripped.layers if not isinstance(la, L.InputLayer)]
    assert type(plain) is type(layer) and plain.name == layer.name
    for attribute, w in latent.items():
        expected = np_assign(w, np.linspace(w.min(), w.max(), 3))[0]
        np.testing.assert_allclose(getattr(plain, attribute).numpy(), expected, rtol=1e-6)
    for v in plain.weights:  # every other weight (biases) is untouched
        if v.path.split("/")[-1] not in attributes:
            (match,) = [b for p, b in before.items() if p.split("/")[-1] == v.path.split("/")[-1]]
            np.testing.assert_array_equal(v.numpy(), match)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A functional model with a nested Sequential and a shared Dense, clustered to 5, fine-tuned, saved, loaded."""
    keras.utils.set_random_seed(3)
    shared = L.Dense(12, activation="relu", name="shared")
    inner = keras.Sequential([keras.Input((12,)), L.Dense(12, activation="relu", name="inner_dense")], name="inner")
    a = keras.Input((8, 8, 1))
    h = L.Conv2D(4, 2, activation="relu", name="conv")(a)
    h = L.SeparableConv2D(5, 3, activation="relu", name="sep")(h)
    h = L.Flatten()(h)
    h = L.Dense(12, name="d0")(h)
    h = shared(inner(shared(h)))
    model = keras.Model(a, L.Dense(2, name="head")(h))
    clustered = cluster_weights(model, 5)
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(64, 8, 8, 1)).astype(np.float32), rng.normal(size=(64, 2)).astype(np.float32)
    clustered.compile(keras.optimizers.Adam(0.01), "mse")
    clustered.fit(x, y, epochs=2, batch_size=16, verbose=0)
    path = os.path.join(tmp_path_factory.mktemp("cl"), "clustered.keras")
    clustered.save(path)
    loaded = keras.models.load_model(path)
    return clustered, loaded, x


def test_nested_and_shared_layers_are_wrapped_once_each(trained) -> None:
    clustered, _, _ = trained
    names = sorted(w.layer.name for w in wrappers_of(clustered))
    assert names == ["conv", "d0", "head", "inner_dense", "sep", "shared"]


def test_save_and_load_keep_outputs_and_at_most_k_values(trained) -> None:
    clustered, loaded, x = trained
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), clustered.predict(x, verbose=0))
    for wrapper in wrappers_of(loaded):
        for _variable, value in wrapper.clustered_values():
            assert np.unique(value.numpy()).size <= 5, wrapper.name


def test_strip_of_a_loaded_model_then_float_tflite_keep_at_most_k_values(trained, tmp_path) -> None:
    _, loaded, x = trained
    stripped = strip_clustering(loaded)
    assert not wrappers_of(stripped)
    names = sorted(la.name for la in stripped._flatten_layers(include_self=False))
    assert {"conv", "sep", "d0", "shared", "inner", "inner_dense", "head"} <= set(names)  # the original names
    np.testing.assert_allclose(stripped.predict(x, verbose=0), loaded.predict(x, verbose=0), rtol=1e-5, atol=1e-5)
    kernels = plain_kernels(stripped)
    assert len(kernels) == 6 and all(np.unique(k).size <= 5 for k in kernels)
    path = os.path.join(tmp_path, "stripped.keras")
    stripped.save(path)
    reloaded = keras.models.load_model(path)
    assert all(np.unique(k).size <= 5 for k in plain_kernels(reloaded))

    interpreter, constants = tflite_constants(ste.to_tflite(reloaded, optimizations=[]))
    # Kernels of 16 (conv), 20 (pointwise), 1500 (d0), 144 (shared, inner_dense) and 24 (head) values; the
    # unclustered depthwise kernel has 36, the biases fewer than 16.
    sizes = {k.size for k in kernels}
    assert sizes == {16, 20, 1500, 144, 24}
    big = [c for c in constants if c.size in sizes and c.dtype == np.float32]
    assert len(big) == 6
    assert all(np.unique(c).size <= 5 for c in big)
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x[:1])
    interpreter.invoke()
    out = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    np.testing.assert_allclose(out, stripped.predict(x[:1], verbose=0), rtol=1e-4, atol=1e-5)


def test_preserve_sparsity_zeros_survive_adam_save_load_strip_and_tflite(tmp_path) -> None:
    keras.utils.set_random_seed(5)
    model = keras.Sequential([keras.Input((10,)), L.Dense(16, name="a"), L.Dense(4, name="b")])
    masks = []
    for layer in model.layers:
        kernel = layer.kernel.numpy()
        kernel[np.abs(kernel) < np.quantile(np.abs(kernel), 0.6)] = 0.0
        layer.kernel.assign(kernel)
        masks.append(kernel == 0)
    clustered = cluster_weights(model, 6, preserve_sparsity=True)
    clustered.compile(keras.optimizers.Adam(0.05), "mse")
    rng = np.random.default_rng(0)
    clustered.fit(rng.normal(size=(32, 10)), rng.normal(size=(32, 4)), epochs=3, verbose=0)
    path = os.path.join(tmp_path, "sparse.keras")
    clustered.save(path)
    stripped = strip_clustering(keras.models.load_model(path))
    kernels = plain_kernels(stripped)
    for kernel, mask in zip(kernels, masks):
        assert np.all(kernel[mask] == 0) and np.unique(kernel).size <= 6
    _, constants = tflite_constants(ste.to_tflite(stripped, optimizations=[]))
    for kernel in kernels:
        (match,) = [c for c in constants if c.size == kernel.size and c.ndim == 2]
        assert np.sum(match == 0) == np.sum(kernel == 0) and np.unique(match).size <= 6


# -- cluster_scope --------------------------------------------------------------------------------------------------


class UserClusterableDense(L.Dense, ClusterableLayer):
    def get_clusterable_weights(self):
        return [("kernel", self.kernel)]


def test_cluster_scope_loads_a_custom_clusterable_layer(tmp_path) -> None:
    keras.utils.set_random_seed(6)
    inputs = keras.Input((4,))
    model = keras.Model(inputs, UserClusterableDense(6, name="mine")(inputs))
    clustered = cluster_weights(model, 3)
    x = np.random.default_rng(1).normal(size=(2, 4)).astype(np.float32)
    path = os.path.join(tmp_path, "custom.keras")
    clustered.save(path)
    with cluster_scope({"UserClusterableDense": UserClusterableDense}):
        loaded = keras.models.load_model(path)
    np.testing.assert_array_equal(loaded(x), clustered(x))
    stripped = strip_clustering(loaded)
    assert type(stripped.layers[-1]) is UserClusterableDense and np.unique(stripped.layers[-1].kernel.numpy()).size <= 3
    with cluster_scope():  # TFMOT's spelling, no arguments
        np.testing.assert_array_equal(
            keras.models.load_model(path, custom_objects={"UserClusterableDense": UserClusterableDense})(x),
            clustered(x),
        )


# -- dtypes, tf.function, XLA, strategies ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype",
    [
        "float16",
        "bfloat16",
        "float32",
        "float64",
    ],
)
def test_every_dtype_gives_the_same_kind_of_answer(dtype: str) -> None:
    layer = L.Dense(6, use_bias=False, dtype=dtype)
    layer.build((None, 8))
    w = np.random.default_rng(9).normal(size=(8, 6))
    layer.kernel.assign(w)
    wrapper = cluster_weights(layer, 4, "LINEAR")
    layer = wrapper.layer  # a copy: the layer given is never changed
    x = np.random.default_rng(10).normal(size=(3, 8))
    wrapper(x)
    centroids = centroid_variable(wrapper)
    assert centroids.dtype == dtype
    with tf.GradientTape() as tape:
        y = wrapper(x)
        loss = tf.reduce_sum(tf.cast(y, "float32"))
    g_w, g_c = tape.gradient(loss, [layer.kernel, centroids])
    assert y.dtype == dtype and g_w.dtype == dtype and g_c.dtype == dtype
    kernel = np.asarray(layer.kernel.numpy()).astype(np.float64)
    c = np.asarray(centroids.numpy()).astype(np.float64)
    np.testing.assert_allclose(np.sort(c), np.linspace(kernel.min(), kernel.max(), 4), rtol=1e-2, atol=1e-2)
    clustered, index = np_assign(kernel, c)
    g = np.outer(x.sum(0), np.ones(6))  # d sum(x @ w_c) / d w_c
    tol = {"float16": 2e-2, "bfloat16": 5e-2}.get(dtype, 1e-5)
    np.testing.assert_allclose(np.asarray(tf.cast(g_w, "float64")), g, rtol=tol, atol=tol)
    np.testing.assert_allclose(
        np.asarray(tf.cast(g_c, "float64")), [g[index == j].sum() for j in range(4)], rtol=tol, atol=tol * 4
    )
    np.testing.assert_allclose(np.asarray(tf.cast(y, "float64")), x @ clustered, rtol=tol * 2, atol=tol * 4)
    stripped = strip_clustering(keras.Sequential([keras.Input((8,)), wrapper]))
    assert stripped.layers[0].kernel.dtype == dtype and np.unique(stripped.layers[0].kernel.numpy()).size <= 4


def _sgd_steps(model, x, y, *, function: bool, jit: bool, steps: int = 2):
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        for v, g in zip(model.trainable_variables, tape.gradient(loss, model.trainable_variables)):
            v.assign_sub(0.1 * tf.convert_to_tensor(g))
        return loss

    run = tf.function(step, jit_compile=jit) if function else step
    for _ in range(steps):
        run()
    return [np.asarray(v.numpy()) for v in model.trainable_variables]


def _fresh(seed: int = 12) -> keras.Model:
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((5,)), L.Dense(8, activation="tanh"), L.Dense(2)])
    return cluster_weights(model, 4, "LINEAR")


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_tf_function_and_xla_train_as_eager(mode: str) -> None:
    rng = np.random.default_rng(13)
    x, y = tf.constant(rng.normal(size=(8, 5)), "float32"), tf.constant(rng.normal(size=(8, 2)), "float32")
    eager = _sgd_steps(_fresh(), x, y, function=False, jit=False)
    graph = _sgd_steps(_fresh(), x, y, function=True, jit=mode == "xla")
    for a, b in zip(eager, graph):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# -- bad input ------------------------------------------------------------------------------------------------------


def _model() -> keras.Model:
    keras.utils.set_random_seed(15)
    return keras.Sequential([keras.Input((3,)), L.Dense(2, name="small"), L.Dense(4, name="other")])


BAD = {
    "zero clusters": (lambda m: cluster_weights(m, 0), ("number_of_clusters", "0")),
    "negative clusters": (lambda m: cluster_weights(m, -3), ("number_of_clusters", "-3")),
    "more clusters than weights": (lambda m: cluster_weights(m, 7), ("number_of_clusters", "7", "6")),
    "float clusters": (lambda m: cluster_weights(m, 2.5), ("number_of_clusters", "2.5")),
    "string clusters": (lambda m: cluster_weights(m, "4"), ("number_of_clusters", "'4'")),
    "bool clusters": (lambda m: cluster_weights(m, True), ("number_of_clusters", "True")),
    "unknown init": (lambda m: cluster_weights(m, 3, "KMEANS"), ("cluster_centroids_init", "KMEANS", "LINEAR")),
    "init of wrong type": (lambda m: cluster_weights(m, 3, 2), ("cluster_centroids_init", "2")),
    "preserve_sparsity string": (
        lambda m: cluster_weights(m, 3, preserve_sparsity="yes"),
        ("preserve_sparsity", "yes"),
    ),
    "preserve_sparsity int": (lambda m: cluster_weights(m, 3, preserve_sparsity=1), ("preserve_sparsity", "1")),
    "preserve_sparsity None": (lambda m: cluster_weights(m, 3, preserve_sparsity=None), ("preserve_sparsity", "None")),
    "preserve_sparsity one cluster": (
        lambda m: cluster_weights(m, 1, preserve_sparsity=True),
        ("number_of_clusters", "1"),
    ),
    "more clusters than the last layer's weights": (
        lambda m: cluster_weights(keras.Sequential([keras.Input((3,)), L.Dense(4), L.Dense(1)]), 5),
        ("number_of_clusters", "5", "4"),
    ),
    "clustering twice": (lambda m: cluster_weights(cluster_weights(m, 3), 3), ("cluster",)),
    "a layer with no kernel": (lambda m: cluster_weights(L.Dropout(0.5), 3), ("Dropout",)),
    "batch norm alone": (lambda m: cluster_weights(L.BatchNormalization(), 3), ("BatchNormalization",)),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_names_op_expected_received_and_changes_nothing(case: str) -> None:
    call, words = BAD[case]
    model = _model()
    before = [w.numpy().copy() for w in model.weights]
    layers = list(model.layers)
    with pytest.raises(ste.STEError) as caught:
        call(model)
    assert isinstance(caught.value, (TypeError, ValueError))
    message = str(caught.value)
    assert "cluster" in message.lower()  # the op
    for word in words:  # what was expected and what was received
        assert word in message, (word, message)
    assert len(message) > 60  # room for the fix as well
    assert list(model.layers) == layers
    for b, w in zip(before, model.weights):
        np.testing.assert_array_equal(b, w.numpy())
    # Nothing half-done is left behind: the same model still clusters.
    again = cluster_weights(model, 2)
    assert len(wrappers_of(again)) == 2


def test_a_numpy_integer_is_a_cluster_count() -> None:
    model = _model()
    clustered = cluster_weights(model, np.int64(3), "LINEAR")
    x = np.ones((1, 3), np.float32)
    clustered(x)
    assert all(np.unique(k).size <= 3 for k in plain_kernels(strip_clustering(clustered)))
    assert all(type(w.get_config()["number_of_clusters"]) is int for w in wrappers_of(clustered))  # JSON-safe


def test_k_equal_to_the_weight_count_is_allowed_and_exact() -> None:
    layer = L.Dense(2, use_bias=False)
    layer.build((None, 3))
    w = np.array([[0.3, -0.1], [0.7, 0.25], [-0.5, 0.9]], np.float32)  # no weight halfway
    layer.kernel.assign(w)
    wrapper = cluster_weights(layer, 6, "LINEAR")
    layer = wrapper.layer  # a copy: the layer given is never changed
    np.testing.assert_allclose(
        wrapper(np.eye(3, dtype=np.float32)), np_assign(w, np.linspace(-0.5, 0.9, 6))[0], rtol=1e-6
    )


def test_random_init_is_reproducible_under_keras_seed_and_in_range() -> None:
    w = tf.constant(np.random.default_rng(16).normal(size=(20,)).astype(np.float32))
    keras.utils.set_random_seed(17)
    a = np.asarray(initial_centroids(w, 6, CentroidInitialization.RANDOM))
    keras.utils.set_random_seed(17)
    b = np.asarray(initial_centroids(w, 6, CentroidInitialization.RANDOM))
    np.testing.assert_array_equal(a, b)
    assert a.shape == (6,) and a.min() >= float(tf.reduce_min(w)) and a.max() <= float(tf.reduce_max(w))
    assert np.unique(a).size == 6


def test_bad_input_to_the_wrapper_itself_is_refused() -> None:
    layer = L.Dense(3)
    layer.build((None, 4))
    for bad in (0, 2.0, "3"):
        with pytest.raises(ste.STEError, match="number_of_clusters"):
            ClusterWeights(layer, bad)
    with pytest.raises(ste.STEError, match="preserve_sparsity"):
        ClusterWeights(layer, 3, preserve_sparsity="False")


def test_a_frozen_clustered_layer_keeps_its_weights_and_centroids() -> None:
    clustered = _fresh()
    frozen = wrappers_of(clustered)[0]
    frozen.trainable = False
    before = [np.asarray(v.numpy()).copy() for v in frozen.weights]
    clustered.compile(keras.optimizers.SGD(0.1), "mse")
    rng = np.random.default_rng(18)
    clustered.fit(rng.normal(size=(8, 5)), rng.normal(size=(8, 2)), epochs=2, verbose=0)
    for b, v in zip(before, frozen.weights):
        np.testing.assert_array_equal(b, v.numpy())
    assert wrappers_of(clustered)[1].trainable_weights  # the other layer still trains


def test_the_wrapper_config_round_trips() -> None:
    layer = L.Dense(3, name="rt")
    layer.build((None, 4))
    wrapper = cluster_weights(layer, 3, "DENSITY_BASED", cluster_gradient_aggregation="AVG")
    layer = wrapper.layer  # a copy: the layer given is never changed
    copy = ClusterWeights.from_config(wrapper.get_config())
    assert copy.name == wrapper.name == "cluster_rt"
    assert copy.get_config() == wrapper.get_config()


def test_strip_of_a_model_without_clustering_keeps_it() -> None:
    model = _model()
    stripped = strip_clustering(model)
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(stripped(x), model(x))
    assert [type(la) for la in stripped.layers] == [type(la) for la in model.layers]


def test_forward_mode_is_numpy_s_gather_of_the_centroid_tangents() -> None:
    rng = np.random.default_rng(19)
    layer = L.Dense(4, use_bias=False)
    layer.build((None, 5))
    layer.kernel.assign(rng.normal(size=(5, 4)).astype(np.float32))
    wrapper = cluster_weights(layer, 3, "LINEAR")
    layer = wrapper.layer  # a copy: the layer given is never changed
    x = rng.normal(size=(2, 5)).astype(np.float32)
    wrapper(x)
    centroids = centroid_variable(wrapper)
    t_c, t_w = np.array([1.0, -2.0, 0.5], np.float32), rng.normal(size=(5, 4)).astype(np.float32)
    with tf.autodiff.ForwardAccumulator([centroids.value, layer.kernel.value], [t_c, t_w]) as acc:
        y = wrapper(x)
    _, index = np_assign(layer.kernel.numpy(), centroids.numpy())
    np.testing.assert_allclose(acc.jvp(y), x @ (t_c[index] + t_w), rtol=1e-5, atol=1e-5)


def test_mirrored_strategy_with_two_replicas_trains_as_one_device() -> None:
    rng = np.random.default_rng(20)
    x, y = rng.normal(size=(8, 5)).astype(np.float32), rng.normal(size=(8, 2)).astype(np.float32)
    one = _fresh()
    one.compile(keras.optimizers.SGD(0.1), "mse")
    one.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])  # tests/conftest.py makes 4 logical CPUs
    with strategy.scope():
        two = _fresh()
        two.compile(keras.optimizers.SGD(0.1), "mse")
    two.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    for a, b in zip(one.get_weights(), two.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for layer in strip_clustering(two).layers:
        assert np.unique(layer.kernel.numpy()).size <= 4


def test_dynamic_range_int8_tflite_keeps_at_most_k_values_per_output_channel() -> None:
    """The default ``ste.to_tflite`` quantizes a large kernel with one scale per output channel: each channel keeps
    at most k int8 values (the whole tensor can hold more, as in TFMOT)."""
    keras.utils.set_random_seed(21)
    model = keras.Sequential([keras.Input((40,)), L.Dense(64, name="big"), L.Dense(3, name="head")])
    stripped = strip_clustering(cluster_weights(model, 8))
    kernel = stripped.layers[0].kernel.numpy()
    _, constants = tflite_constants(ste.to_tflite(stripped))
    (q,) = [c for c in constants if c.dtype == np.int8 and c.size == kernel.size]
    assert q.shape == (64, 40)  # output channels first
    assert max(np.unique(row).size for row in q) <= 8


def test_to_tflite_of_an_unstripped_clustered_model_refuses_or_keeps_k_values() -> None:
    keras.utils.set_random_seed(22)
    model = keras.Sequential([keras.Input((40,)), L.Dense(64), L.Dense(3)])
    clustered = cluster_weights(model, 8)
    clustered(np.zeros((1, 40), np.float32))
    try:
        flatbuffer = ste.to_tflite(clustered, optimizations=[])
    except ste.STEError as error:
        assert "strip_clustering" in str(error)
        return
    _, constants = tflite_constants(flatbuffer)
    assert all(np.unique(c).size <= 8 for c in constants if c.dtype == np.float32 and c.size >= 64 * 40)


def test_cluster_and_strip_leave_the_models_they_are_given_unchanged() -> None:
    """Each call returns a copy: clustering does not touch the float model's layers or weights, stripping does not
    touch the clustered model's (its wrappers keep training), and no layer object is shared between them."""
    keras.utils.set_random_seed(23)
    inputs = keras.Input((6,))
    norm = L.BatchNormalization(name="bn")
    model = keras.Model(inputs, L.Dense(3, name="d")(norm(inputs)))
    before = [w.numpy().copy() for w in model.weights]
    clustered = cluster_weights(model, 3)
    wrapped = [w.numpy().copy() for w in clustered.weights]
    stripped = strip_clustering(clustered)
    assert [type(la).__name__ for la in model.layers[1:]] == ["BatchNormalization", "Dense"]
    assert [type(la).__name__ for la in clustered.layers[1:]] == ["BatchNormalization", "ClusterWeights"]
    for old, now in zip(before, model.weights):
        np.testing.assert_array_equal(old, now.numpy())
    for old, now in zip(wrapped, clustered.weights):
        np.testing.assert_array_equal(old, now.numpy())
    ids = [{id(la) for la in m._flatten_layers(include_self=False)} for m in (model, clustered, stripped)]
    assert not (ids[0] & ids[1]) and not (ids[1] & ids[2]) and not (ids[0] & ids[2])


def test_under_mixed_precision_strip_keeps_the_kernel_the_layer_trained_with() -> None:
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        keras.utils.set_random_seed(3)
        model = keras.Sequential([keras.Input((40,)), L.Dense(64), L.Dense(3)])
        clustered = cluster_weights(model, 8)
        x = np.random.default_rng(0).normal(size=(4, 40)).astype(np.float32)
        out = np.asarray(clustered(x), np.float32)
        stripped = strip_clustering(clustered)
        for wrapper, plain in zip(wrappers_of(clustered), stripped.layers):
            w16 = wrapper.layer.kernel.numpy().astype(np.float16)
            c16 = centroid_variable(wrapper).numpy().astype(np.float16)
            used = np_assign(w16, c16)[0]  # what the float16 layer computes with: the nearest float16 centroid
            np.testing.assert_array_equal(plain.kernel.numpy().astype(np.float16), used)
        np.testing.assert_allclose(np.asarray(stripped(x), np.float32), out, rtol=1e-3, atol=1e-3)
    finally:
        keras.mixed_precision.set_global_policy("float32")
