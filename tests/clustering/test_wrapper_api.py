"""ClusterWeights as TFMOT users reach into it (tensorflow_model_optimization 0.8.1, ``cluster_wrapper.py``):
``cluster_centroids`` and ``original_clusterable_weights`` (``{weight name: variable}``, centroids of shape
``(number_of_clusters,)`` in the weight's dtype) and the wrapped layer's ``get_clusterable_weights()`` pairs; a
Sequential of clustered layers without a ``keras.Input`` (built inside the first training step) and with
``input_shape`` on its first layer (TFMOT copies ``_batch_input_shape``)."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
from ste.clustering import CentroidInitialization, cluster_weights

L = keras.layers


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_tfmots_attributes_are_the_wrappers_variables(dtype: str) -> None:
    layer = L.Dense(6, dtype=dtype)
    wrapper = cluster_weights(layer, number_of_clusters=4)
    assert wrapper.cluster_centroids == {} and wrapper.original_clusterable_weights == {}  # before the build
    with pytest.raises(ste.errors.NotBuiltError, match=r"get_clusterable_weights\(\).*Fix:"):
        wrapper.get_clusterable_weights()
    wrapper(np.ones((2, 5), np.float32))
    assert not layer.built  # the wrapper holds a copy: the layer given stays as it is
    layer = wrapper.layer
    ((name, variable),) = wrapper.get_clusterable_weights()
    assert name == "kernel" and variable is layer.kernel
    assert list(wrapper.original_clusterable_weights) == ["kernel"]
    assert wrapper.original_clusterable_weights["kernel"] is layer.kernel
    centroids = wrapper.cluster_centroids["kernel"]
    assert tuple(centroids.shape) == (4,) and centroids.dtype == dtype and centroids.trainable
    assert any(centroids is w for w in wrapper.trainable_weights)
    clustered = tf.cast(wrapper.clustered_values()[0][1], tf.float64).numpy()
    kernel = tf.cast(layer.kernel, tf.float64).numpy()
    c = tf.cast(centroids, tf.float64).numpy()
    np.testing.assert_array_equal(clustered, c[np.argmin(np.abs(kernel[..., None] - c), axis=-1)])  # TFMOT's rule


def test_a_separable_convolution_names_both_its_kernels() -> None:
    """Both kernels (TFMOT clusters the pointwise one only: docs/clustering.md says so)."""
    wrapper = cluster_weights(L.SeparableConv2D(4, 3), number_of_clusters=3)
    wrapper(np.ones((1, 6, 6, 2), np.float32))
    assert list(wrapper.cluster_centroids) == ["depthwise_kernel", "pointwise_kernel"]
    assert wrapper.original_clusterable_weights["pointwise_kernel"] is wrapper.layer.pointwise_kernel
    assert wrapper.original_clusterable_weights["depthwise_kernel"] is wrapper.layer.depthwise_kernel


def test_a_sequential_without_input_clusters_from_the_initial_kernel() -> None:
    """Keras builds this Sequential inside the first traced training step, where a new variable has no value yet;
    the wrapper builds eagerly, so its LINEAR centroids are numpy's linspace over the initial kernel."""
    keras.utils.set_random_seed(3)
    wrapper = cluster_weights(L.Dense(4), 3, cluster_centroids_init=CentroidInitialization.LINEAR)
    model = keras.Sequential([wrapper, L.Dense(2)])
    model.compile(keras.optimizers.SGD(0.0), "mse")  # no update: the kernel stays the initial one
    rng = np.random.default_rng(4)
    model.fit(rng.normal(size=(8, 5)).astype(np.float32), np.ones((8, 2), np.float32), verbose=0)
    kernel = wrapper.layer.kernel.numpy()
    np.testing.assert_allclose(
        wrapper.cluster_centroids["kernel"].numpy(), np.linspace(kernel.min(), kernel.max(), 3), rtol=1e-6
    )


def test_a_sequential_without_input_with_kmeans_plus_plus_trains() -> None:
    """The reported crash: k-means++ (the default) on the kernel of a Sequential built in fit."""
    keras.utils.set_random_seed(5)
    model = keras.Sequential([cluster_weights(L.Dense(4), 3), L.Dense(2)])
    model.compile("adam", "mse")
    rng = np.random.default_rng(6)
    model.fit(rng.normal(size=(16, 8)).astype(np.float32), np.ones((16, 2), np.float32), verbose=0, epochs=2)
    wrapper = model.layers[0]
    ((_, value),) = wrapper.clustered_values()
    assert np.unique(value.numpy()).size <= 3
    stripped = ste.clustering.strip_clustering(model)
    assert np.unique(stripped.layers[0].kernel.numpy()).size <= 3


def test_input_shape_on_a_clustered_first_layer_builds_the_sequential() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Keras's advice to use keras.Input instead
        first = L.Dense(4, input_shape=(8,))
    model = keras.Sequential([cluster_weights(first, 3), L.Dense(2)])
    assert model.built and model.input_shape == (None, 8)
    assert np.unique(model.layers[0].clustered_values()[0][1].numpy()).size <= 3
