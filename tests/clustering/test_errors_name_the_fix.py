"""Bad input to ste.clustering: an ste error raised before any variable changes, naming the op, what it received and
the fix (the project's standard for every error)."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import ste

C = ste.clustering
L = keras.layers


def model() -> keras.Model:
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((5,)), L.Dense(8), L.Dense(3)])


def assert_good_error(info: pytest.ExceptionInfo, *fragments: str) -> None:
    assert isinstance(info.value, ste.STEError), type(info.value)
    message = str(info.value)
    assert "ste.clustering" in message, message
    assert "Fix" in message, message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


@pytest.mark.parametrize(
    "call,fragments",
    [
        (lambda m: C.cluster_weights(m, 0), ("number_of_clusters", ">= 1", "received 0")),
        (lambda m: C.cluster_weights(m, -3), ("number_of_clusters", "received -3")),
        (lambda m: C.cluster_weights(m, 2.0), ("number_of_clusters", "2.0", "number_of_clusters=2")),
        (lambda m: C.cluster_weights(m, "16"), ("number_of_clusters", "'16'")),
        (lambda m: C.cluster_weights(m, 1, preserve_sparsity=True), ("number_of_clusters", ">= 2")),
        (lambda m: C.cluster_weights(m, 25), ("25", "24 values", "number_of_clusters <= 24")),
        (lambda m: C.cluster_weights(m.layers[1], 25), ("25", "24 values", "number_of_clusters <= 24")),
        (lambda m: C.cluster_weights(m, 4, "KMEANS"), ("cluster_centroids_init", "'KMEANS'")),
        (lambda m: C.cluster_weights(m, 4, preserve_sparsity="yes"), ("preserve_sparsity", "'yes'")),
        (lambda m: C.cluster_weights(m, 4, strict=1), ("strict",)),
        (lambda m: C.cluster_weights(C.cluster_weights(m, 4), 4), ("already clustered",)),
        (lambda m: C.cluster_weights(L.Dropout(0.1), 4), ("no kernel",)),
        (lambda m: C.cluster_weights(L.ReLU(), 4), ("no kernel",)),
        (lambda m: C.cluster_weights(42, 4), ("int",)),
        (lambda m: C.ClusterWeights(m, 4), ("model",)),
        (lambda m: C.ClusterWeights(np.ones(3), 4), ("ndarray",)),
        (lambda m: C.strip_clustering("model"), ("str",)),
        (lambda m: C.cluster_scope(["MyLayer"]).__enter__(), ("list",)),
    ],
)
def test_bad_input_names_the_fix_and_changes_nothing(call, fragments) -> None:
    m = model()
    before = [w.numpy().copy() for w in m.weights]
    with pytest.raises(ste.STEError) as info:
        call(m)
    assert_good_error(info, *fragments)
    for old, new in zip(before, m.weights):
        np.testing.assert_array_equal(old, new.numpy())


def test_more_clusters_than_weights_in_an_unbuilt_layer_is_refused_when_built() -> None:
    wrapper = C.cluster_weights(L.Dense(2), 7)
    with pytest.raises(ste.STEError) as info:
        wrapper(np.ones((1, 3), np.float32))
    assert_good_error(info, "7", "6 values", "number_of_clusters <= 6")
    assert not wrapper.built
