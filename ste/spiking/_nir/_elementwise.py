"""The per-feature nodes both ways: ``ElementwiseScale`` <-> ``Scale`` and ``ThresholdSpike`` <-> ``Threshold``."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from ._export_context import _Export
from ._graph import LAYER_KEY, SURROGATE_KEY, _nir
from ._import_context import _Import
from ._layers import ElementwiseScale, ThresholdSpike
from ._layout import _channels_last, _nir_array


def _export_scale(layer: ElementwiseScale, ctx: _Export) -> Any:
    scale = np.broadcast_to(layer.scale, ctx.shape)
    return _nir().Scale(scale=np.asarray(_nir_array(scale)))


def _export_threshold(layer: ThresholdSpike, ctx: _Export) -> Any:
    node = _nir().Threshold(threshold=_nir_array(np.broadcast_to(layer.threshold, ctx.shape)))
    node.metadata = {LAYER_KEY: type(layer).__name__, SURROGATE_KEY: repr(layer.surrogate)}
    return node


def _import_scale(node: Any, ctx: _Import) -> list[keras.layers.Layer]:
    return [ElementwiseScale(_channels_last(np.broadcast_to(node.scale, ctx.shape)), name=ctx.layer_name())]


def _import_threshold(node: Any, ctx: _Import) -> list[keras.layers.Layer]:
    threshold = _channels_last(np.broadcast_to(node.threshold, ctx.shape))
    return [ThresholdSpike(threshold, surrogate=ctx.surrogate(), name=ctx.layer_name())]
