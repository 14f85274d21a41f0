"""Which weights of a layer are pruned: :class:`PrunableLayer` (a custom layer's ``get_prunable_weights``), or the
built-in table of Keras 3 layers (TFMOT's ``prune_registry``).

* Dense, Conv1D/2D/3D, Conv1D/2D/3DTranspose, EinsumDense: ``kernel``;
* DepthwiseConv1D/2D: their (depthwise) ``kernel``; SeparableConv1D/2D: ``pointwise_kernel`` (as TFMOT);
* Embedding: ``embeddings``;
* MultiHeadAttention: the kernels of its query, key, value and output projections.

``ste.layers``' quantized layers subclass these Keras layers and are covered with them. N:M sparsity runs along the
input-channel axis of a Dense or convolution kernel (axis −2; −1 for a transposed convolution, whose kernel is
``(..., out, in)``); other layers refuse it.
"""

from __future__ import annotations

import abc
from typing import Any

import keras

from .._errors import ParameterError, UnsupportedLayerError

__all__ = ["PrunableLayer", "check_weights", "input_channel_axis", "is_prunable", "prunable_weights"]


class PrunableLayer(abc.ABC):
    """Mix into a custom layer to say which of its weights ``prune_low_magnitude`` prunes (TFMOT's
    ``PrunableLayer``); any layer with a ``get_prunable_weights()`` method is accepted the same way."""

    @abc.abstractmethod
    def get_prunable_weights(self) -> list[Any]:
        """The layer's variables to prune (e.g. ``[self.kernel]``)."""


_KERNEL = (
    keras.layers.Dense,
    keras.layers.Conv1D,
    keras.layers.Conv2D,
    keras.layers.Conv3D,
    keras.layers.Conv1DTranspose,
    keras.layers.Conv2DTranspose,
    keras.layers.Conv3DTranspose,
    keras.layers.EinsumDense,
)
_TRANSPOSED = (keras.layers.Conv1DTranspose, keras.layers.Conv2DTranspose, keras.layers.Conv3DTranspose)
_DEPTHWISE = (keras.layers.DepthwiseConv1D, keras.layers.DepthwiseConv2D)
_SEPARABLE = (keras.layers.SeparableConv1D, keras.layers.SeparableConv2D)


def _custom(layer: keras.layers.Layer) -> bool:
    return isinstance(layer, PrunableLayer) or callable(getattr(layer, "get_prunable_weights", None))


def is_prunable(layer: keras.layers.Layer) -> bool:
    """Whether ``layer`` has weights ``prune_low_magnitude`` knows how to prune."""
    return _custom(layer) or isinstance(
        layer, (*_KERNEL, *_DEPTHWISE, *_SEPARABLE, keras.layers.Embedding, keras.layers.MultiHeadAttention)
    )


def prunable_weights(layer: keras.layers.Layer) -> list[Any]:
    """The built layer's variables to prune."""
    if _custom(layer):
        return list(layer.get_prunable_weights())
    if isinstance(layer, _KERNEL):
        return [layer.kernel]
    if isinstance(layer, _DEPTHWISE):
        return [layer.kernel]
    if isinstance(layer, _SEPARABLE):
        return [layer.pointwise_kernel]
    if isinstance(layer, keras.layers.Embedding):
        return [layer.embeddings]
    if isinstance(layer, keras.layers.MultiHeadAttention):
        return [sub.kernel for sub in (layer._query_dense, layer._key_dense, layer._value_dense, layer._output_dense)]
    return []


def input_channel_axis(layer: keras.layers.Layer) -> int | None:
    """The kernel axis N:M groups run along, or None when the layer has no such axis."""
    if isinstance(layer, _TRANSPOSED):
        return -1
    if isinstance(layer, _DEPTHWISE) or isinstance(layer, keras.layers.EinsumDense):
        return None
    if isinstance(layer, (keras.layers.Dense, keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D)):
        return -2
    if isinstance(layer, _SEPARABLE):
        return -2
    return None


def check_weights(
    layer: keras.layers.Layer,
    weights: list[Any],
    block: tuple[int, ...],
    pattern: tuple[int, int] | None,
    axis: int | None,
    owner: str = "ste.sparsity.prune_low_magnitude",
) -> None:
    """Refuse a built layer's prunable weights that the block or N:M pattern cannot cover."""
    where = f"{owner}: layer '{layer.name}' ({type(layer).__name__})"
    if not weights:
        raise UnsupportedLayerError(
            f"{where} has no weight to prune (no kernel). Fix: prune the layers that carry kernels (Dense, "
            f"convolutions, Embedding, ...), or give a custom layer a get_prunable_weights() method."
        )
    for weight in weights:
        if tuple(block) != (1, 1) and len(weight.shape) != 2:
            raise ParameterError(
                f"{where}: block_size={tuple(block)} needs rank-2 weights; '{weight.path}' has shape "
                f"{tuple(weight.shape)}. Fix: use block_size=(1, 1) for this layer."
            )
        if pattern is not None:
            if axis is None:
                raise UnsupportedLayerError(
                    f"{where}: sparsity_m_by_n needs an input-channel axis, which this layer's weight does not have "
                    f"(N:M runs along a Dense or convolution kernel's input channels). Fix: prune it without "
                    f"sparsity_m_by_n, or leave it dense."
                )
            channels = weight.shape[axis]
            if channels % pattern[1]:
                raise ParameterError(
                    f"{where}: sparsity_m_by_n={pattern} groups {pattern[1]} input channels, but '{weight.path}' has "
                    f"{channels} (shape {tuple(weight.shape)}), not a multiple of {pattern[1]}. Fix: give the layer "
                    f"a multiple of {pattern[1]} input channels, or leave it dense."
                )
