"""Collaborative optimization (TFMOT's ``collab_opts``): quantization-aware training of a pruned or clustered model
that keeps what pruning or clustering made.

* :class:`PrunePreserveScheme` (``"prune_preserve"``, TFMOT's ``Default8BitPrunePreserveQuantizeScheme``, PQAT):
  each kernel that has zeros keeps a sparsity mask (1 where the stripped kernel is non-zero), and the quantizer reads
  ``weight · mask`` through :data:`ste.sparsity.apply_mask` (the pruned weights get no gradient), then fake-quantizes
  it as the int8 scheme does.
* :class:`ClusterPreserveScheme` (``"cluster_preserve"``, TFMOT's ``Default8BitClusterPreserveQuantizeScheme``,
  CQAT): each clustered kernel gets trainable centroids, its distinct values, and the quantizer reads
  ``centroids[argmin |w − c|]`` through :data:`ste.clustering.cluster_assign` (the latent weights get the gradient
  straight through, each centroid the sum of its members' gradients), then fake-quantizes it.
  ``preserve_sparsity=True`` (``"prune_cluster_preserve"``, PCQAT) does both: the centroids are the distinct
  *non-zero* values, and the mask zeroes the pruned weights after the gather.

Only the kernel quantizer changes: every other choice (ranges, per-channel axes, folding, fusing) is the int8
scheme's, so the deployed model is the int8 scheme's with the kernels these constraints keep. What holds, in
training and in the int8 TFLite model (symmetric quantization maps 0 to 0, and equal float values to equal
integers):

* PQAT: every weight that was zero in the stripped kernel reads as exactly 0 in every call, and is int8 0;
* CQAT: a kernel reads as at most ``k`` distinct values, ``k`` its number of distinct values when quantized
  (at most the ``number_of_clusters`` it was clustered with). Its int8 tensor has at most ``k`` distinct integers per
  quantization range: over the whole tensor for per-tensor kernels (Dense, Conv1D, Embedding, ...), per output
  channel for per-channel ones (Conv2D, DepthwiseConv2D, whose channels have their own scales);
* PCQAT: both, with the zero counted among the ``k`` values.

A kernel is taken as clustered when one of its non-zero values occurs more than once and it has at most
:data:`MAX_CLUSTERS` distinct values; a kernel without zeros or not clustered is quantized as the int8 scheme does.
A model in which no kernel has anything to preserve is refused before anything is built, as is a model that still
holds pruning or clustering wrappers (strip them first).

A batch norm is folded into the convolution before it as the int8 scheme folds it, with the constraints applied to
the kernel before the per-channel factor (:meth:`PreservingWeightFakeQuant.call`): a folded kernel is per-channel,
and scaling a channel keeps its zeros and the number of its distinct values.
``MultiHeadAttention`` quantizes its four kernels with one quantizer, so its sparsity and clusters are not kept.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from .._common._arguments import check_bool
from ..clustering import cluster_assign, cluster_indices
from ..errors import ParameterError
from ..quantizers import Quantizer
from ..quantizers._base import as_tensor
from ..sparsity import apply_mask
from ._int8 import Int8Scheme
from ._quantizers import WeightFakeQuant

__all__ = [
    "MAX_CLUSTERS",
    "ClusterPreserveScheme",
    "Default8BitClusterPreserveQuantizeScheme",
    "Default8BitPrunePreserveQuantizeScheme",
    "PreservingWeightFakeQuant",
    "PrunePreserveScheme",
]

#: The most distinct values a kernel may have to be taken as clustered: int8 has 255 levels in one range.
MAX_CLUSTERS = 256

#: The quantized layer's kernel-quantizer argument → the float layer's attribute holding that kernel.
_KERNELS = {
    "kernel_quantizer": "kernel",
    "depthwise_quantizer": "depthwise_kernel",
    "pointwise_quantizer": "pointwise_kernel",
    "embeddings_quantizer": "embeddings",
}
_SHARED_QUANTIZER = (keras.layers.MultiHeadAttention,)  # one kernel quantizer for four kernels


@keras.saving.register_keras_serializable(package="ste")
class PreservingWeightFakeQuant(WeightFakeQuant):
    """:class:`ste.qat.WeightFakeQuant` of a kernel read through the constraints of collaborative optimization.

    ``clusters=k > 0``: the kernel is first read as ``centroids[index]`` with ``k`` trainable centroids (the variable
    ``cluster_centroids``). In a training call, ``index = argmin |w − c|`` and the read is
    :data:`ste.clustering.cluster_assign`, whose gradient reaches the latent weights and the centroids; the indices
    are kept in the non-trainable ``pulling_indices`` (TFMOT's name), which other calls read. ``sparsity=True``: the
    result is then multiplied by a fixed mask (the non-trainable ``sparsity_mask``, the kernel's shape) through
    :data:`ste.sparsity.apply_mask`. Last, it is fake-quantized on ±max|value| (per tensor or per channel,
    ``channel_axes``). The scheme sets the variables from the stripped model's kernel (:meth:`initialize`).
    """

    #: A layer that folds a batch norm passes its per-channel factor to :meth:`call` instead of scaling the kernel.
    constrains_before_folding = True

    def __init__(
        self,
        bits: int = 8,
        channel_axes: int = 0,
        narrow_range: bool = True,
        sparsity: bool = False,
        clusters: int = 0,
        **kwargs: Any,
    ) -> None:
        owner = "ste.qat.PreservingWeightFakeQuant"
        self.sparsity = check_bool(owner, "sparsity", sparsity)
        if isinstance(clusters, bool) or not isinstance(clusters, (int, np.integer)) or clusters < 0:
            raise ParameterError(
                f"{owner}: clusters must be an integer >= 0 (0: not clustered); received {clusters!r}."
            )
        self.clusters = int(clusters)
        super().__init__(bits=bits, channel_axes=channel_axes, narrow_range=narrow_range, **kwargs)

    def build(self, input_shape: Any) -> None:
        if self.sparsity:
            self.sparsity_mask = self.add_weight(
                name="sparsity_mask", shape=tuple(input_shape), initializer="ones", trainable=False
            )
        if self.clusters:
            self.cluster_centroids = self.add_weight(
                name="cluster_centroids", shape=(self.clusters,), initializer="zeros", trainable=True
            )
            self.pulling_indices = self.add_weight(
                name="pulling_indices",
                shape=tuple(input_shape),
                initializer="zeros",
                dtype="int32",
                trainable=False,
                aggregation="only_first_replica",
            )
        self.built = True

    def initialize(self, mask: np.ndarray | None, centroids: np.ndarray | None, kernel: np.ndarray) -> None:
        """Set the mask, the centroids and each weight's centroid index (of ``kernel``, the stripped one)."""
        if mask is not None:
            self.sparsity_mask.assign(mask.astype(self.sparsity_mask.dtype))
        if centroids is not None:
            self.cluster_centroids.assign(centroids.astype(self.cluster_centroids.dtype))
            index = np.argmin(np.abs(kernel[..., None] - centroids), axis=-1)  # the first one on a tie
            self.pulling_indices.assign(index.astype(np.int32))

    def constrained(self, inputs: Any, training: Any = None) -> tf.Tensor:
        """The kernel as the constraints read it, before fake quantization. In training, the index of each weight's
        nearest centroid is found (and kept in ``pulling_indices``); otherwise the kept indices are read, so that
        inference, and the converter, which folds the gather of two constants into the int8 kernel, see the
        clustering of the last training step."""
        x = as_tensor(inputs)
        if self.clusters:
            centroids = tf.cast(self.cluster_centroids.value, x.dtype)
            if training:
                self.pulling_indices.assign(cluster_indices(x, centroids))
                x = cluster_assign(x, centroids)
            else:
                x = tf.gather(centroids, self.pulling_indices.value)
        if self.sparsity:
            x = apply_mask(x, tf.cast(self.sparsity_mask.value, x.dtype))
        return x

    def call(self, inputs: Any, training: Any = None, channel_scale: Any = None) -> tf.Tensor:
        """``channel_scale``: a batch norm's per-output-channel factor s, when the layer folds one. The constraints
        hold on the kernel itself, so the quantizer reads ``constrained(W) · s``: each output channel keeps its zeros
        and at most ``k`` values, as in the kernels TFLite's converter folds for TFMOT."""
        x = self.constrained(inputs, training)
        if channel_scale is not None:
            x = x * tf.cast(channel_scale, x.dtype)
        return self._fake_quantize(x)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "sparsity": self.sparsity, "clusters": self.clusters}


@dataclass(frozen=True)
class _Plan:
    """What one kernel keeps: its mask (``None``: no zeros kept) and its initial centroids (``None``: not
    clustered), from the stripped ``kernel``."""

    mask: np.ndarray | None
    centroids: np.ndarray | None
    kernel: np.ndarray


def _values(variable: Any) -> np.ndarray:
    return np.asarray(variable.numpy()).astype(np.float64)


class _PreserveScheme(Int8Scheme):
    """The int8 scheme whose kernel quantizers keep a pruned or clustered model's structure (see the module
    docstring). Subclasses set ``keeps_zeros`` and ``keeps_clusters``."""

    keeps_zeros: bool = False
    keeps_clusters: bool = False
    tfmot_name: str = ""
    per_output_channel = False  # TFMOT's collaborative schemes quantize Dense per tensor

    def __init__(self) -> None:
        self._plans: dict[tuple[int, str], _Plan] = {}
        self._pending: dict[int, _Plan] = {}

    def _owner(self) -> str:
        return f"ste.quantize_model(scheme={self!r})"

    def role(self, layer: keras.layers.Layer) -> Any:
        strip = getattr(type(layer), "strip_with", None)
        if isinstance(strip, str):
            raise ParameterError(
                f"{self._owner()}: the layer '{layer.name}' is still a {type(layer).__name__} wrapper; the scheme "
                f"reads the pruned or clustered kernels of a stripped model. Fix: model = {strip}(model) first, then "
                f"quantize it."
            )
        return super().role(layer)

    def _plan(self, values: np.ndarray) -> tuple[_Plan | None, str]:
        """The plan for one kernel, and a note of what it holds (for the error naming every kernel)."""
        zeros = values == 0
        nonzero = values[~zeros]
        distinct = np.unique(nonzero)
        clustered = distinct.size < nonzero.size and distinct.size + int(zeros.any()) <= MAX_CLUSTERS
        note = f"{int(zeros.sum())} zeros and {distinct.size} distinct non-zero values in {values.size} weights"
        mask = (~zeros).astype(np.float64) if self.keeps_zeros and zeros.any() else None
        centroids = None
        if self.keeps_clusters and clustered:
            centroids = distinct if mask is not None else np.unique(values)
        if mask is None and centroids is None:
            return None, note
        return _Plan(mask, centroids, values), note

    def prepare(self, compute_layers: list[keras.layers.Layer]) -> None:
        self._plans, self._pending = {}, {}
        notes, unkept = [], []
        for layer in compute_layers:
            for argument, attribute in _KERNELS.items():
                variable = getattr(layer, attribute, None)
                if variable is None or not isinstance(variable, keras.Variable):
                    continue
                plan, note = self._plan(_values(variable))
                notes.append(f"'{layer.name}' {attribute}: {note}")
                if plan is None:
                    continue
                if isinstance(layer, _SHARED_QUANTIZER):
                    unkept.append(layer.name)
                    continue
                self._plans[(id(layer), argument)] = plan
        for layer in compute_layers:  # attention: its projections' kernels
            if isinstance(layer, _SHARED_QUANTIZER) and layer.name not in unkept:
                for variable in layer.trainable_weights:
                    if len(variable.shape) >= 2 and self._plan(_values(variable))[0] is not None:
                        unkept.append(layer.name)
                        break
        kept = self._plans.values()
        if not self._plans or (self.keeps_clusters and not any(plan.centroids is not None for plan in kept)):
            raise ParameterError(self._nothing_to_keep(notes))
        if self.keeps_zeros and self.keeps_clusters and not any(plan.mask is not None for plan in kept):
            raise ParameterError(self._nothing_to_keep(notes))
        if unkept:
            warnings.warn(
                f"{self._owner()}: {', '.join(repr(name) for name in unkept)} (MultiHeadAttention) quantize their "
                f"kernels with one quantizer each, so their zeros and shared values are not kept during training. "
                f"Fix: keep them float (ste.qat.quantize_annotate_layer(layer, ste.qat.QuantizeConfig(float=True)) "
                f"and quantize_apply), or accept it.",
                UserWarning,
                stacklevel=4,
            )

    def _nothing_to_keep(self, notes: list[str]) -> str:
        seen = (
            "; ".join(notes[:6]) + ("; ..." if len(notes) > 6 else "")
            if notes
            else "no kernel that the scheme quantizes; a model that ste.quantize_model returned has none, so pass the "
            "stripped float model, not its quantization-aware copy"
        )
        if self.keeps_clusters and self.keeps_zeros:
            what = "a clustered kernel with zeros (pruned, then clustered with preserve_sparsity=True)"
            fix = (
                "prune, strip, then cluster with ste.clustering.cluster_weights(model, k, preserve_sparsity=True) and "
                "strip; or, for a clustered model without zeros, "
                "scheme=ste.qat.Default8BitClusterPreserveQuantizeScheme() (preserve_sparsity=False)"
            )
        elif self.keeps_clusters:
            what = (
                f"a clustered kernel (a non-zero value shared by several weights, at most {MAX_CLUSTERS} distinct "
                f"values)"
            )
            fix = (
                "cluster first: ste.clustering.cluster_weights(model, number_of_clusters), train, "
                "ste.clustering.strip_clustering(...), then quantize; or use scheme='int8'"
            )
        else:
            what = "a kernel with zeros"
            fix = (
                "prune first: ste.sparsity.prune_low_magnitude(model, ...), fit with "
                "ste.sparsity.UpdatePruningStep(), ste.sparsity.strip_pruning(...), then quantize; or use "
                "scheme='int8'"
            )
        return f"{self._owner()}: expected {what} to preserve; the model has none ({seen}). Fix: {fix}."

    def weight_quantizer(self, layer: keras.layers.Layer, argument: str, channel_axes: int) -> Quantizer:
        plan = self._plans.get((id(layer), argument))
        if plan is None:
            return super().weight_quantizer(layer, argument, channel_axes)
        clusters = 0 if plan.centroids is None else int(plan.centroids.size)
        quantizer = PreservingWeightFakeQuant(
            bits=self.weight_bits, channel_axes=channel_axes, sparsity=plan.mask is not None, clusters=clusters
        )
        self._pending[id(quantizer)] = plan
        return quantizer

    def copy_weights(
        self, new: keras.layers.Layer, layer: keras.layers.Layer, batch_norm: keras.layers.Layer | None
    ) -> None:
        super().copy_weights(new, layer, batch_norm)
        for inner in new._flatten_layers():
            plan = self._pending.pop(id(inner), None)
            if plan is not None:
                inner.initialize(plan.mask, plan.centroids, plan.kernel)

    def __repr__(self) -> str:
        return f"ste.qat.{self.tfmot_name}()"


class PrunePreserveScheme(_PreserveScheme):
    """Pruning-preserving QAT (PQAT; TFMOT's ``Default8BitPrunePreserveQuantizeScheme``, also
    ``ste.qat.Default8BitPrunePreserveQuantizeScheme`` and ``"prune_preserve"``): the int8 scheme, with the zeros of
    a stripped pruned model kept exactly zero (see the module docstring)."""

    name = "prune_preserve"
    keeps_zeros = True
    tfmot_name = "Default8BitPrunePreserveQuantizeScheme"


class ClusterPreserveScheme(_PreserveScheme):
    """Cluster-preserving QAT (CQAT; TFMOT's ``Default8BitClusterPreserveQuantizeScheme``, also
    ``ste.qat.Default8BitClusterPreserveQuantizeScheme`` and ``"cluster_preserve"``): the int8 scheme, with each
    kernel of a stripped clustered model read as its trainable centroids. ``preserve_sparsity=True`` (PCQAT,
    ``"prune_cluster_preserve"``) also keeps its zeros (see the module docstring)."""

    keeps_clusters = True
    tfmot_name = "Default8BitClusterPreserveQuantizeScheme"

    def __init__(self, preserve_sparsity: bool = False) -> None:
        super().__init__()
        self.preserve_sparsity = check_bool(
            "ste.qat.Default8BitClusterPreserveQuantizeScheme", "preserve_sparsity", preserve_sparsity
        )
        self.keeps_zeros = self.preserve_sparsity
        self.name = "prune_cluster_preserve" if self.preserve_sparsity else "cluster_preserve"

    def __repr__(self) -> str:
        return f"ste.qat.{self.tfmot_name}(preserve_sparsity={self.preserve_sparsity})"


#: TFMOT's names (``tfmot.experimental.combine``).
Default8BitPrunePreserveQuantizeScheme = PrunePreserveScheme
Default8BitClusterPreserveQuantizeScheme = ClusterPreserveScheme
