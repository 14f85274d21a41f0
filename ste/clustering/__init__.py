"""Weight clustering for Keras 3 models, with TFMOT's ``tfmot.clustering.keras`` API.

>>> import ste, keras
>>> model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
>>> clustered = ste.clustering.cluster_weights(model, number_of_clusters=4)   # train it with compile/fit
>>> final = ste.clustering.strip_clustering(clustered)                         # kernels with <= 4 distinct values

Each kernel is read as ``centroids[argmin |w - c|]`` by a straight-through ste op (:data:`cluster_assign`): each
centroid's gradient is the sum of its members' gradients, and the latent weights get the gradient straight through.
See docs/clustering.md.
"""

from ._api import cluster_scope, cluster_weights, strip_clustering
from ._clusterable import ClusterableLayer
from ._config import CentroidInitialization, GradientAggregation
from ._init_methods import initial_centroids
from ._init_names import inits, register_init, unregister_init
from ._op import cluster_assign, cluster_indices
from ._wrapper import ClusterWeights

__all__ = [
    "CentroidInitialization",
    "ClusterWeights",
    "ClusterableLayer",
    "GradientAggregation",
    "cluster_assign",
    "cluster_indices",
    "cluster_scope",
    "cluster_weights",
    "initial_centroids",
    "inits",
    "register_init",
    "strip_clustering",
    "unregister_init",
]
