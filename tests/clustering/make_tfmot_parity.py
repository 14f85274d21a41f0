"""Writes tests/data/tfmot_cluster_parity.npz: what TFMOT 0.8 itself does, for tests/clustering/test_tfmot_parity.py.

Run it with a Python that has TensorFlow, tf-keras and tensorflow-model-optimization 0.8 (never a dependency of ste):
``TF_USE_LEGACY_KERAS=1 python tests/clustering/make_tfmot_parity.py``. Keys:

* ``init|<tensor>|<method>|<k>|<preserve_sparsity>``: TFMOT's initial centroids of ``w_<tensor>``;
* ``<case>|x``, ``<case>|y``, ``<case>|<layer>|kernel0`` ...: a two-Dense model clustered by ``cluster_weights``
  (``<case>`` names the method, k, aggregation and preserve_sparsity), its output before training (``out0``), the
  stripped kernels, biases and output after three full-batch SGD steps (``kernel3``, ``bias3``, ``out3``), and the
  centroids after them (``centroids3``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import tensorflow as tf
import tensorflow_model_optimization as tfmot
from tensorflow_model_optimization.python.core.clustering.keras import clustering_centroids
from tensorflow_model_optimization.python.core.clustering.keras.cluster_config import (
    CentroidInitialization,
    GradientAggregation,
)
from tensorflow_model_optimization.python.core.clustering.keras.experimental import cluster as experimental_cluster

keras = tf.keras
OUT = Path(__file__).resolve().parents[1] / "data" / "tfmot_cluster_parity.npz"
LR = 0.05
STEPS = 3


def tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    conv = rng.normal(0, 0.2, (3, 3, 2, 4)).astype(np.float32)
    coarse = (np.round(rng.normal(0, 1, (12, 5)) * 2) / 4).astype(np.float32)  # many repeated values
    positive_pruned = rng.uniform(0.05, 1.0, (8, 8)).astype(np.float32)
    positive_pruned[rng.uniform(size=(8, 8)) < 0.5] = 0
    two_sided = rng.laplace(0, 0.3, (16, 6)).astype(np.float32)
    two_sided[np.abs(two_sided) < 0.15] = 0
    return {"conv": conv, "coarse": coarse, "positive_pruned": positive_pruned, "two_sided": two_sided}


def model_weights(pruned: bool) -> list[np.ndarray]:
    rng = np.random.default_rng(11)
    w1 = rng.normal(0, 0.5, (6, 10)).astype(np.float32)
    w2 = rng.normal(0, 0.5, (10, 3)).astype(np.float32)
    if pruned:
        w1[np.abs(w1) < np.median(np.abs(w1))] = 0
        w2[np.abs(w2) < np.median(np.abs(w2))] = 0
    b1 = rng.normal(0, 0.1, (10,)).astype(np.float32)
    b2 = rng.normal(0, 0.1, (3,)).astype(np.float32)
    return [w1, b1, w2, b2]


MODEL_CASES = {
    # name: (method, k, aggregation, preserve_sparsity)
    "linear4": ("LINEAR", 4, "SUM", False),
    "kmeans5": ("KMEANS_PLUS_PLUS", 5, "SUM", False),
    "density6": ("DENSITY_BASED", 6, "SUM", False),
    "linear4avg": ("LINEAR", 4, "AVG", False),
    "sparse5": ("KMEANS_PLUS_PLUS", 5, "SUM", True),
    "sparselinear4": ("LINEAR", 4, "SUM", True),
}


def run_model_case(name: str, method: str, k: int, aggregation: str, preserve_sparsity: bool, out: dict) -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(16, 6)).astype(np.float32)
    y = rng.normal(size=(16, 3)).astype(np.float32)
    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(10, activation="tanh", name="d1"),
            keras.layers.Dense(3, name="d2"),
        ]
    )
    model.set_weights(model_weights(preserve_sparsity))
    kwargs = {
        "number_of_clusters": k,
        "cluster_centroids_init": CentroidInitialization[method],
        "cluster_gradient_aggregation": GradientAggregation[aggregation],
    }
    if preserve_sparsity:
        clustered = experimental_cluster.cluster_weights(model, preserve_sparsity=True, **kwargs)
    else:
        clustered = tfmot.clustering.keras.cluster_weights(model, **kwargs)
    out[f"{name}|x"], out[f"{name}|y"] = x, y
    for layer_name, w in zip(("d1", "d2"), model_weights(preserve_sparsity)[::2]):
        out[f"{name}|{layer_name}|kernel0"] = w
    out[f"{name}|out0"] = clustered(x, training=False).numpy()
    for _ in range(STEPS):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(clustered(x, training=True) - y))
        grads = tape.gradient(loss, clustered.trainable_variables)
        for v, g in zip(clustered.trainable_variables, grads):
            v.assign_sub(LR * tf.convert_to_tensor(g))
    for wrapper in clustered.layers:
        layer_name = wrapper.layer.name
        ((_, centroids),) = wrapper.cluster_centroids.items()
        out[f"{name}|{layer_name}|centroids3"] = centroids.numpy()
    stripped = tfmot.clustering.keras.strip_clustering(clustered)
    out[f"{name}|layers"] = np.array(json.dumps([[type(la).__name__, la.name] for la in stripped.layers]))
    for layer in stripped.layers:
        out[f"{name}|{layer.name}|kernel3"] = layer.kernel.numpy()
        out[f"{name}|{layer.name}|bias3"] = layer.bias.numpy()
    out[f"{name}|out3"] = stripped(x).numpy()


def main() -> None:
    out: dict[str, np.ndarray] = {}
    for name, w in tensors().items():
        out[f"w_{name}"] = w
        for method in ("LINEAR", "DENSITY_BASED", "KMEANS_PLUS_PLUS"):
            factory = clustering_centroids.CentroidsInitializerFactory.get_centroid_initializer(
                CentroidInitialization[method]
            )
            for k in (2, 5, 12):
                for preserve_sparsity in (False, True):
                    if preserve_sparsity and k < 3:
                        continue
                    centroids = factory(tf.constant(w), k, preserve_sparsity=preserve_sparsity).get_cluster_centroids()
                    out[f"init|{name}|{method}|{k}|{preserve_sparsity}"] = np.asarray(centroids)
    for name, case in MODEL_CASES.items():
        run_model_case(name, *case, out)
    np.savez(OUT, **out)


if __name__ == "__main__":
    main()
