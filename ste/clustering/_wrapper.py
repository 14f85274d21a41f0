""":class:`ClusterWeights`: a layer whose kernels are read as their clustered values (TFMOT's ``ClusterWeights``).

For each clustered weight ``w`` (see ``_clusterable.py``) the wrapper owns a trainable ``cluster_centroids_<name>``
variable of ``k`` centroids, initialized from ``w`` when the wrapper is built. In every call the layer runs with
``w`` read as ``cluster_assign(w, centroids)`` (``_op.py``), whichever attribute or sub-layer reads it
(``keras.StatelessScope``), so the latent ``w`` and the centroids both learn. The wrapper is called as the wrapped
layer is (its call signature, :mod:`ste._keras._forwarding`), and builds eagerly, so a wrapper built inside a
training step (an unbuilt ``Sequential`` fitted without a ``keras.Input``) computes its centroids from the kernel's
initial values. TFMOT's ``cluster_centroids`` and ``original_clusterable_weights`` (``{weight name: variable}``) and
``get_clusterable_weights()`` read the same variables.

With ``preserve_sparsity`` (TFMOT's sparsity-preserving clustering) the wrapper also keeps, as non-trainable
variables saved with the model, the mask ``sparsity_mask_<name>`` (1 where the clustered weight was non-zero when
the wrapper was built) and ``centroid_mask_<name>`` (0 at the centroid nearest zero, which the initialization makes
exactly zero). A call uses ``w · mask`` and ``centroids · centroid_mask``: masked weights are exactly zero (their
nearest centroid is the zero one) and get no gradient, and the zero centroid stays zero.
"""

from __future__ import annotations

import numbers
from typing import Any

import keras
import tensorflow as tf

from .._common._arguments import check_bool
from .._keras._forwarding import build_inner, take_call_signature
from .._keras._stateless import call_with_values
from .._patches import apply as apply_patches
from ..errors import NotBuiltError, ParameterError, UnsupportedLayerError
from ._clusterable import clusterable_weights, covered
from ._config import CentroidInitialization, GradientAggregation, member
from ._init_methods import initial_centroids
from ._init_names import init_member, init_name
from ._op import cluster_assign, cluster_indices

__all__ = ["ClusterWeights", "check_clusters"]


def check_clusters(number_of_clusters: Any, preserve_sparsity: bool, owner: str) -> int:
    """``number_of_clusters`` as an int >= 1 (>= 2 with ``preserve_sparsity``), else
    :class:`ste.errors.ParameterError`."""
    least = 2 if preserve_sparsity else 1
    whole = isinstance(number_of_clusters, numbers.Integral) and not isinstance(number_of_clusters, bool)
    if not whole or number_of_clusters < least:  # a numpy integer counts too
        why = " (one centroid is the zero one when preserve_sparsity=True)" if preserve_sparsity else ""
        example = 16
        if isinstance(number_of_clusters, float) and number_of_clusters.is_integer() and number_of_clusters >= least:
            example = int(number_of_clusters)
        raise ParameterError(
            f"{owner}: number_of_clusters must be an integer >= {least}{why}; received {number_of_clusters!r} "
            f"({type(number_of_clusters).__name__}). Fix: pass a Python int, e.g. number_of_clusters={example}."
        )
    return int(number_of_clusters)


@keras.saving.register_keras_serializable(package="ste")
class ClusterWeights(keras.layers.Layer):  # type: ignore[misc]
    """``layer`` with its kernels clustered into ``number_of_clusters`` centroids (see the module docstring).

    Made by :func:`ste.clustering.cluster_weights`; named ``cluster_<layer name>`` as in TFMOT. Saved with the
    layer's config, so a ``.keras`` file loads once ste is loaded.
    """

    #: The call that turns a trained model's wrappers back into plain layers: conversion and QAT ask for it first.
    strip_with = "ste.clustering.strip_clustering"

    def __init__(
        self,
        layer: Any,
        number_of_clusters: int,
        cluster_centroids_init: Any = CentroidInitialization.KMEANS_PLUS_PLUS,
        preserve_sparsity: bool = False,
        cluster_gradient_aggregation: Any = GradientAggregation.SUM,
        **kwargs: Any,
    ) -> None:
        apply_patches()  # once per process: the Keras and TensorFlow patches ste needs (ste/_patches.py)
        owner = "ste.clustering.ClusterWeights"
        if isinstance(layer, dict):
            layer = keras.saving.deserialize_keras_object(layer)
        if not isinstance(layer, keras.layers.Layer) or isinstance(layer, keras.Model):
            kind = "a model" if isinstance(layer, keras.Model) else type(layer).__name__
            raise ParameterError(
                f"{owner}: layer must be a Keras 3 layer (not a model); received {kind} {repr(layer)[:80]}. Fix: "
                f"pass one layer, e.g. ClusterWeights(keras.layers.Dense(8), 16), or cluster a whole model with "
                f"ste.clustering.cluster_weights(model, 16)."
            )
        if isinstance(layer, ClusterWeights):
            raise ParameterError(
                f"{owner}: the layer '{layer.name}' is already clustered. Fix: cluster the original layer once, or "
                f"ste.clustering.strip_clustering the model first."
            )
        preserve_sparsity = check_bool(owner, "preserve_sparsity", preserve_sparsity)
        self.number_of_clusters = check_clusters(number_of_clusters, preserve_sparsity, owner)
        self._init_name = init_name(cluster_centroids_init, owner)
        #: TFMOT's attribute: a CentroidInitialization member for a built-in initialization, else its name.
        self.cluster_centroids_init = init_member(self._init_name)
        self.cluster_gradient_aggregation = member(
            GradientAggregation, cluster_gradient_aggregation, owner, "cluster_gradient_aggregation"
        )
        self.preserve_sparsity = preserve_sparsity
        if not covered(layer):
            raise UnsupportedLayerError(
                f"{owner}: cannot cluster the layer '{layer.name}' ({type(layer).__name__}): it is not one of the "
                f"built-in layers ste.clustering covers. Fix: derive it from ste.clustering.ClusterableLayer and "
                f"return the weights to cluster from get_clusterable_weights()."
            )
        kwargs.setdefault("name", f"cluster_{layer.name}")
        kwargs.setdefault("dtype", layer.dtype_policy)
        super().__init__(**kwargs)
        self.layer = layer
        self._clustered: list[tuple[str, Any, Any, Any, Any]] = []
        take_call_signature(self, layer)
        input_shape = getattr(layer, "_input_shape_arg", None)
        if input_shape is not None:  # Sequential([cluster_weights(Dense(4, input_shape=(8,)), 3), ...]) is built
            self._input_shape_arg = input_shape

    def _maybe_build(self, call_spec: Any) -> None:
        with tf.init_scope():  # see build
            build_inner(self.layer, call_spec)  # a layer built from several inputs
        super()._maybe_build(call_spec)

    def get_clusterable_weights(self) -> list[tuple[str, Any]]:
        """``(name, variable)`` pairs of the wrapped layer's clustered weights (TFMOT's ``get_clusterable_weights``,
        which its wrapper asks the wrapped layer for); the layer must be built."""
        if not self.layer.built:
            raise NotBuiltError(
                f"{self._where()}.get_clusterable_weights(): the wrapped layer is not built, so its weights do not "
                f"exist yet. Fix: call the wrapper on data first (or build it, e.g. wrapper.build((None, 8))), or use "
                f"it in a model with a keras.Input."
            )
        return clusterable_weights(self.layer)

    @property
    def cluster_centroids(self) -> dict[str, Any]:
        """TFMOT's attribute: each clustered weight's name → its centroids, a trainable variable of shape
        ``(number_of_clusters,)`` in the weight's dtype (empty until the wrapper is built)."""
        return {name: centroids for name, _, centroids, _, _ in self._clustered}

    @property
    def original_clusterable_weights(self) -> dict[str, Any]:
        """TFMOT's attribute: each clustered weight's name → the wrapped layer's variable (the latent weights,
        trained straight through; empty until the wrapper is built)."""
        return {name: variable for name, variable, _, _, _ in self._clustered}

    def _where(self) -> str:
        return f"ste.clustering.ClusterWeights '{self.name}' ({type(self.layer).__name__})"

    def build(self, input_shape: Any = None, **shapes: Any) -> None:
        # Eagerly, outside a function being traced: Keras builds an unbuilt Sequential inside the first training
        # step, where a new variable holds no value until the function runs, and the centroids need the kernel's.
        with tf.init_scope():
            self._build(input_shape, **shapes)
        self.built = True

    def _build(self, input_shape: Any, **shapes: Any) -> None:
        if not self.layer.built:  # a layer of several inputs (attention) is built from its shapes by name
            self.layer.build(**shapes) if shapes else self.layer.build(input_shape)
        clustered = []
        for name, variable in clusterable_weights(self.layer):
            size = _size(variable)
            if self.number_of_clusters > size:
                raise ParameterError(
                    f"{self._where()}: number_of_clusters={self.number_of_clusters} is more than the {size} values "
                    f"of its weight '{name}' {tuple(variable.shape)}. Fix: pass number_of_clusters <= {size}, or "
                    f"leave this layer unclustered."
                )
            with tf.init_scope():
                value = tf.convert_to_tensor(variable.value)
                start = initial_centroids(value, self.number_of_clusters, self._init_name, self.preserve_sparsity)
            centroids = self.add_weight(
                name=f"cluster_centroids_{name}",
                shape=(self.number_of_clusters,),
                dtype=variable.dtype,
                initializer="zeros",
                trainable=True,
            )
            centroids.assign(start)
            mask = keep = None
            if self.preserve_sparsity:
                with tf.init_scope():
                    nonzero = tf.not_equal(tf.gather(start, cluster_indices(value, start)), 0)
                    zero = tf.argmin(tf.abs(start), output_type=tf.int32)
                    kept = 1 - tf.one_hot(zero, self.number_of_clusters, dtype=start.dtype)
                mask = self.add_weight(
                    name=f"sparsity_mask_{name}",
                    shape=tuple(variable.shape),
                    dtype=variable.dtype,
                    initializer="zeros",
                    trainable=False,
                )
                mask.assign(tf.cast(nonzero, variable.dtype))
                keep = self.add_weight(
                    name=f"centroid_mask_{name}",
                    shape=(self.number_of_clusters,),
                    dtype=variable.dtype,
                    initializer="zeros",
                    trainable=False,
                )
                keep.assign(kept)
            clustered.append((name, variable, centroids, mask, keep))
        self._clustered = clustered

    def clustered_values(self) -> list[tuple[Any, tf.Tensor]]:
        """``(variable, clustered value)`` for each clustered weight, from the current latent weights and
        centroids."""
        aggregation = self.cluster_gradient_aggregation.value
        values = []
        for _, variable, centroids, mask, keep in self._clustered:
            w = variable.value
            c = centroids.value
            if mask is not None:
                w = w * mask.value
                c = c * keep.value
            values.append((variable, cluster_assign(w, c, aggregation=aggregation)))
        return values

    def call(self, *args: Any, **kwargs: Any) -> Any:
        training = kwargs.pop("training", None)
        if getattr(self.layer, "_call_has_training_arg", False) and training is not None:
            kwargs["training"] = training
        return call_with_values(
            self,
            self.clustered_values(),
            self.layer.variables,  # assignments inside the layer
            lambda: self.layer(*args, **kwargs),
        )

    def compute_output_shape(self, input_shape: Any) -> Any:
        return self.layer.compute_output_shape(input_shape)

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "layer": keras.saving.serialize_keras_object(self.layer),
            "number_of_clusters": self.number_of_clusters,
            "cluster_centroids_init": self._init_name,
            "preserve_sparsity": self.preserve_sparsity,
            "cluster_gradient_aggregation": self.cluster_gradient_aggregation.value,
        }


def _size(variable: Any) -> int:
    size = 1
    for dim in variable.shape:
        size *= int(dim)
    return size
