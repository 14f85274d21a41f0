"""The public calls: :func:`cluster_weights`, :func:`strip_clustering` and :func:`cluster_scope` (TFMOT's
``tfmot.clustering.keras`` names, for Keras 3).

Every argument and every layer is checked before anything is built, so a bad call leaves no half-clustered model
and changes no variable: the number of clusters, the initialization, a layer clustered twice, a layer without a
kernel, more clusters than a kernel has values, and (``strict=True``) a layer the clustering does not cover.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import keras

from .._common._arguments import check_bool
from .._keras._scopes import custom_object_scope
from .._keras._versions import complete_config
from ..errors import ParameterError, UnsupportedLayerError
from ._clusterable import clusterable_weights, covered, has_kernel
from ._config import CentroidInitialization, GradientAggregation, member
from ._wrapper import ClusterWeights, check_clusters

__all__ = ["cluster_scope", "cluster_weights", "strip_clustering"]

_OWNER = "ste.clustering.cluster_weights"


def _is_graph_model(model: keras.Model) -> bool:
    from keras.src.models.functional import Functional

    return isinstance(model, (keras.Sequential, Functional))


def _layers(model: keras.Model) -> Iterator[keras.layers.Layer]:
    """Every layer of ``model``, nested models' layers included (not the nested models themselves)."""
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            if not _is_graph_model(layer):
                raise UnsupportedLayerError(
                    f"{_OWNER}: the nested model '{layer.name}' is a subclassed model, whose layers cannot be "
                    f"rewired. Fix: build it as a functional or Sequential model, or cluster its layers where it "
                    f"creates them (cluster_weights(keras.layers.Dense(...), ...))."
                )
            yield from _layers(layer)
        else:
            yield layer


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
                f"Conv1D/2D/3D (and transposed), DepthwiseConv2D, SeparableConv1D/2D, Embedding, or a layer "
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
    **kwargs: Any,
) -> Any:
    """A clustered copy of a Keras 3 model, or a clustered layer (TFMOT's ``cluster_weights``).

    ``to_cluster`` is a functional or Sequential model (nested ones too), a layer, or a list of layers. Each covered
    layer becomes a :class:`ClusterWeights` around the *same* layer object (as TFMOT: the clustered model shares its
    latent weights with the model passed in; train a copy if you need the original kept). Its kernel then has at
    most ``number_of_clusters`` distinct values: ``centroids[argmin |w - c|]``, with centroids initialized by
    ``cluster_centroids_init`` (:class:`CentroidInitialization`) and trained with the latent weights (the gradient
    of each centroid is the sum of its members' gradients, the latent weights get the straight-through gradient).

    ``preserve_sparsity=True`` keeps the zeros of a pruned kernel exactly zero (TFMOT's sparsity-preserving
    clustering). Layers with trainable weights that the clustering does not cover stay as they are, named in one
    warning; ``strict=True`` raises :class:`ste.errors.UnsupportedLayerError` instead. ``kwargs`` go to each
    :class:`ClusterWeights` (e.g. ``name`` for a single layer).
    """
    preserve_sparsity = check_bool(_OWNER, "preserve_sparsity", preserve_sparsity)
    strict = check_bool(_OWNER, "strict", strict)
    k = check_clusters(number_of_clusters, preserve_sparsity, _OWNER)
    init = member(CentroidInitialization, cluster_centroids_init, _OWNER, "cluster_centroids_init")
    aggregation = member(GradientAggregation, cluster_gradient_aggregation, _OWNER, "cluster_gradient_aggregation")

    def wrapper(layer: keras.layers.Layer) -> ClusterWeights:
        return ClusterWeights(layer, k, init, preserve_sparsity, aggregation, **kwargs)

    if isinstance(to_cluster, keras.Model):
        if not _is_graph_model(to_cluster):
            raise UnsupportedLayerError(
                f"{_OWNER}: '{to_cluster.name}' is a subclassed model, whose layers cannot be rewired. Fix: build it "
                f"as a functional or Sequential model, or cluster its layers where it creates them "
                f"(cluster_weights(keras.layers.Dense(...), ...))."
            )
        uncovered = []
        for layer in _layers(to_cluster):
            if not _check_layer(layer, k, alone=False) and not covered(layer):
                uncovered.append(f"'{layer.name}' ({type(layer).__name__})")
        if uncovered and strict:
            raise UnsupportedLayerError(
                f"{_OWNER}(strict=True): ste.clustering does not cover {', '.join(uncovered)}. Fix: derive such a "
                f"layer from ste.clustering.ClusterableLayer (get_clusterable_weights), or pass strict=False to "
                f"keep it unclustered with a warning."
            )
        if uncovered:
            warnings.warn(
                f"{_OWNER}: {len(uncovered)} layer(s) with weights are not covered and stay unclustered: "
                f"{', '.join(uncovered)}. Derive them from ste.clustering.ClusterableLayer, or pass strict=True to "
                f"make this an error.",
                UserWarning,
                stacklevel=2,
            )
        return _clone(to_cluster, lambda layer: wrapper(layer) if has_kernel(layer) else layer)
    if isinstance(to_cluster, (list, tuple)):
        for layer in to_cluster:
            _check_single(layer)
            _check_layer(layer, k, alone=True)
        return [wrapper(layer) for layer in to_cluster]
    _check_single(to_cluster)
    _check_layer(to_cluster, k, alone=True)
    return wrapper(to_cluster)


def _check_single(layer: Any) -> None:
    if not isinstance(layer, keras.layers.Layer):
        raise ParameterError(
            f"{_OWNER}: expected a Keras 3 model, a layer or a list of layers; received {type(layer).__name__} "
            f"{layer!r}. Fix: pass the keras.Model or keras.layers.Layer itself."
        )


def _clone(model: keras.Model, replace: Any) -> keras.Model:
    """``model`` rebuilt with each layer replaced by ``replace(layer)``, nested models rebuilt the same way."""

    def clone_function(layer: keras.layers.Layer) -> keras.layers.Layer:
        if isinstance(layer, keras.Model):
            return _clone(layer, replace)
        if isinstance(layer, keras.layers.InputLayer):
            return layer
        result: keras.layers.Layer = replace(layer)
        return result

    cloned: keras.Model = keras.models.clone_model(model, clone_function=clone_function)
    return cloned


def _call_scope(wrapper: ClusterWeights) -> Any:
    """The autocast scope Keras opens around the wrapper's call: under a mixed-precision policy the layer finds each
    index among the float16 values, so the stripped kernel must too, or it is not the kernel the layer trained
    with."""
    from keras.src import backend  # AutocastScope has no public spelling; Layer.__call__ opens the same one

    compute = wrapper.compute_dtype
    if wrapper.autocast and backend.is_float_dtype(compute) and compute != wrapper.variable_dtype:
        return backend.AutocastScope(compute)
    return contextlib.nullcontext()


def _stripped(wrapper: ClusterWeights) -> keras.layers.Layer:
    """A new layer of the wrapped layer's class and config whose kernels hold their clustered values."""
    layer = wrapper.layer
    with _call_scope(wrapper):
        values = wrapper.clustered_values()
    clustered = {id(variable): keras.ops.cast(value, variable.dtype) for variable, value in values}
    clean = type(layer).from_config(complete_config(layer, layer.get_config()))
    build_config = layer.get_build_config()
    if build_config:
        clean.build_from_config(build_config)
    for new, old in zip(clean.weights, layer.weights):
        new.assign(clustered.get(id(old), old.value))
    return clean


def strip_clustering(to_strip: Any) -> Any:
    """The model (or layer) with every :class:`ClusterWeights` replaced by a plain layer of the wrapped class whose
    kernels hold their clustered values (TFMOT's ``strip_clustering``): same structure as the model first
    clustered, ready for ``ste.to_tflite`` or ``model.save``. Other layers are kept (the same objects)."""
    if isinstance(to_strip, keras.Model):
        if not _is_graph_model(to_strip):
            raise UnsupportedLayerError(
                f"ste.clustering.strip_clustering: '{to_strip.name}' is a subclassed model, whose layers cannot be "
                f"rewired. Fix: strip each ClusterWeights layer it holds (strip_clustering(layer))."
            )
        return _clone(to_strip, lambda layer: _stripped(layer) if isinstance(layer, ClusterWeights) else layer)
    if isinstance(to_strip, ClusterWeights):
        return _stripped(to_strip)
    if isinstance(to_strip, keras.layers.Layer):
        return to_strip
    raise ParameterError(
        f"ste.clustering.strip_clustering: expected a Keras 3 model or layer; received {type(to_strip).__name__} "
        f"{to_strip!r}. Fix: pass the clustered keras.Model."
    )


@contextlib.contextmanager
def cluster_scope(*custom_objects: Mapping[str, Any]) -> Iterator[None]:
    """TFMOT's ``cluster_scope``: ste's clustering classes as Keras custom objects, plus the ``{name: class}`` dicts
    given (your own :class:`ClusterableLayer` classes). ``import ste`` already registers :class:`ClusterWeights`,
    so a ``.keras`` file of built-in layers loads without the scope."""
    with custom_object_scope(
        "ste.clustering.cluster_scope",
        {"ClusterWeights": ClusterWeights},
        custom_objects,
        "ste.clustering.cluster_scope({'MyLayer': MyLayer})",
    ):
        yield
