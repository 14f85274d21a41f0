"""The weighted connections both ways: ``Dense`` <-> ``Affine`` / ``Linear`` and ``Conv1D`` / ``Conv2D`` (in a
``TimeDistributed``) <-> ``Conv1d`` / ``Conv2d``, with the padding of each side converted exactly or refused."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from .._time import TimeDistributed
from ._export_context import _Export, _refuse
from ._graph import _nir
from ._import_context import _Import
from ._layout import _keras_shape, _pair


def _export_dense(layer: keras.layers.Dense, ctx: _Export) -> Any:
    nir = _nir()
    if len(ctx.shape) != 1:
        raise _refuse(
            layer,
            f"acts on the last axis of {ctx.shape} features; NIR's Affine takes a vector",
            "flatten the features first",
        )
    weight = np.asarray(layer.kernel.numpy()).T
    if layer.use_bias:
        return nir.Affine(weight=weight, bias=np.asarray(layer.bias.numpy()))
    return nir.Linear(weight=weight)


def _conv_padding(layer: Any) -> tuple[int, ...]:
    kernel = layer.kernel_size
    if layer.padding == "valid":
        return tuple(0 for _ in kernel)
    same = [d * (k - 1) for k, d in zip(kernel, layer.dilation_rate)]
    if any(s != 1 for s in layer.strides) or any(p % 2 for p in same):
        raise _refuse(
            layer,
            "pads 'same' with a stride or an even kernel; TensorFlow then pads one side more, and "
            "NIR's padding is symmetric",
            "padding='valid', or stride 1 with an odd kernel",
        )
    return tuple(p // 2 for p in same)


def _export_conv(layer: Any, ctx: _Export) -> Any:
    nir = _nir()
    if layer.data_format != "channels_last":
        raise _refuse(layer, "is channels first", "data_format='channels_last' (NIR's layout is converted for you)")
    kernel = np.asarray(layer.kernel.numpy())
    rank = kernel.ndim - 2
    weight = np.transpose(kernel, (rank + 1, rank, *range(rank)))  # (k..., in, out) -> (out, in, k...)
    bias = np.asarray(layer.bias.numpy()) if layer.use_bias else np.zeros(weight.shape[0], weight.dtype)
    padding = _conv_padding(layer)
    spatial = tuple(int(n) for n in ctx.shape[:-1])
    if rank == 1:
        return nir.Conv1d(
            input_shape=spatial[0],
            weight=weight,
            stride=int(layer.strides[0]),
            padding=padding[0],
            dilation=int(layer.dilation_rate[0]),
            groups=int(layer.groups),
            bias=bias,
        )
    return nir.Conv2d(
        input_shape=spatial,
        weight=weight,
        stride=tuple(layer.strides),
        padding=padding,
        dilation=tuple(layer.dilation_rate),
        groups=int(layer.groups),
        bias=bias,
    )


def _import_affine(node: Any, ctx: _Import) -> list[keras.layers.Layer]:
    weight = np.asarray(node.weight)
    if weight.ndim != 2:
        raise ctx.refuse(node, f"has a weight of shape {weight.shape}", "a 2-D weight [out, in]")
    if len(ctx.shape) != 1 or ctx.shape[0] != weight.shape[1]:
        raise ctx.refuse(
            node,
            f"takes {weight.shape[1]} inputs and receives features of shape {ctx.shape}",
            "flatten its input (a Flatten node) or fix the weight",
        )
    bias = getattr(node, "bias", None)
    dense = keras.layers.Dense(weight.shape[0], use_bias=bias is not None, name=ctx.layer_name())
    dense.build((None, None, weight.shape[1]))
    dense.set_weights([weight.T] if bias is None else [weight.T, np.asarray(bias)])
    return [dense]


def _import_conv(node: Any, ctx: _Import) -> list[keras.layers.Layer]:
    weight = np.asarray(node.weight)
    rank = weight.ndim - 2
    kernel = weight.shape[2:]
    stride, dilation = _pair(node.stride, rank), _pair(node.dilation, rank)
    if any(s > 1 for s in stride) and any(d > 1 for d in dilation):
        raise ctx.refuse(
            node,
            "has a stride and a dilation > 1 together, which TensorFlow's convolution lacks",
            "a stride or a dilation of 1",
        )
    if isinstance(node.padding, str):
        padding = node.padding
        if padding == "same" and any(s > 1 for s in stride):
            raise ctx.refuse(node, "pads 'same' with a stride > 1 (PyTorch has no such padding)", "integer padding")
    else:
        pads = _pair(node.padding, rank)
        same = tuple(d * (k - 1) for k, d in zip(kernel, dilation))
        if all(p == 0 for p in pads):
            padding = "valid"
        elif all(s == 1 for s in stride) and all(2 * p == q for p, q in zip(pads, same)):
            padding = "same"
        else:
            raise ctx.refuse(
                node,
                f"pads by {pads}, which is neither 'valid' nor TensorFlow's 'same'",
                "padding 0 or (kernel − 1)·dilation/2 with stride 1",
            )
    conv_class = keras.layers.Conv1D if rank == 1 else keras.layers.Conv2D
    conv = conv_class(
        weight.shape[0], kernel, strides=stride, padding=padding, dilation_rate=dilation, groups=int(node.groups)
    )
    channels = ctx.shape[0]
    conv.build((None, *_keras_shape(ctx.shape)))
    if conv.kernel.shape[-2] * int(node.groups) != channels:
        raise ctx.refuse(
            node,
            f"takes {weight.shape[1] * int(node.groups)} channels and receives {channels}",
            "fix the weight or the input",
        )
    conv.set_weights([np.transpose(weight, (*range(2, rank + 2), 1, 0)), np.asarray(node.bias)])
    return [TimeDistributed(conv, name=ctx.layer_name())]
