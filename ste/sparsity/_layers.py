"""Which weights of a layer are pruned: :class:`PrunableLayer` (a custom layer's ``get_prunable_weights``), or the
built-in table of Keras 3 layers (TFMOT's ``prune_registry``).

* Dense, Conv1D/2D/3D, Conv1D/2D/3DTranspose, EinsumDense: ``kernel``;
* DepthwiseConv1D/2D: their (depthwise) ``kernel``; SeparableConv1D/2D: ``depthwise_kernel`` and
  ``pointwise_kernel`` (TFMOT prunes the pointwise one only); with ``sparsity_m_by_n``, the ``pointwise_kernel`` only
  (the one kernel that sums over input channels; the depthwise one stays dense, named in the warning);
* Embedding: ``embeddings``; ReversibleEmbedding (Keras 3.13+, KerasHub's too): ``embeddings`` and, untied,
  ``reverse_embeddings``;
* MultiHeadAttention: the kernels of its query, key, value and output projections;
* SimpleRNN, LSTM, GRU, and ``keras.layers.RNN`` over SimpleRNNCell, LSTMCell or GRUCell cells (stacked too): each
  cell's ``kernel`` and ``recurrent_kernel`` (TFMOT's ``_RNN_CELLS_WEIGHTS_MAP``). As in TFMOT, each of them gets one
  mask over the whole weight, the gates side by side (LSTM's ``kernel`` is ``(inputs, 4·units)``, gates i, f, c, o),
  so a gate's columns can hold more or fewer zeros than another's.

The table holds Keras's own classes, matched exactly, as TFMOT's registry matches them: a subclass of ``Dense`` may
use its kernel differently, so it is refused until it says what to prune (derive it from :class:`PrunableLayer`). A
subclass that overrides none of ``__init__``, ``build``, ``call`` and ``get_config`` computes as its parent does and is
covered with it (KerasHub's ``ReversibleEmbedding``, Keras's class under another name). ste's own subclasses
(``ste.layers``' quantized layers, ``ste.qat``'s ``QuantEinsumDense``, ``QuantEmbedding`` and
``QuantMultiHeadAttention``) read their parent's weights and are covered with it. N:M sparsity runs along the
input-channel axis of a Dense, convolution or RNN kernel (axis −2; −1 for a transposed convolution, whose kernel is
``(..., out, in)``), and along the contracted axis of an EinsumDense kernel (:func:`contracted_axis`), so of each of
MultiHeadAttention's projections; other layers refuse it.
"""

from __future__ import annotations

import abc
from typing import Any

import keras

from .._common._abstract import Extension
from .._common._origin import table_class
from ..errors import ParameterError, UnsupportedLayerError

__all__ = [
    "PrunableLayer",
    "check_weights",
    "contracted_axis",
    "has_m_by_n_axes",
    "input_channel_axis",
    "is_prunable",
    "m_by_n_axes",
    "prunable_weights",
    "unsupported_reason",
]


class PrunableLayer(Extension):
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
_RNN = (keras.layers.SimpleRNN, keras.layers.LSTM, keras.layers.GRU, keras.layers.RNN)
_RNN_CELLS = (keras.layers.SimpleRNNCell, keras.layers.LSTMCell, keras.layers.GRUCell)
_REVERSIBLE: tuple[type, ...] = tuple(
    kind for kind in [getattr(keras.layers, "ReversibleEmbedding", None)] if kind is not None
)  # Keras 3.13+
_TABLE = (
    *_KERNEL,
    *_DEPTHWISE,
    *_SEPARABLE,
    *_REVERSIBLE,
    keras.layers.Embedding,
    keras.layers.MultiHeadAttention,
    *_RNN,
)


def _custom(layer: Any) -> bool:
    return isinstance(layer, PrunableLayer) or callable(getattr(layer, "get_prunable_weights", None))


def _kind(layer: Any) -> type | None:
    """The table's class that ``layer`` computes as (:func:`~ste._common._origin.table_class`), or None."""
    return table_class(type(layer), _TABLE)


def _cells(layer: Any) -> list[Any]:
    cell = layer.cell
    return list(cell.cells) if isinstance(cell, keras.layers.StackedRNNCells) else [cell]


def _cell_prunable(cell: Any) -> bool:
    return table_class(type(cell), _RNN_CELLS) is not None or _custom(cell)


def is_prunable(layer: keras.layers.Layer) -> bool:
    """Whether ``layer`` has weights ``prune_low_magnitude`` knows how to prune."""
    if _custom(layer):
        return True
    kind = _kind(layer)
    if kind is None:
        return False
    if issubclass(kind, keras.layers.RNN):
        return all(_cell_prunable(cell) for cell in _cells(layer))
    return True


def unsupported_reason(layer: keras.layers.Layer) -> str:
    """Why ``layer`` cannot be pruned, and the fix (for a layer :func:`is_prunable` refuses)."""
    where = f"layer '{layer.name}' ({type(layer).__name__})"
    parent = next((kind for kind in _TABLE if isinstance(layer, kind)), None)
    custom_fix = (
        "derive it from ste.sparsity.PrunableLayer as well and return the variables to prune from "
        "get_prunable_weights()"
    )
    if parent is not None and issubclass(parent, keras.layers.RNN) and type(layer) in _RNN:
        cells = ", ".join(type(cell).__name__ for cell in _cells(layer) if not _cell_prunable(cell))
        return (
            f"{where} holds the cell(s) {cells}, which are not SimpleRNNCell, LSTMCell or GRUCell. Fix: give such a "
            f"cell a get_prunable_weights() method (ste.sparsity.PrunableLayer) returning the variables to prune."
        )
    if parent is not None:
        example = "[self.kernel]" if parent in _KERNEL else "the variables it reads as its weights"
        return (
            f"{where} subclasses keras.layers.{parent.__name__}, and ste.sparsity prunes Keras's own classes only, "
            f"as TFMOT's registry does (a subclass may use its weights differently). Fix: {custom_fix} "
            f"(e.g. {example})."
        )
    return (
        f"{where} has no kernel to prune. Fix: prune Dense, convolution, Embedding, EinsumDense, "
        f"MultiHeadAttention or SimpleRNN/LSTM/GRU layers, or give a custom layer a get_prunable_weights() method "
        f"(ste.sparsity.PrunableLayer)."
    )


def prunable_weights(layer: keras.layers.Layer, m_by_n: bool = False) -> list[Any]:
    """The built layer's variables to prune (``m_by_n``: those N:M sparsity prunes, along input channels)."""
    if _custom(layer):
        return list(layer.get_prunable_weights())
    kind = _kind(layer)
    if kind is None:
        return []
    if issubclass(kind, _KERNEL) or issubclass(kind, _DEPTHWISE):
        return [layer.kernel]
    if issubclass(kind, _SEPARABLE):
        return [layer.pointwise_kernel] if m_by_n else [layer.depthwise_kernel, layer.pointwise_kernel]
    if issubclass(kind, keras.layers.Embedding):
        reverse = getattr(layer, "reverse_embeddings", None) if issubclass(kind, _REVERSIBLE) else None
        return [layer.embeddings] if reverse is None else [layer.embeddings, reverse]
    if issubclass(kind, keras.layers.MultiHeadAttention):
        return [sub.kernel for sub in (layer._query_dense, layer._key_dense, layer._value_dense, layer._output_dense)]
    weights: list[Any] = []
    for cell in _cells(layer):  # an RNN
        weights.extend(cell.get_prunable_weights() if _custom(cell) else [cell.kernel, cell.recurrent_kernel])
    return weights


def contracted_axis(equation: str) -> int | None:
    """The kernel axis (negative) that an EinsumDense ``equation`` sums with the innermost contracted axis of its
    input, or None where it contracts none.

    A contracted letter is one of both operands that the output does not hold. Of those, the one written last in the
    input's subscripts is taken: the input's last axis in Keras's equations (``"ab,bc->ac"``: ``b``, axis −2;
    ``"abc,cde->abde"``, MultiHeadAttention's query, key and value: ``c``, axis −3). Where several axes are
    contracted (``"abcd,cde->abe"``, the attention output: ``c`` and ``d``, the heads and the head size), it is the
    innermost, ``d`` (axis −2): a kernel reshaped to ``(K, N)`` for a matrix product flattens the contracted axes
    ``c, d`` into ``K`` in that order, so where the innermost one's size is a multiple of ``n``, groups of ``n``
    along it are exactly the groups of ``n`` consecutive entries of ``K`` that a sparse matrix-product kernel skips
    along.
    """
    operands, _, output = equation.replace(" ", "").partition("->")
    source, _, kernel = operands.partition(",")
    source, kernel = source.replace("...", ""), kernel.replace("...", "")
    contracted = [letter for letter in source if letter in kernel and letter not in output]
    if not contracted:
        return None
    return kernel.index(contracted[-1]) - len(kernel)


def input_channel_axis(layer: keras.layers.Layer) -> int | None:
    """The kernel axis N:M groups run along, or None when the layer has no such axis (or, as MultiHeadAttention,
    one per weight: :func:`m_by_n_axes`)."""
    if isinstance(layer, _TRANSPOSED):
        return -1
    if isinstance(layer, keras.layers.EinsumDense):
        return contracted_axis(layer.equation)
    if isinstance(layer, _DEPTHWISE):
        return None
    if isinstance(layer, (keras.layers.Dense, keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D)):
        return -2
    if isinstance(layer, keras.layers.RNN):
        return -2
    if isinstance(layer, _SEPARABLE):
        return -2
    return None


def has_m_by_n_axes(layer: keras.layers.Layer) -> bool:
    """Whether each of the layer's prunable weights has an N:M axis (known before the layer is built)."""
    return isinstance(layer, keras.layers.MultiHeadAttention) or input_channel_axis(layer) is not None


def m_by_n_axes(layer: keras.layers.Layer, axis: int | None = None, m_by_n: bool = False) -> list[int | None]:
    """The N:M axis of each of the built layer's prunable weights (``m_by_n``: of those N:M sparsity prunes):
    ``axis`` for all where given, else the layer's :func:`input_channel_axis`, or for MultiHeadAttention each
    projection's :func:`contracted_axis`."""
    weights = prunable_weights(layer, m_by_n)
    if axis is None and isinstance(layer, keras.layers.MultiHeadAttention) and not _custom(layer):
        projections = (layer._query_dense, layer._key_dense, layer._value_dense, layer._output_dense)
        return [contracted_axis(projection.equation) for projection in projections]
    return [input_channel_axis(layer) if axis is None else axis] * len(weights)


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
                    f"{where}: sparsity_m_by_n={pattern} groups {pattern[1]} input channels (kernel axis {axis}), "
                    f"but '{weight.path}' has {channels} (shape {tuple(weight.shape)}), not a multiple of "
                    f"{pattern[1]}. Fix: give the layer a multiple of {pattern[1]} input channels, or leave it dense."
                )
