"""Flattening both ways: ``ChannelsFirstFlatten`` <-> ``Flatten`` of all of a step's features (in NIR's
channels-first order)."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from ._export_context import _Export
from ._graph import _nir
from ._import_context import _Import
from ._layers import ChannelsFirstFlatten
from ._layout import _nir_shape


def _export_flatten(layer: ChannelsFirstFlatten, ctx: _Export) -> Any:
    return _nir().Flatten(input_type={"input": np.array(_nir_shape(ctx.shape))}, start_dim=0, end_dim=-1)


def _import_flatten(node: Any, ctx: _Import) -> list[keras.layers.Layer]:
    rank = len(ctx.shape)
    if int(node.start_dim) not in (0, -rank) or int(node.end_dim) not in (-1, rank - 1):
        raise ctx.refuse(
            node,
            f"flattens dimensions {node.start_dim}..{node.end_dim} of a step's {ctx.shape} "
            f"features; only flattening all of them has a layer here",
            "start_dim=0, end_dim=-1",
        )
    return [] if rank == 1 else [ChannelsFirstFlatten(name=ctx.layer_name())]
