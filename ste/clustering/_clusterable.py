"""Which weights of a layer are clustered: TFMOT's ``ClusteringRegistry`` for Keras 3's built-in layers, and the
:class:`ClusterableLayer` interface for any other layer.

A layer is *covered* when it is a :class:`ClusterableLayer`, a layer of the table below, or a layer without
trainable weights (nothing to cluster, as TFMOT's registry). Only the kernels are clustered (never a bias):

==============================================================  ============================================
layer                                                           clustered
==============================================================  ============================================
Dense, EinsumDense, Conv1D/2D/3D, Conv1D/2D/3DTranspose         ``kernel``
DepthwiseConv1D/2D                                              ``kernel``
SeparableConv1D/2D                                              ``depthwise_kernel``, ``pointwise_kernel``
Embedding                                                       ``embeddings``
ReversibleEmbedding (Keras 3.13+, KerasHub's too)               ``embeddings`` and, untied, ``reverse_embeddings``
BatchNormalization, LayerNormalization                          nothing (left as is)
==============================================================  ============================================

A composite layer that is not in the table (``MultiHeadAttention``, a transformer block) is covered through the
layers inside it, which the model rewriter reaches at any depth.

The table holds Keras's own classes, matched exactly (a subclass may compute something else with the same
attribute), as ``ste.sparsity``'s table does: a subclass that overrides none of ``__init__``, ``build``, ``call`` and
``get_config`` computes as its parent and is covered with it (KerasHub's ``ReversibleEmbedding``), and ste's own
subclasses (``ste.layers``' quantized layers) read their parent's weights and are covered with it.
"""

from __future__ import annotations

import abc
from typing import Any

import keras

from .._common._abstract import Extension
from .._common._origin import table_class

__all__ = ["ClusterableLayer", "clusterable_weights", "covered", "has_kernel"]


class ClusterableLayer(Extension):
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


_REVERSIBLE: Any = getattr(keras.layers, "ReversibleEmbedding", None)  # Keras 3.13+
_TABLE: tuple[tuple[type[keras.layers.Layer], tuple[str, ...]], ...] = (
    (keras.layers.SeparableConv1D, ("depthwise_kernel", "pointwise_kernel")),
    (keras.layers.SeparableConv2D, ("depthwise_kernel", "pointwise_kernel")),
    (keras.layers.DepthwiseConv1D, ("kernel",)),
    (keras.layers.DepthwiseConv2D, ("kernel",)),
    (keras.layers.Conv1DTranspose, ("kernel",)),
    (keras.layers.Conv2DTranspose, ("kernel",)),
    (keras.layers.Conv3DTranspose, ("kernel",)),
    (keras.layers.Conv1D, ("kernel",)),
    (keras.layers.Conv2D, ("kernel",)),
    (keras.layers.Conv3D, ("kernel",)),
    (keras.layers.Dense, ("kernel",)),
    (keras.layers.EinsumDense, ("kernel",)),
    *([(_REVERSIBLE, ("embeddings", "reverse_embeddings"))] if _REVERSIBLE is not None else []),
    (keras.layers.Embedding, ("embeddings",)),
    (keras.layers.BatchNormalization, ()),
    (keras.layers.LayerNormalization, ()),
)


_NAMES = dict(_TABLE)


def _names(layer: keras.layers.Layer) -> tuple[str, ...] | None:
    kind = table_class(type(layer), tuple(_NAMES))  # a subclass may compute something else with the same attribute
    return None if kind is None else _NAMES[kind]


def covered(layer: keras.layers.Layer) -> bool:
    """Whether ``cluster_weights`` knows what to cluster in ``layer`` (perhaps nothing)."""
    if isinstance(layer, ClusterableLayer) or _names(layer) is not None:
        return True
    return layer.built and not layer.trainable_weights


def clusterable_weights(layer: keras.layers.Layer) -> list[tuple[str, Any]]:
    """The ``(name, variable)`` pairs to cluster in a built ``layer`` (empty when there are none)."""
    if isinstance(layer, ClusterableLayer):
        return list(layer.get_clusterable_weights())
    names = _names(layer) or ()  # a tied ReversibleEmbedding has no reverse_embeddings
    return [(name, getattr(layer, name)) for name in names if getattr(layer, name, None) is not None]


def has_kernel(layer: keras.layers.Layer) -> bool:
    """Whether ``layer`` has something to cluster (before it is built, from its class)."""
    if isinstance(layer, ClusterableLayer):
        return True
    return bool(_names(layer))
