"""What clustering does to one layer of a model, and what stripping does to one clustered layer: the two
:class:`~ste._keras._rewrite.LayerRewrite` behind :func:`ste.clustering.cluster_weights` and
:func:`ste.clustering.strip_clustering` (the model rewriter walks and rebuilds the model)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import keras

from .._keras._rewrite import LayerRewrite
from ._clusterable import clusterable_weights, has_kernel
from ._wrapper import ClusterWeights

__all__ = ["Cluster", "Strip"]


class Cluster(LayerRewrite):
    """Clustering: every covered layer (ste.clustering's table, or a ``ClusterableLayer``) becomes a
    :class:`ClusterWeights`; a layer already clustered is refused."""

    owner = "ste.clustering.cluster_weights"

    def __init__(
        self, wrapper: Callable[[keras.layers.Layer], ClusterWeights], check: Callable[[keras.layers.Layer], Any]
    ) -> None:
        self.wrapper = wrapper
        self._check = check

    def claims(self, layer: keras.layers.Layer) -> bool:
        return isinstance(layer, ClusterWeights) or has_kernel(layer)

    def check(self, layer: keras.layers.Layer, path: str) -> None:
        self._check(layer)  # raises for a layer clustered already, or with fewer values than clusters

    def computes_with(self, layer: keras.layers.Layer) -> list[Any]:
        return [variable for _, variable in clusterable_weights(layer)] if layer.built else []

    def replace(self, layer: keras.layers.Layer, original: keras.layers.Layer) -> keras.layers.Layer:
        return self.wrapper(layer)

    def float_fix(self) -> str:
        return (
            "derive such a layer from ste.clustering.ClusterableLayer (get_clusterable_weights), or leave it "
            "unclustered on purpose with filters="
        )

    def unchanged(self) -> str:
        return "unclustered"


def _call_scope(wrapper: ClusterWeights) -> Any:
    """The autocast scope Keras opens around the wrapper's call: under a mixed-precision policy the layer finds each
    index among the float16 values, so the stripped kernel must too, or it is not the kernel the layer trained
    with."""
    from keras.src import backend  # AutocastScope has no public spelling; Layer.__call__ opens the same one

    compute = wrapper.compute_dtype
    if wrapper.autocast and backend.is_float_dtype(compute) and compute != wrapper.variable_dtype:
        return backend.AutocastScope(compute)
    return contextlib.nullcontext()


class Strip(LayerRewrite):
    """Stripping: each :class:`ClusterWeights` becomes its layer, whose kernels hold their clustered values."""

    owner = "ste.clustering.strip_clustering"

    def claims(self, layer: keras.layers.Layer) -> bool:
        return isinstance(layer, ClusterWeights)

    def computes_with(self, layer: keras.layers.Layer) -> list[Any]:
        return list(layer.layer.weights)

    def replace(self, layer: keras.layers.Layer, original: keras.layers.Layer) -> keras.layers.Layer:
        plain: keras.layers.Layer = layer.layer if isinstance(layer, ClusterWeights) else layer
        with _call_scope(original):
            clustered = {id(variable): value for variable, value in original.clustered_values()}
        for variable, source in zip(plain.weights, original.layer.weights):
            variable.assign(keras.ops.cast(clustered.get(id(source), source.value), variable.dtype))
        return plain

    def float_fix(self) -> str:
        return "nothing to do: stripping leaves the layers that were not clustered as they are"

    def unchanged(self) -> str:
        return "unclustered"
