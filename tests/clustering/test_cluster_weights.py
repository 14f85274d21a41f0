"""cluster_weights / strip_clustering / cluster_scope on Keras 3 layers and models: the clustered forward and its
gradients against the plain layer run on a numpy-clustered kernel, at most k values through training, save/load,
strip and float TFLite, preserve_sparsity, and every bad input refused before anything changes."""

from __future__ import annotations

import os
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
from ste.clustering import CentroidInitialization, ClusterWeights, cluster_scope, cluster_weights, strip_clustering
from ste.clustering._clusterable import clusterable_weights

LAYERS = {
    "dense": (lambda: keras.layers.Dense(6), (3, 10), "kernel"),
    "conv2d": (lambda: keras.layers.Conv2D(4, 3), (2, 6, 6, 3), "kernel"),
    "depthwise": (lambda: keras.layers.DepthwiseConv2D(3, depth_multiplier=2), (2, 6, 6, 3), "kernel"),
    "conv1d": (lambda: keras.layers.Conv1D(4, 3), (2, 8, 3), "kernel"),
    "conv2d_transpose": (lambda: keras.layers.Conv2DTranspose(4, 3), (2, 5, 5, 3), "kernel"),
    "separable2d": (lambda: keras.layers.SeparableConv2D(4, 3), (2, 6, 6, 3), "pointwise_kernel"),
    "separable2d-depthwise": (lambda: keras.layers.SeparableConv2D(4, 3), (2, 6, 6, 3), "depthwise_kernel"),
    "einsum": (lambda: keras.layers.EinsumDense("abc,cd->abd", output_shape=(None, 5)), (3, 4, 10), "kernel"),
    "embedding": (lambda: keras.layers.Embedding(20, 5), None, "embeddings"),
}


def numpy_clustered(w: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    index = np.argmin(np.abs(w[..., None] - c), axis=-1)
    return c[index], index


def inputs_for(name: str, shape) -> np.ndarray:
    rng = np.random.default_rng(1)
    if name == "embedding":
        return rng.integers(0, 20, (3, 4))
    return rng.normal(size=shape).astype(np.float32)


@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_forward_and_gradients_match_the_plain_layer_on_the_clustered_kernel(name: str) -> None:
    make, shape, attribute = LAYERS[name]
    keras.utils.set_random_seed(0)
    layer = make()
    x = inputs_for(name, shape)
    layer(x)
    wrapper = cluster_weights(layer, 5, CentroidInitialization.LINEAR)
    layer = wrapper.layer  # a copy: the layer given is never changed
    assert isinstance(wrapper, ClusterWeights) and wrapper.name == f"cluster_{layer.name}"
    wrapper(x)
    kernel = getattr(layer, attribute)
    paths = [w.path for w in wrapper.weights]

    def centroids_of(name: str):
        return wrapper.weights[paths.index(f"{wrapper.name}/cluster_centroids_{name}")]

    centroids = centroids_of(attribute)
    w, c = kernel.numpy(), centroids.numpy()
    np.testing.assert_allclose(c, np.linspace(w.min(), w.max(), 5), rtol=1e-6)
    clustered, index = numpy_clustered(w, c)
    others = {  # every other clustered weight of the layer (a separable convolution's other kernel)
        id(variable): numpy_clustered(variable.numpy(), centroids_of(name).numpy())[0]
        for name, variable in clusterable_weights(layer)
        if variable is not kernel
    }

    # The reference: a plain copy of the layer holding the numpy-clustered kernels, differentiated by TensorFlow.
    plain = type(layer).from_config(layer.get_config())
    plain(x)
    for new, old in zip(plain.weights, layer.weights):
        new.assign(clustered if old is kernel else others.get(id(old), old.numpy()))
    upstream = np.random.default_rng(2).normal(size=plain(x).shape).astype(np.float32)
    with tf.GradientTape() as tape:
        y_ref = plain(x)
    (g_kernel,) = tape.gradient(y_ref, [getattr(plain, attribute).value], output_gradients=upstream)
    with tf.GradientTape() as tape:
        y = wrapper(x)
    g_w, g_c = tape.gradient(y, [kernel.value, centroids.value], output_gradients=upstream)

    np.testing.assert_allclose(y.numpy(), y_ref.numpy(), rtol=1e-5, atol=1e-6)
    g = g_kernel.numpy() if not isinstance(g_kernel, tf.IndexedSlices) else tf.convert_to_tensor(g_kernel).numpy()
    np.testing.assert_allclose(tf.convert_to_tensor(g_w).numpy(), g, rtol=1e-5, atol=1e-6)  # straight through
    members = [g[index == j].sum() for j in range(5)]  # each centroid: the sum of its members' gradients
    np.testing.assert_allclose(g_c.numpy(), members, rtol=1e-4, atol=1e-5)


def small_model(batch_norm: bool = True) -> keras.Model:
    inputs = keras.Input((8, 8, 1))
    x = keras.layers.Conv2D(8, 3, activation="relu")(inputs)
    x = keras.layers.DepthwiseConv2D(3)(x)
    # The TFLite converter folds a batch norm's scale into the kernel before it (one factor per channel), so a
    # flatbuffer's kernel then has up to k values per channel, not per tensor: the TFLite test leaves it out.
    x = keras.layers.BatchNormalization()(x) if batch_norm else keras.layers.ReLU()(x)
    x = keras.layers.Flatten()(x)
    return keras.Model(inputs, keras.layers.Dense(3)(x))


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.random((32, 8, 8, 1), np.float32), rng.random((32, 3), np.float32)


def kernels(model: keras.Model) -> dict[str, np.ndarray]:
    found = {}
    for layer in model.layers:
        if isinstance(layer, ClusterWeights):
            for _variable, value in layer.clustered_values():
                found[layer.layer.name] = value.numpy()
        elif isinstance(layer, (keras.layers.Conv2D, keras.layers.DepthwiseConv2D, keras.layers.Dense)):
            found[layer.name] = layer.kernel.numpy()
    return found


@pytest.mark.parametrize("jit_compile", [False, True])
def test_training_keeps_at_most_k_values_and_moves_latent_weights_and_centroids(jit_compile: bool) -> None:
    keras.utils.set_random_seed(0)
    model = small_model()
    clustered = cluster_weights(model, 4)
    assert sum(isinstance(layer, ClusterWeights) for layer in clustered.layers) == 3
    before = [w.numpy().copy() for w in clustered.trainable_weights]
    clustered.compile(keras.optimizers.Adam(0.01), "mse", jit_compile=jit_compile)
    x, y = data()
    clustered.fit(x, y, epochs=2, verbose=0)
    after = [w.numpy() for w in clustered.trainable_weights]
    names = [w.path for w in clustered.trainable_weights]
    moved = {n for n, b, a in zip(names, before, after) if not np.array_equal(b, a)}
    assert any("cluster_centroids" in n for n in moved) and any(n.endswith("/kernel") for n in moved)
    for name, kernel in kernels(clustered).items():
        assert np.unique(kernel).size <= 4, name


def test_save_load_strip_and_float_tflite_keep_at_most_k_values(tmp_path) -> None:
    keras.utils.set_random_seed(0)
    clustered = cluster_weights(small_model(batch_norm=False), 6, "DENSITY_BASED")
    clustered.compile("adam", "mse")
    x, y = data()
    clustered.fit(x, y, epochs=1, verbose=0)
    expected = clustered.predict(x, verbose=0)

    path = os.path.join(tmp_path, "clustered.keras")
    clustered.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), expected)
    with cluster_scope():
        np.testing.assert_array_equal(keras.models.load_model(path).predict(x, verbose=0), expected)

    stripped = strip_clustering(loaded)
    assert not any(isinstance(layer, ClusterWeights) for layer in stripped.layers)
    assert [type(layer).__name__ for layer in stripped.layers[1:]] == [
        "Conv2D",
        "DepthwiseConv2D",
        "ReLU",
        "Flatten",
        "Dense",
    ]
    np.testing.assert_allclose(stripped.predict(x, verbose=0), expected, rtol=1e-6, atol=1e-6)
    for layer in stripped.layers:
        if isinstance(layer, (keras.layers.Conv2D, keras.layers.DepthwiseConv2D, keras.layers.Dense)):
            assert np.unique(layer.kernel.numpy()).size <= 6, layer.name

    flatbuffer = ste.to_tflite(stripped, optimizations=[])
    interpreter = tf.lite.Interpreter(model_content=flatbuffer)
    interpreter.allocate_tensors()
    sizes = {kernel.size for kernel in kernels(loaded).values()}
    found = 0
    for detail in interpreter.get_tensor_details():
        if detail["dtype"] != np.float32 or int(np.prod(detail["shape"])) not in sizes:
            continue
        try:
            value = interpreter.get_tensor(detail["index"])
        except ValueError:  # an intermediate tensor without data
            continue
        if value.size > 30:  # a kernel (biases and batch-norm vectors are smaller)
            found += 1
            assert np.unique(value).size <= 6, detail["name"]
    assert found == 3
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x[:1])
    interpreter.invoke()
    output = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    np.testing.assert_allclose(output, expected[:1], rtol=1e-4, atol=1e-5)


def test_sequential_and_nested_models() -> None:
    keras.utils.set_random_seed(0)
    inner = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(8)])
    inputs = keras.Input((6,))
    outer = keras.Model(inputs, keras.layers.Dense(2)(inner(inputs)))
    clustered = cluster_weights(outer, 3)
    wrapped = [layer for layer in clustered._flatten_layers(include_self=False) if isinstance(layer, ClusterWeights)]
    assert len(wrapped) == 3
    x = np.random.default_rng(0).normal(size=(4, 6)).astype(np.float32)
    out = clustered(x)
    stripped = strip_clustering(clustered)
    np.testing.assert_allclose(stripped(x), out, rtol=1e-6, atol=1e-6)
    for layer in stripped._flatten_layers(include_self=False):
        if isinstance(layer, keras.layers.Dense):
            assert np.unique(layer.kernel.numpy()).size <= 3


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64", "mixed_float16"])
def test_every_dtype_policy_gives_at_most_k_values(dtype: str) -> None:
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((10,)), keras.layers.Dense(12, dtype=dtype), keras.layers.Dense(3, dtype=dtype)]
    )
    clustered = cluster_weights(model, 5, "LINEAR")
    x = np.random.default_rng(0).normal(size=(4, 10))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.cast(clustered(x), tf.float32) ** 2)
    grads = tape.gradient(loss, clustered.trainable_weights)
    assert all(g is not None and np.all(np.isfinite(tf.cast(tf.convert_to_tensor(g), tf.float32))) for g in grads)
    for layer in clustered.layers:
        for variable, value in layer.clustered_values():
            assert value.dtype == variable.dtype and np.unique(tf.cast(value, tf.float64).numpy()).size <= 5
    stripped = strip_clustering(clustered)
    np.testing.assert_allclose(
        tf.cast(stripped(x), tf.float64), tf.cast(clustered(x), tf.float64), rtol=1e-2, atol=1e-2
    )


def test_preserve_sparsity_keeps_zeros_and_the_zero_centroid() -> None:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(16), keras.layers.Dense(4)])
    for layer in model.layers:  # prune half of each kernel
        kernel = layer.kernel.numpy()
        kernel[np.abs(kernel) < np.median(np.abs(kernel))] = 0.0
        layer.kernel.assign(kernel)
    zeros = [layer.kernel.numpy() == 0 for layer in model.layers]
    clustered = cluster_weights(model, 8, preserve_sparsity=True)
    clustered.compile(keras.optimizers.Adam(0.05), "mse")
    rng = np.random.default_rng(0)
    clustered.fit(rng.normal(size=(64, 16)), rng.normal(size=(64, 4)), epochs=3, verbose=0)
    stripped = strip_clustering(clustered)
    for layer, was_zero, wrapper in zip(stripped.layers, zeros, clustered.layers):
        kernel = layer.kernel.numpy()
        assert np.all(kernel[was_zero] == 0.0)  # the pruned weights stay exactly zero
        assert np.unique(kernel).size <= 8 and 0.0 in np.unique(kernel)
        mask = wrapper.weights[[w.path.split("/")[-1] for w in wrapper.weights].index("sparsity_mask_kernel")]
        assert np.all(mask.numpy()[was_zero] == 0.0)


def test_uncovered_layers_warn_once_and_strict_refuses() -> None:
    """A custom layer with a matrix the clustering does not know stays unclustered, named in one warning; a custom
    layer holding only a vector (a scale, as a batch norm's) has nothing a transformation accounts for: no warning."""

    class Mix(keras.layers.Layer):
        def build(self, input_shape):
            self.mix = self.add_weight(shape=(input_shape[-1], input_shape[-1]), initializer="identity")

        def call(self, x):
            return x @ self.mix

    class Scale(keras.layers.Layer):
        def build(self, input_shape):
            self.scale = self.add_weight(shape=(input_shape[-1],), initializer="ones")

        def call(self, x):
            return x * self.scale

    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(3)(Scale(name="scale")(Mix(name="mix")(inputs))))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clustered = cluster_weights(model, 2)
    messages = [str(w.message) for w in caught if "stay unclustered" in str(w.message)]
    assert len(messages) == 1 and "mix (Mix)" in messages[0] and "scale" not in messages[0]
    assert type(clustered.get_layer("mix")).__name__ == "Mix"
    with pytest.raises(ste.errors.UnsupportedLayerError, match=r"strict=True.*mix \(Mix\).*ClusterableLayer"):
        cluster_weights(model, 2, strict=True)


def test_clusterable_layer_protocol() -> None:
    class MyDense(keras.layers.Dense, ste.clustering.ClusterableLayer):
        def get_clusterable_weights(self):
            return [("kernel", self.kernel)]

    layer = MyDense(5)
    layer.build((None, 7))
    wrapper = cluster_weights(layer, 3)
    layer = wrapper.layer  # a copy: the layer given is never changed
    out = wrapper(np.ones((2, 7), np.float32))
    assert out.shape == (2, 5)
    ((variable, value),) = wrapper.clustered_values()
    assert variable is layer.kernel and np.unique(value.numpy()).size <= 3


@pytest.mark.parametrize(
    "call,error,match",
    [
        (lambda m: cluster_weights(m, 0), ste.errors.ParameterError, r"number_of_clusters must be an integer >= 1"),
        (lambda m: cluster_weights(m, 2.5), ste.errors.ParameterError, r"number_of_clusters.*2\.5"),
        (lambda m: cluster_weights(m, 1, preserve_sparsity=True), ste.errors.ParameterError, r">= 2.*zero one"),
        (lambda m: cluster_weights(m, 25), ste.errors.ParameterError, r"25 is more than the 24 values.*kernel"),
        (
            lambda m: cluster_weights(m, 4, "KMEANS"),
            ste.errors.ParameterError,
            r"unknown cluster_centroids_init 'KMEANS'",
        ),
        (lambda m: cluster_weights(m, 4, cluster_gradient_aggregation="MEAN"), ste.errors.ParameterError, r"AVG"),
        (lambda m: cluster_weights(m, 4, preserve_sparsity="yes"), ste.errors.ParameterError, r"True or False"),
        (lambda m: cluster_weights(cluster_weights(m, 4), 4), ste.errors.ParameterError, r"already clustered"),
        (
            lambda m: cluster_weights(keras.layers.Flatten(), 4),
            ste.errors.UnsupportedLayerError,
            r"no kernel to cluster",
        ),
        (lambda m: cluster_weights("model", 4), ste.errors.ParameterError, r"expected a Keras 3 model"),
    ],
)
def test_bad_input_is_refused_before_anything_changes(call, error, match) -> None:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8), keras.layers.Dense(3)])
    before = [w.numpy().copy() for w in model.weights]
    with pytest.raises(error, match=match):
        call(model)
    for b, w in zip(before, model.weights):
        np.testing.assert_array_equal(b, w.numpy())


def test_a_shared_layer_stays_one_clustered_layer_called_twice() -> None:
    keras.utils.set_random_seed(0)
    shared = keras.layers.Dense(4)
    a, b = keras.Input((4,)), keras.Input((4,))
    model = keras.Model([a, b], keras.layers.Add()([shared(a), shared(b)]))
    clustered = cluster_weights(model, 3)
    wrappers = [layer for layer in clustered.layers if isinstance(layer, ClusterWeights)]
    assert len(wrappers) == 1
    x = [np.ones((2, 4), np.float32), np.full((2, 4), 2.0, np.float32)]
    ((_, kernel),) = wrappers[0].clustered_values()
    expected = (x[0] + x[1]) @ kernel.numpy() + 2 * shared.bias.numpy()
    np.testing.assert_allclose(clustered(x), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(strip_clustering(clustered)(x), expected, rtol=1e-5, atol=1e-6)


def test_an_unbuilt_layer_checks_the_cluster_count_when_it_is_built() -> None:
    wrapper = cluster_weights(keras.layers.Dense(2), 7)
    with pytest.raises(ste.errors.ParameterError, match=r"7 is more than the 6 values of its weight 'kernel' \(3, 2\)"):
        wrapper(np.ones((1, 3), np.float32))


def test_the_benchmark_runs_on_digits() -> None:
    pytest.importorskip("sklearn")
    import argparse

    from benchmarks.clustering import run

    args = argparse.Namespace(fashion_mnist=None, train=0, test=0, epochs=1, fine_tune_epochs=1, clusters=[4])
    rows = run("ste", args)
    assert [r["model"] for r in rows] == ["float", "4 clusters"] and rows[1]["values"] <= 4
    assert rows[1]["gzip_bytes"] < rows[0]["gzip_bytes"] / 4  # 4 values per kernel compress; the float ones do not
    assert abs(rows[1]["tflite_bytes"] - rows[0]["tflite_bytes"]) < 0.01 * rows[0]["tflite_bytes"]  # same tensors
