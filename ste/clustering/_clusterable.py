"""Which weights of a layer are clustered: TFMOT's ``ClusteringRegistry`` for Keras 3's built-in layers, and the
:class:`ClusterableLayer` interface for any other layer.

A layer is *covered* when it is a :class:`ClusterableLayer`, a layer of the table below, or a layer without
trainable weights (nothing to cluster, as TFMOT's registry). Only the kernels are clustered (never a bias):

==========================================================  ==========================
layer                                                       clustered
==========================================================  ==========================
Dense, Conv1D/2D/3D, Conv1D/2D/3DTranspose, DepthwiseConv2D  ``kernel``
SeparableConv1D/2D                                          ``pointwise_kernel``
Embedding                                                   ``embeddings``
BatchNormalization, LayerNormalization                      nothing (left as is)
==========================================================  ==========================

The table holds Keras's own classes, matched exactly (a subclass may compute something else with the same
attribute), as ``ste.sparsity``'s table does; ste's own subclasses (``ste.layers``' quantized layers) read their
parent's weights and are covered with it.
"""

from __future__ import annotations

import abc
from typing import Any

import keras

from .._common._origin import defined_by_ste

__all__ = ["ClusterableLayer", "clusterable_weights", "covered", "has_kernel"]


class ClusterableLayer(abc.ABC):
    """A custom layer that says which of its weights to cluster (TFMOT's ``ClusterableLayer``).

    Derive from both ``keras.layers.Layer`` and this class and return ``(name, variable)`` pairs of the layer's own
    weights from :meth:`get_clusterable_weights`; ``cluster_weights`` then clusters each of them::

        class MyDense(keras.layers.Dense, ste.clustering.ClusterableLayer):
            def get_clusterable_weights(self):
                return [("kernel", self.kernel)]
    """

    @abc.abstractmethod
    def get_clusterable_weights(self) -> list[tuple[str, Any]]:
        """``(name, variable)`` pairs of the weights to cluster (called once the layer is built)."""


_TABLE: tuple[tuple[type[keras.layers.Layer], tuple[str, ...]], ...] = (
    (keras.layers.SeparableConv1D, ("pointwise_kernel",)),
    (keras.layers.SeparableConv2D, ("pointwise_kernel",)),
    (keras.layers.DepthwiseConv2D, ("kernel",)),
    (keras.layers.Conv1DTranspose, ("kernel",)),
    (keras.layers.Conv2DTranspose, ("kernel",)),
    (keras.layers.Conv3DTranspose, ("kernel",)),
    (keras.layers.Conv1D, ("kernel",)),
    (keras.layers.Conv2D, ("kernel",)),
    (keras.layers.Conv3D, ("kernel",)),
    (keras.layers.Dense, ("kernel",)),
    (keras.layers.Embedding, ("embeddings",)),
    (keras.layers.BatchNormalization, ()),
    (keras.layers.LayerNormalization, ()),
)


def _names(layer: keras.layers.Layer) -> tuple[str, ...] | None:
    for kind, names in _TABLE:
        if type(layer) is kind:  # exact classes: a subclass may compute something else with the same attribute
            return names
    if defined_by_ste(type(layer)):  # ste's quantized layers keep their parent's weights
        return next((names for kind, names in _TABLE if isinstance(layer, kind)), None)
    return None


def covered(layer: keras.layers.Layer) -> bool:
    """Whether ``cluster_weights`` knows what to cluster in ``layer`` (perhaps nothing)."""
    if isinstance(layer, ClusterableLayer) or _names(layer) is not None:
        return True
    return layer.built and not layer.trainable_weights


def clusterable_weights(layer: keras.layers.Layer) -> list[tuple[str, Any]]:
    """The ``(name, variable)`` pairs to cluster in a built ``layer`` (empty when there are none)."""
    if isinstance(layer, ClusterableLayer):
        return list(layer.get_clusterable_weights())
    names = _names(layer) or ()
    return [(name, getattr(layer, name)) for name in names]


def has_kernel(layer: keras.layers.Layer) -> bool:
    """Whether ``layer`` has something to cluster (before it is built, from its class)."""
    if isinstance(layer, ClusterableLayer):
        return True
    return bool(_names(layer))
