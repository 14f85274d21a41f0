"""The public calls: :func:`cluster_weights`, :func:`strip_clustering` and :func:`cluster_scope` (TFMOT's
``tfmot.clustering.keras`` names, for Keras 3).

Every argument and every layer is checked before anything is built, so a bad call leaves no half-clustered model
and changes no variable: the number of clusters, the initialization, a layer clustered twice, a layer without a
kernel, more clusters than a kernel has values, and (``strict=True``) a layer the clustering does not cover.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import keras

from .._common._arguments import check_bool
from .._keras._rewrite import Rewriter, copy_layer
from .._keras._scopes import custom_object_scope
from ..errors import ParameterError, UnsupportedLayerError
from ._clusterable import clusterable_weights, has_kernel
from ._config import CentroidInitialization, GradientAggregation, member
from ._init_names import init_name
from ._rewrites import Cluster, Strip
from ._wrapper import ClusterWeights, check_clusters

__all__ = ["cluster_scope", "cluster_weights", "strip_clustering"]

_OWNER = "ste.clustering.cluster_weights"


def _size(variable: Any) -> int:
    size = 1
    for dim in variable.shape:
        size *= int(dim)
    return size


def _check_layer(layer: keras.layers.Layer, k: int, alone: bool) -> bool:
    """Whether ``layer`` is to be wrapped; raises for a layer clustered twice, and (``alone``: the layer was passed
    by itself) for a layer with no kernel. Checks ``k`` against a built layer's kernels."""
    if isinstance(layer, ClusterWeights):
        raise ParameterError(
            f"{_OWNER}: the layer '{layer.name}' is already clustered ({layer.number_of_clusters} clusters). "
            f"Fix: cluster the original float model once, or strip it first (ste.clustering.strip_clustering)."
        )
    if not has_kernel(layer):
        if alone:
            what = "is not a layer ste.clustering covers" if layer.trainable_weights else "has no kernel to cluster"
            raise UnsupportedLayerError(
                f"{_OWNER}: the layer '{layer.name}' ({type(layer).__name__}) {what}. Clustered layers: Dense, "
                f"EinsumDense, Conv1D/2D/3D (and transposed), DepthwiseConv1D/2D, SeparableConv1D/2D, Embedding, "
                f"ReversibleEmbedding, or a layer "
                f"deriving from ste.clustering.ClusterableLayer. Fix: pass one of those, or the whole model (layers "
                f"without a kernel then stay as they are)."
            )
        return False
    if layer.built:
        for name, variable in clusterable_weights(layer):
            if k > _size(variable):
                raise ParameterError(
                    f"{_OWNER}: number_of_clusters={k} is more than the {_size(variable)} values of the weight "
                    f"'{name}' {tuple(variable.shape)} of the layer '{layer.name}'. Fix: pass number_of_clusters <= "
                    f"{_size(variable)}, or cluster the other layers only (cluster_weights on each of them)."
                )
    return True


def cluster_weights(
    to_cluster: Any,
    number_of_clusters: int,
    cluster_centroids_init: Any = CentroidInitialization.KMEANS_PLUS_PLUS,
    preserve_sparsity: bool = False,
    strict: bool = False,
    cluster_gradient_aggregation: Any = GradientAggregation.SUM,
    filters: Any = None,
    **kwargs: Any,
) -> Any:
    """A clustered copy of a Keras 3 model, or a clustered layer (TFMOT's ``cluster_weights``).

    ``to_cluster`` is a Keras 3 model of any kind (Sequential, functional, nested, subclassed, KerasHub's), a layer,
    or a list of layers. Each covered layer (at any depth, inside a transformer block too) becomes a
    :class:`ClusterWeights` around a copy of it: the model or layer given is never changed, and the clustered model
    is not compiled (compile it, as TFMOT's result). Its kernel then has at most ``number_of_clusters`` distinct
    values: ``centroids[argmin |w - c|]``, with centroids initialized by ``cluster_centroids_init``
    (a :class:`CentroidInitialization` member, or a name registered with :func:`ste.clustering.register_init`) and
    trained with the latent weights (the gradient of each centroid is the sum
    of its members' gradients, the latent weights get the straight-through gradient).

    ``preserve_sparsity=True`` keeps the zeros of a pruned kernel exactly zero (TFMOT's sparsity-preserving
    clustering). Weights of rank >= 2 that the clustering does not cover stay as they are, named in one warning;
    ``strict=True`` raises :class:`ste.errors.UnsupportedLayerError` instead, before anything is built. ``filters``
    chooses which covered layers of a model to cluster (a regular expression searched in the layer's name, a layer
    class, a callable ``layer -> bool``, or a list of those, as Keras's ``model.quantize``); the others stay as they
    are without a warning. ``kwargs`` go to each :class:`ClusterWeights` (e.g. ``name`` for a single layer).
    """
    preserve_sparsity = check_bool(_OWNER, "preserve_sparsity", preserve_sparsity)
    strict = check_bool(_OWNER, "strict", strict)
    k = check_clusters(number_of_clusters, preserve_sparsity, _OWNER)
    init = init_name(cluster_centroids_init, _OWNER)
    aggregation = member(GradientAggregation, cluster_gradient_aggregation, _OWNER, "cluster_gradient_aggregation")

    def wrapper(layer: keras.layers.Layer) -> ClusterWeights:
        return ClusterWeights(layer, k, init, preserve_sparsity, aggregation, **kwargs)

    if isinstance(to_cluster, keras.Model):
        rewriter = Rewriter(Cluster(wrapper, lambda layer: _check_layer(layer, k, alone=False)), filters, strict)
        clustered = rewriter.run(to_cluster)
        rewriter.warn(stacklevel=2)
        return clustered
    if filters is not None:
        raise ParameterError(
            f"{_OWNER}: filters selects layers of a model; received a layer or a list of layers with "
            f"filters={filters!r:.60}. Fix: leave filters out, or pass the model."
        )
    if isinstance(to_cluster, (list, tuple)):
        for layer in to_cluster:
            _check_single(layer)
            _check_layer(layer, k, alone=True)
        return [wrapper(copy_layer(layer, _OWNER)) for layer in to_cluster]
    _check_single(to_cluster)
    _check_layer(to_cluster, k, alone=True)
    return wrapper(copy_layer(to_cluster, _OWNER))


def _check_single(layer: Any) -> None:
    if not isinstance(layer, keras.layers.Layer):
        raise ParameterError(
            f"{_OWNER}: expected a Keras 3 model, a layer or a list of layers; received {type(layer).__name__} "
            f"{layer!r}. Fix: pass the keras.Model or keras.layers.Layer itself."
        )


def strip_clustering(to_strip: Any) -> Any:
    """The model (or layer) with every :class:`ClusterWeights` replaced by its layer, whose kernels hold their
    clustered values (TFMOT's ``strip_clustering``), as a copy: the layers keep their classes (a KerasHub model stays
    one), ready for ``ste.to_tflite`` or ``model.save``; the clustered model is not changed."""
    owner = "ste.clustering.strip_clustering"
    if isinstance(to_strip, keras.Model):
        return Rewriter(Strip()).run(to_strip)
    if isinstance(to_strip, ClusterWeights):
        return Strip().replace(copy_layer(to_strip, owner), to_strip)
    if isinstance(to_strip, keras.layers.Layer):
        return to_strip
    raise ParameterError(
        f"{owner}: expected a Keras 3 model or layer; received {type(to_strip).__name__} {to_strip!r}. Fix: pass the "
        f"clustered keras.Model."
    )


@contextlib.contextmanager
def cluster_scope(*custom_objects: Mapping[str, Any]) -> Iterator[None]:
    """TFMOT's ``cluster_scope``: ste's clustering classes as Keras custom objects, plus the ``{name: class}`` dicts
    given (your own :class:`ClusterableLayer` classes). Loading ste registers :class:`ClusterWeights`,
    so a ``.keras`` file of built-in layers loads without the scope."""
    with custom_object_scope(
        "ste.clustering.cluster_scope",
        {"ClusterWeights": ClusterWeights},
        custom_objects,
        "ste.clustering.cluster_scope({'MyLayer': MyLayer})",
    ):
        yield
