"""Writes tests/data/tfmot_cluster_centroids.npz: TFMOT 0.8's own initial centroids, for test_init_methods.py.

Run it with a Python that has TensorFlow, tf-keras and tensorflow-model-optimization 0.8 (never a dependency of ste):
``TF_USE_LEGACY_KERAS=1 python tests/clustering/make_tfmot_centroids.py``. Keys: ``w_<name>`` holds a weight
tensor; ``<name>|<method>|<k>|<preserve_sparsity>`` holds TFMOT's centroids for it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf
from tensorflow_model_optimization.python.core.clustering.keras import clustering_centroids
from tensorflow_model_optimization.python.core.clustering.keras.cluster_config import CentroidInitialization

OUT = Path(__file__).resolve().parents[1] / "data" / "tfmot_cluster_centroids.npz"


def main() -> None:
    rng = np.random.default_rng(0)
    pruned = rng.normal(0, 0.3, (10, 10)).astype(np.float32)
    pruned[np.abs(pruned) < 0.2] = 0
    tensors = {
        "normal": rng.normal(0, 0.3, (40, 9)).astype(np.float32),
        "exp": rng.exponential(0.2, (300,)).astype(np.float32),
        "pruned": pruned,
    }
    out = {}
    for name, w in tensors.items():
        out[f"w_{name}"] = w
        for method in ("LINEAR", "DENSITY_BASED", "KMEANS_PLUS_PLUS"):
            factory = clustering_centroids.CentroidsInitializerFactory.get_centroid_initializer(
                CentroidInitialization[method]
            )
            for k in (3, 8, 16):
                for preserve_sparsity in (False, True):
                    centroids = factory(tf.constant(w), k, preserve_sparsity=preserve_sparsity).get_cluster_centroids()
                    out[f"{name}|{method}|{k}|{preserve_sparsity}"] = np.asarray(centroids)
    np.savez(OUT, **out)


if __name__ == "__main__":
    main()
