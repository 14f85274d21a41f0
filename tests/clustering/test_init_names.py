"""Centroid initializations by name: a function registered with ``ste.clustering.register_init`` is what
``cluster_weights`` uses (checked against numpy in every dtype, with ``preserve_sparsity``, in a Sequential built
inside ``fit``, and after saving); TFMOT's ``CentroidInitialization`` names keep their meaning; the config saves the
registered name; an unknown name suggests the one meant."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
from ste.clustering import CentroidInitialization, ClusterWeights, cluster_weights, initial_centroids

L = keras.layers
CALLS: list[tuple[np.ndarray, int, bool]] = []


def order_statistics(weights: tf.Tensor, number_of_clusters: int, preserve_sparsity: bool) -> tf.Tensor:
    """A user's initialization: evenly spaced order statistics of the weights."""
    CALLS.append((weights.numpy().copy(), number_of_clusters, preserve_sparsity))
    ranks = tf.linspace(0.0, tf.cast(tf.size(weights) - 1, tf.float32), number_of_clusters)
    return tf.gather(tf.sort(weights), tf.cast(tf.round(ranks), tf.int32))


def numpy_order_statistics(w: np.ndarray, k: int) -> np.ndarray:
    if k == 0:
        return np.zeros(0, w.dtype)
    ranks = np.round(np.linspace(0, w.size - 1, k)).astype(int)
    picked: np.ndarray = np.sort(w)[ranks]
    return picked


@pytest.fixture
def registered() -> Iterator[str]:
    ste.clustering.register_init("order_statistics_test")(order_statistics)
    CALLS.clear()
    try:
        yield "order_statistics_test"
    finally:
        ste.clustering.unregister_init("order_statistics_test")


def _nearest(kernel: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    nearest: np.ndarray = centroids[np.argmin(np.abs(kernel[..., None] - centroids), axis=-1)]
    return nearest


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_a_registered_init_is_what_cluster_weights_uses(registered: str, dtype: str) -> None:
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((5,)), L.Dense(6, dtype=dtype, name="d")])
    clustered = cluster_weights(model, 4, cluster_centroids_init=registered)
    wrapper = clustered.layers[0]
    kernel = tf.cast(wrapper.layer.kernel, tf.float64).numpy()
    ((seen, k, side),) = CALLS
    compute = np.float64 if dtype == "float64" else np.float32
    assert seen.dtype == compute and seen.shape == (30,) and k == 4 and side is False
    expected = numpy_order_statistics(kernel.ravel(), 4)
    centroids = tf.cast(wrapper.cluster_centroids["kernel"], tf.float64).numpy()
    np.testing.assert_array_equal(centroids, expected)  # order statistics are weights: exact in every dtype
    clustered_kernel = tf.cast(wrapper.clustered_values()[0][1], tf.float64).numpy()
    np.testing.assert_array_equal(clustered_kernel, _nearest(kernel, expected))
    assert wrapper.cluster_centroids_init == registered
    assert wrapper.get_config()["cluster_centroids_init"] == registered


def test_with_preserve_sparsity_it_runs_on_each_side_of_the_zero_centroid(registered: str) -> None:
    rng = np.random.default_rng(2)
    kernel = rng.normal(size=(8, 5)).astype(np.float32)
    kernel[rng.random(kernel.shape) < 0.4] = 0
    layer = L.Dense(5)
    layer.build((None, 8))
    layer.kernel.assign(kernel)
    wrapper = cluster_weights(layer, 6, cluster_centroids_init=registered, preserve_sparsity=True)
    wrapper.build((None, 8))
    negative, positive = kernel[kernel < 0], kernel[kernel > 0]
    n_negative = int(np.round(5 * negative.size / (negative.size + positive.size)))  # TFMOT's split
    expected = np.concatenate(
        [numpy_order_statistics(negative, n_negative), [0.0], numpy_order_statistics(positive, 5 - n_negative)]
    )
    np.testing.assert_array_equal(wrapper.cluster_centroids["kernel"].numpy(), expected.astype(np.float32))
    assert [(k, side) for _, k, side in CALLS] == [(n_negative, True), (5 - n_negative, True)]


def test_a_numpy_init_works_in_a_sequential_built_inside_fit() -> None:
    """The wrapper builds eagerly even when Keras builds it inside the first traced training step, so a user's
    function may use numpy."""

    def first_values(weights: tf.Tensor, number_of_clusters: int, preserve_sparsity: bool) -> Any:
        return np.sort(weights.numpy())[:number_of_clusters]

    ste.clustering.register_init("first_values_test")(first_values)
    try:
        keras.utils.set_random_seed(3)
        wrapper = cluster_weights(L.Dense(4), 3, cluster_centroids_init="first_values_test")
        model = keras.Sequential([wrapper, L.Dense(2)])
        model.compile(keras.optimizers.SGD(0.0), "mse")  # no update: the kernel stays the initial one
        model.fit(np.ones((8, 5), np.float32), np.ones((8, 2), np.float32), verbose=0)
        kernel = wrapper.layer.kernel.numpy()
        np.testing.assert_array_equal(wrapper.cluster_centroids["kernel"].numpy(), np.sort(kernel.ravel())[:3])
    finally:
        ste.clustering.unregister_init("first_values_test")


def test_a_saved_model_names_the_init_and_loads(registered: str, tmp_path: Any) -> None:
    keras.utils.set_random_seed(4)
    model = cluster_weights(keras.Sequential([keras.Input((5,)), L.Dense(6)]), 3, cluster_centroids_init=registered)
    x = np.random.default_rng(5).normal(size=(4, 5)).astype(np.float32)
    path = os.path.join(tmp_path, "clustered.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.layers[0].get_config()["cluster_centroids_init"] == registered
    np.testing.assert_array_equal(np.asarray(loaded(x)), np.asarray(model(x)))


@pytest.mark.parametrize("member", list(CentroidInitialization))
def test_tfmots_names_keep_their_meaning(member: CentroidInitialization) -> None:
    """The enum, its name in any case and its string value all pick the same built-in; the config saves the lower-case
    name and a config written with TFMOT's name (or ste's earlier upper-case value) loads."""
    w = tf.constant(np.random.default_rng(6).normal(size=40), tf.float32)
    keras.utils.set_random_seed(7)
    want = initial_centroids(w, 5, member).numpy()
    spellings = [member.name, member.name.lower(), member.value, f"CentroidInitialization.{member.name}"]
    for spelling in spellings:
        keras.utils.set_random_seed(7)  # RANDOM draws from Keras's seed
        np.testing.assert_array_equal(initial_centroids(w, 5, spelling).numpy(), want)
        wrapper = ClusterWeights(L.Dense(3), 2, cluster_centroids_init=spelling)
        assert wrapper.cluster_centroids_init is member  # TFMOT's attribute holds the enum
        assert wrapper.get_config()["cluster_centroids_init"] == member.name.lower()
        assert ClusterWeights.from_config(wrapper.get_config()).cluster_centroids_init is member
    if member is CentroidInitialization.LINEAR:
        np.testing.assert_allclose(want, np.linspace(w.numpy().min(), w.numpy().max(), 5), rtol=1e-6)


@pytest.mark.parametrize(
    "spelling,meant", [("KMEANS", "kmeans_plus_plus"), ("CentroidInitialization.LINER", "linear"), ("dens", None)]
)
def test_an_unknown_name_suggests_the_one_meant(spelling: str, meant: str | None) -> None:
    with pytest.raises(ste.errors.ParameterError) as caught:
        cluster_weights(L.Dense(3), 2, cluster_centroids_init=spelling)
    message = str(caught.value)
    assert f"unknown cluster_centroids_init {spelling!r}" in message and "Fix:" in message
    assert "CentroidInitialization.KMEANS_PLUS_PLUS" in message  # TFMOT's names are listed
    if meant is not None:
        assert f"did you mean {meant!r}" in message


@pytest.mark.parametrize(
    "entry,match",
    [
        (lambda weights, k: weights, "cannot be called as init"),
        (CentroidInitialization.LINEAR, "expected a function"),
        (type("NotAFunction", (), {"__call__": lambda self, w, k, p: w}), "expected a function"),
    ],
)
def test_registering_something_that_is_not_an_init_is_refused(entry: Any, match: str) -> None:
    with pytest.raises(ste.errors.RegistrationError, match=match):
        ste.clustering.register_init("not_an_init")(entry)
    assert "not_an_init" not in ste.clustering.inits()


def test_centroids_of_the_wrong_shape_are_refused_before_the_centroids_exist() -> None:
    ste.clustering.register_init("too_few_test")(lambda weights, k, preserve_sparsity: weights[: k - 1])
    try:
        wrapper = cluster_weights(L.Dense(3), 3, cluster_centroids_init="too_few_test")
        with pytest.raises(ste.errors.ParameterError, match=r"'too_few_test'.*shape \(2,\).*expected shape \(3,\)"):
            wrapper.build((None, 4))
        assert wrapper.cluster_centroids == {}
    finally:
        ste.clustering.unregister_init("too_few_test")
