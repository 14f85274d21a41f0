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

A low-bit layer whose input quantizer maps every non-negative value to one value (``sign``: all +1) and that a
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
from ..errors import UnsupportedLayerError
from ..quantizers import AbsmaxPerToken, AbsmeanTernary, Quantizer, Sign
from ._attention import is_attention, quantize_attention
from ._int8 import Int8Scheme
from ._scheme import InputFeed, Role, Scheme
from ._transformer import QuantEinsumDense, QuantEmbedding, QuantReversibleEmbedding

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
        self.int8 = Int8Scheme(per_output_channel=False)  # its 8-bit Dense ends convert with LCE (per tensor)
        self._ends: set[int] = set()
        self._eight_bit_inputs: set[int] = set()
        self._collapses: bool | None = None

    @abc.abstractmethod
    def low_bit_options(self, kind: type = L.Dense) -> dict[str, Any]:
        """The arguments of the low-bit layer for a Keras layer of class ``kind`` (a key of ``low_bit``): new
        quantizers (and constraint) for one layer."""

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

    def quantizes_in_place(self, layer: keras.layers.Layer) -> bool:
        return is_attention(layer)  # its projections get the scheme's quantizers (see ste.qat._attention)

    def computed_weights(self, layer: keras.layers.Layer) -> list[Any]:
        return self.int8.computed_weights(layer)

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
        return self.int8.compute_class(layer) in self.low_bit and id(layer) not in self._ends

    def quantize(
        self, layer: keras.layers.Layer, batch_norm: keras.layers.Layer | None, activation: Any
    ) -> keras.layers.Layer:
        if self.quantizes_in_place(layer):  # an end's projections stay 8-bit, as an end layer does
            end = id(layer) in self._ends
            return quantize_attention(
                layer,
                "ste.quantize_model",
                lambda projection: self._projection(projection, end),
                lambda child: self.int8.compute_class(child) in (L.Dense, L.EinsumDense),
                self.activation_quantizer,
            )
        return self._quantized(layer, activation, eight_bit=not self.is_low_bit(layer))

    def _quantized(self, layer: keras.layers.Layer, activation: Any, eight_bit: bool) -> keras.layers.Layer:
        kind = self.int8.compute_class(layer)
        if eight_bit or kind not in self.low_bit:
            new = self.int8.quantize(layer, None, activation)
            if not (kind is L.Embedding and type(new) is QuantEmbedding):  # a lookup has no input quantizer
                new.input_quantizer = self.int8.activation_quantizer(f"{layer.name}_input_quant")
            return new
        config = complete_config(layer, layer.get_config())
        if "activation" in config:
            config["activation"] = keras.activations.serialize(activation)
        options = self.low_bit_options(kind)
        if kind is L.EinsumDense and "input_quantizer" in options:  # one token: every axis the equation contracts
            options["input_quantizer"] = AbsmaxPerToken(axis=_contracted_axes(layer.equation))
        if id(layer) in self._eight_bit_inputs:  # a non-negative input (adapt_input): 8 bits, the kernel low-bit
            options["input_quantizer"] = self.int8.activation_quantizer(f"{layer.name}_input_quant")
        return self.low_bit[kind](**{**config, **options})

    def _projection(self, layer: keras.layers.Layer, eight_bit: bool) -> keras.layers.Layer:
        """The quantized projection of an attention layer, built, with ``layer``'s weights."""
        activation = getattr(layer, "activation", None) or keras.activations.linear
        new = self._quantized(layer, activation, eight_bit)
        new.name = layer.name
        config = layer.get_build_config()
        if config:
            new.build_from_config(config)
        self.int8.copy_weights(new, layer, None)
        return new

    def copy_weights(
        self, new: keras.layers.Layer, layer: keras.layers.Layer, batch_norm: keras.layers.Layer | None
    ) -> None:
        self.int8.copy_weights(new, layer, None)

    def activation_quantizer(self, name: str, after: Any = None) -> Quantizer | None:
        return None  # every compute layer quantizes its own input


class BinaryScheme(LowBitScheme):
    """larq-style binarization: Dense and Conv2D get ``input_quantizer="sign"``, ``kernel_quantizer="sign"``
    (sign(0) = +1, gradient dy·1[|x| <= 1]: larq's ``ste_sign``) and ``kernel_constraint="weight_clip"`` (latent
    weights clipped to [−1, 1]); the first and the last compute layers stay 8-bit (``keep_ends=True``). A binarized
    Conv2D exported with ``model.export`` converts to Larq Compute Engine's ``LceBconv2d``. See the module docstring."""

    name = "binary"
    low_bit: ClassVar[dict[type, type]] = {L.Conv2D: ste_layers.QuantConv2D, L.Dense: ste_layers.QuantDense}

    def low_bit_options(self, kind: type = L.Dense) -> dict[str, Any]:
        return {"input_quantizer": Sign(), "kernel_quantizer": Sign(), "kernel_constraint": WeightClip(1.0)}

    def check(self, layer: keras.layers.Layer, path: str, owner: str) -> None:
        if isinstance(layer, L.Embedding):
            raise UnsupportedLayerError(
                f"{owner}(scheme='binary'): the layer '{path}' ({type(layer).__name__}) is an embedding table, which "
                f"the binary scheme cannot take: a table of signs (±1, no scale) loses every magnitude, and the 8-bit "
                f"table it would keep instead is not a binary model. Fix: scheme='ternary' (BitNet b1.58: ternary "
                f"tables and Dense/EinsumDense kernels, 8-bit embedding and head) or scheme='int8'; or keep the "
                f"table out: annotate it with ste.qat.quantize_annotate_layer(layer, "
                f"config=ste.qat.QuantizeConfig(float=True)) and call ste.qat.quantize_apply."
            )


def _contracted_axes(equation: str) -> tuple[int, ...]:
    """The axes of an ``EinsumDense`` input that its ``equation`` contracts with the kernel (the channels of one
    token: ``(-1,)`` for ``"abc,cd->abd"``, ``(-2, -1)`` for the attention output ``"abcd,cde->abe"``), counted
    from the end where the input's subscripts allow (after an ellipsis, or all of them without one)."""
    inputs, output = equation.replace(" ", "").split("->")
    source, kernel = inputs.split(",")
    head, dots, tail = source.rpartition("...")
    letters = tail if dots else source
    axes = [i - len(letters) for i, letter in enumerate(letters) if letter in kernel and letter not in output]
    if dots:
        axes += [i for i, letter in enumerate(head) if letter in kernel and letter not in output]
    return tuple(axes) or (-1,)


class TernaryScheme(LowBitScheme):
    """BitNet b1.58 (Ma et al. 2024) with Keras's ``TernaryDense`` rule: Dense, EinsumDense (attention projections
    included), Conv1D and Conv2D get ``kernel_quantizer=AbsmeanTernary(epsilon=0)`` (W_t = sign(W)·[|W| > Δ]·γ,
    Δ = 0.5·γ, γ = mean|W| per tensor) and ``input_quantizer=AbsmaxPerToken()`` (8-bit absmax per token: over the
    channels of one position, the last axis, or every axis an EinsumDense contracts: heads × head_dim for an
    attention output projection); Embedding tables (a ``ReversibleEmbedding``'s ``embeddings`` and
    ``reverse_embeddings`` too) get the same ternary quantizer, its reverse projection the per-token input
    quantizer; all with straight-through gradients. The first and the last compute layers stay 8-bit
    (``keep_ends=True``; BitNet keeps its embedding and head in high precision); the attention matmuls and
    LayerNormalization stay float, as in BitNet. See the module docstring."""

    name = "ternary"
    low_bit: ClassVar[dict[type, type]] = {
        L.Conv1D: ste_layers.QuantConv1D,
        L.Conv2D: ste_layers.QuantConv2D,
        L.Dense: ste_layers.QuantDense,
        L.EinsumDense: QuantEinsumDense,
        L.Embedding: QuantEmbedding,
        **({L.ReversibleEmbedding: QuantReversibleEmbedding} if QuantReversibleEmbedding is not None else {}),
    }

    def low_bit_options(self, kind: type = L.Dense) -> dict[str, Any]:
        tables = {
            L.Embedding: ("embeddings_quantizer",),
            getattr(L, "ReversibleEmbedding", None): ("embeddings_quantizer", "reverse_embeddings_quantizer"),
        }
        options: dict[str, Any] = {
            name: AbsmeanTernary(epsilon=0.0) for name in tables.get(kind, ("kernel_quantizer",))
        }
        if kind is not L.Embedding:  # a lookup's inputs are indices
            options["input_quantizer"] = AbsmaxPerToken()
        return options
