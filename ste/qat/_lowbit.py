"""The low-bit schemes ``"binary"`` (larq-style) and ``"ternary"`` (BitNet b1.58), built on the int8 scheme.

A low-bit scheme covers what :class:`ste.qat.Int8Scheme` covers, with three differences:

* Dense and Conv2D (Conv1D too, for ternary) become ``ste.layers`` with low-bit input and kernel quantizers: the
  layer quantizes its own input, so no activation quantizer layer sits between layers
  (:meth:`~ste.qat.Scheme.activation_quantizer` is ``None``);
* the first and the last compute layers of the model (``keep_ends=True``), and compute layers the scheme does not
  make low-bit (DepthwiseConv2D, ...), are the int8 scheme's layers with an 8-bit input quantizer
  (:class:`ste.qat.ActivationFakeQuant`) in the layer;
* batch normalizations are never folded: they stay separate float layers, as in larq (and LayerNormalization
  stays float, as in BitNet); Keras's ``BatchNormalization`` becomes ``ste.layers.BatchNormalization`` (the same
  config and weights, trained on TensorFlow's fused kernel, as larq's tf-keras batch norm is).

A low-bit layer whose input quantizer maps every non-negative value to one value (``ste_sign``: all +1) and that a
non-negative activation feeds (a ReLU, sigmoid, softmax, ... as the graph shows it: :class:`ste.qat.InputFeed`)
would see a constant input and could not learn. :meth:`LowBitScheme.adapt_input` gives such a layer the int8
scheme's 8-bit input quantizer instead, and keeps its low-bit kernel (the weights stay 1-bit; only the layer's
arithmetic is no longer binary); the rewrite names it in a warning (an error under ``strict=True``). The fix in the
model is larq's: a BatchNormalization or a sign-symmetric activation (``hard_tanh``) before the layer. The ternary
scheme's input quantizer (8-bit absmax) keeps 128 levels of a non-negative input, so it changes nothing there.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import keras
import numpy as np

from .. import layers as ste_layers
from .._common._arguments import check_bool
from .._keras._versions import complete_config
from ..constraints import WeightClip
from ..quantizers import AbsmaxPerToken, AbsmeanTernary, Quantizer, SteSign
from ._int8 import Int8Scheme
from ._scheme import InputFeed, Role, Scheme

__all__ = ["BinaryScheme", "LowBitScheme", "TernaryScheme"]

L = keras.layers
_FLOAT = (L.BatchNormalization, ste_layers.BatchNormalization, L.LayerNormalization)


class LowBitScheme(Scheme):
    """The shared part of :class:`BinaryScheme` and :class:`TernaryScheme` (see the module docstring).

    Subclasses give ``low_bit`` (Keras layer class → ``ste.layers`` class) and :meth:`low_bit_options` (the
    quantizer and constraint arguments of a low-bit layer).
    """

    low_bit: ClassVar[dict[type, type]] = {}

    def __init__(self, keep_ends: bool = True) -> None:
        self.keep_ends = check_bool(f"ste.qat.{type(self).__name__}", "keep_ends", keep_ends)
        self.int8 = Int8Scheme()
        self._ends: set[int] = set()
        self._eight_bit_inputs: set[int] = set()
        self._collapses: bool | None = None

    @abc.abstractmethod
    def low_bit_options(self) -> dict[str, Any]:
        """The ``ste.layers`` arguments of a low-bit layer: new quantizers (and constraint) for one layer."""

    def prepare(self, compute_layers: list[keras.layers.Layer]) -> None:
        ends = [compute_layers[0], compute_layers[-1]] if compute_layers and self.keep_ends else []
        self._ends = {id(layer) for layer in ends}
        self._eight_bit_inputs = set()

    def collapses_non_negative(self) -> bool:
        """Whether the low-bit input quantizer maps every non-negative value to one value (sign: +1), measured on
        0, 0.5, ..., 4."""
        if self._collapses is None:
            quantizer = self.low_bit_options().get("input_quantizer")
            if quantizer is None:
                self._collapses = False
            else:
                probe = np.linspace(0.0, 4.0, 9, dtype=np.float32).reshape(1, 9)
                values = keras.ops.convert_to_numpy(quantizer(keras.ops.convert_to_tensor(probe)))
                self._collapses = bool(np.unique(values).size < 2)
        return self._collapses

    def adapt_input(self, layer: keras.layers.Layer, feed: InputFeed) -> str | None:
        if not (feed.non_negative and self.is_low_bit(layer) and self.collapses_non_negative()):
            return None
        self._eight_bit_inputs.add(id(layer))
        quantizer = type(self.low_bit_options()["input_quantizer"]).__name__
        return (
            f"their input quantizer {quantizer} maps every non-negative value to the same value, so they would see "
            f"a constant input and could not learn; their input is quantized to 8 bits instead "
            f"(ste.qat.ActivationFakeQuant), and their kernel stays {self.name}"
        )

    def role(self, layer: keras.layers.Layer) -> Role | None:
        if type(layer) in _FLOAT:
            return "passthrough"  # covered: a float copy
        return self.int8.role(layer)

    def float_layer(self, layer: keras.layers.Layer, owner: str) -> keras.layers.Layer:
        if type(layer) is L.BatchNormalization:  # the same layer on the fused kernel: a low-bit net trains faster
            return ste_layers.BatchNormalization.from_config(complete_config(layer, layer.get_config()))
        return super().float_layer(layer, owner)

    def folds(self, layer: keras.layers.Layer, batch_norm: keras.layers.Layer) -> bool:
        return False

    def fuses(self, activation: Any) -> bool:
        return self.int8.fuses(activation)

    def is_low_bit(self, layer: keras.layers.Layer) -> bool:
        """Whether ``layer`` (a covered compute layer) gets the scheme's low-bit quantizers (else int8)."""
        return type(layer) in self.low_bit and id(layer) not in self._ends

    def quantize(
        self, layer: keras.layers.Layer, batch_norm: keras.layers.Layer | None, activation: Any
    ) -> keras.layers.Layer:
        if not self.is_low_bit(layer):
            new = self.int8.quantize(layer, None, activation)
            new.input_quantizer = self.int8.activation_quantizer(f"{layer.name}_input_quant")
            return new
        config = {**layer.get_config(), "activation": keras.activations.serialize(activation)}
        options = self.low_bit_options()
        if id(layer) in self._eight_bit_inputs:  # a non-negative input (adapt_input): 8 bits, the kernel low-bit
            options["input_quantizer"] = self.int8.activation_quantizer(f"{layer.name}_input_quant")
        return self.low_bit[type(layer)](**{**config, **options})

    def copy_weights(
        self, new: keras.layers.Layer, layer: keras.layers.Layer, batch_norm: keras.layers.Layer | None
    ) -> None:
        self.int8.copy_weights(new, layer, None)

    def activation_quantizer(self, name: str, after: Any = None) -> Quantizer | None:
        return None  # every compute layer quantizes its own input


class BinaryScheme(LowBitScheme):
    """larq-style binarization: Dense and Conv2D get ``input_quantizer="ste_sign"``, ``kernel_quantizer="ste_sign"``
    (sign, sign(0) = +1, gradient dy·1[|x| <= 1]) and ``kernel_constraint="weight_clip"`` (latent weights clipped
    to [−1, 1]); the first and the last compute layers stay 8-bit (``keep_ends=True``). A binarized Conv2D exported
    with ``model.export`` converts to Larq Compute Engine's ``LceBconv2d``. See the module docstring."""

    name = "binary"
    low_bit: ClassVar[dict[type, type]] = {L.Conv2D: ste_layers.QuantConv2D, L.Dense: ste_layers.QuantDense}

    def low_bit_options(self) -> dict[str, Any]:
        return {"input_quantizer": SteSign(), "kernel_quantizer": SteSign(), "kernel_constraint": WeightClip(1.0)}


class TernaryScheme(LowBitScheme):
    """BitNet b1.58 (Ma et al. 2024): Dense, Conv1D and Conv2D get ``kernel_quantizer=AbsmeanTernary()`` (weights
    clip(round(W/(γ + ε)), −1, 1)·γ, γ = mean|W| per tensor) and ``input_quantizer=AbsmaxPerToken()`` (8-bit absmax
    per token: per row of the last axis, the channels of one position), with straight-through gradients; the first
    and the last compute layers stay 8-bit (``keep_ends=True``; BitNet keeps its embedding and head in high
    precision). See the module docstring."""

    name = "ternary"
    low_bit: ClassVar[dict[type, type]] = {
        L.Conv1D: ste_layers.QuantConv1D,
        L.Conv2D: ste_layers.QuantConv2D,
        L.Dense: ste_layers.QuantDense,
    }

    def low_bit_options(self) -> dict[str, Any]:
        return {"input_quantizer": AbsmaxPerToken(), "kernel_quantizer": AbsmeanTernary()}
