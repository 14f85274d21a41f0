"""Pooling both ways: ``AveragePooling2D`` (in a ``TimeDistributed``) <-> ``AvgPool2d`` and ``SumPooling`` <->
``SumPool2d``, unpadded."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from .._time import TimeDistributed
from ._export_context import _Export, _refuse
from ._graph import _nir
from ._import_context import _Import
from ._layers import SumPooling
from ._layout import _pair


def _export_sum_pool(layer: SumPooling, ctx: _Export) -> Any:
    return _nir().SumPool2d(
        kernel_size=np.array(layer.pool_size), stride=np.array(layer.strides), padding=np.array((0, 0))
    )


def _export_avg_pool(layer: keras.layers.AveragePooling2D, ctx: _Export) -> Any:
    if layer.padding != "valid" or layer.data_format != "channels_last":
        raise _refuse(
            layer,
            "pads or is channels first; NIR's AvgPool2d here is unpadded",
            "padding='valid', data_format='channels_last'",
        )
    return _nir().AvgPool2d(
        kernel_size=np.array(layer.pool_size), stride=np.array(layer.strides), padding=np.array((0, 0))
    )


def _pool_arguments(node: Any, ctx: _Import) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if np.any(np.asarray(node.padding) != 0):
        raise ctx.refuse(node, f"pads by {node.padding}", "padding 0 (pad with the convolution in front)")
    return _pair(node.kernel_size, 2), _pair(node.stride, 2)


def _import_avg_pool(node: Any, ctx: _Import) -> list[keras.layers.Layer]:
    size, stride = _pool_arguments(node, ctx)
    pool = keras.layers.AveragePooling2D(size, stride, padding="valid")
    return [TimeDistributed(pool, name=ctx.layer_name())]


def _import_sum_pool(node: Any, ctx: _Import) -> list[keras.layers.Layer]:
    size, stride = _pool_arguments(node, ctx)
    return [SumPooling(size, stride, name=ctx.layer_name())]
