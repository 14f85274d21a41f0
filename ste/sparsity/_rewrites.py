"""What pruning does to one layer of a model, and what stripping does to one pruned layer: the two
:class:`~ste._keras._rewrite.LayerRewrite` behind :func:`ste.sparsity.prune_low_magnitude` and
:func:`ste.sparsity.strip_pruning` (the model rewriter walks and rebuilds the model)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from .._keras._rewrite import LayerRewrite
from ._layers import is_prunable, prunable_weights
from ._wrapper import PruneLowMagnitude

__all__ = ["Prune", "Strip", "wrap"]


def wrap(layer: keras.layers.Layer, settings: tuple[Any, ...], axis: int | None) -> PruneLowMagnitude:
    """``layer`` in a :class:`PruneLowMagnitude` with the checked ``settings`` (schedule, block, pooling, N:M
    pattern, gradient, decay) and the N:M ``axis``."""
    schedule, block, pooling, pattern, gradient, decay = settings
    return PruneLowMagnitude(
        layer,
        pruning_schedule=schedule,
        block_size=block,
        block_pooling_type=pooling,
        sparsity_m_by_n=pattern,
        gradient=gradient,
        decay=decay,
        m_by_n_axis=axis,
    )


class Prune(LayerRewrite):
    """Pruning: every prunable layer (``ste.sparsity``'s table, or a ``PrunableLayer``) becomes a
    :class:`PruneLowMagnitude` of the same settings; a layer already pruned is refused."""

    owner = "ste.sparsity.prune_low_magnitude"

    def __init__(self, settings: tuple[Any, ...], check: Callable[[keras.layers.Layer, tuple[Any, ...]], Any]):
        self.settings = settings
        self._check = check
        self.axes: dict[str, int | None] = {}

    def claims(self, layer: keras.layers.Layer) -> bool:
        return isinstance(layer, PruneLowMagnitude) or is_prunable(layer)

    def check(self, layer: keras.layers.Layer, path: str) -> None:
        self._check(layer, self.settings)  # raises for a layer pruned already, or that the settings cannot cover

    def computes_with(self, layer: keras.layers.Layer) -> list[Any]:
        return prunable_weights(layer, self.settings[3] is not None) if layer.built else []

    def replace(self, layer: keras.layers.Layer, original: keras.layers.Layer) -> keras.layers.Layer:
        return wrap(layer, self.settings, self._check(layer, self.settings))

    def float_fix(self) -> str:
        return (
            "give such a layer a get_prunable_weights() method (ste.sparsity.PrunableLayer), or leave it dense on "
            "purpose with filters="
        )

    def unchanged(self) -> str:
        return "dense"


class Strip(LayerRewrite):
    """Stripping: each :class:`PruneLowMagnitude` becomes its layer, whose pruned weights hold ``weight · mask``."""

    owner = "ste.sparsity.strip_pruning"

    def claims(self, layer: keras.layers.Layer) -> bool:
        return isinstance(layer, PruneLowMagnitude)

    def computes_with(self, layer: keras.layers.Layer) -> list[Any]:
        return list(layer.layer.weights)

    def replace(self, layer: keras.layers.Layer, original: keras.layers.Layer) -> keras.layers.Layer:
        plain: keras.layers.Layer = layer.layer if isinstance(layer, PruneLowMagnitude) else layer
        masks = {id(weight): mask for weight, mask, _ in original.pruning_vars}
        for variable, source in zip(plain.weights, original.layer.weights):
            mask = masks.get(id(source))
            value = source.value if mask is None else tf.where(mask.value, source.value, tf.zeros((), source.dtype))
            variable.assign(value)
        return plain

    def float_fix(self) -> str:
        return "nothing to do: stripping leaves the layers that were not pruned as they are"

    def unchanged(self) -> str:
        return "dense"
