"""What a quantization scheme is: which layers it covers, and how it quantizes each.

A :class:`Scheme` answers two questions for the graph rewrite of :mod:`ste.qat._rewrite`, which never branches on
a scheme's concrete class:

* :meth:`Scheme.role` — how a layer takes part: ``"compute"`` (it has weights to quantize and gets a quantized
  copy from :meth:`Scheme.quantize`), ``"output"`` (quantized inputs, its output quantized: Add, average pooling),
  ``"shared"`` (its inputs take its output's range: Concatenate), ``"passthrough"`` (a quantized input stays
  quantized: max pooling, reshapes, dropout, padding), or ``None`` (not covered: it stays float);
* :meth:`Scheme.quantize` — the quantized layer for a covered one, optionally with a batch normalization folded in
  and an activation fused; :meth:`Scheme.activation_quantizer` — a new quantizer for one activation tensor;
* :meth:`Scheme.adapt_input` — whether a compute layer's own input quantizer suits what feeds it (an
  :class:`InputFeed`: e.g. only non-negative values, after a ReLU); a scheme that quantizes such an input otherwise
  says how, and the rewrite names the layer in one warning (an error under ``strict=True``).

A layer annotated with a :class:`ste.qat.QuantizeConfig` takes the role the config gives it, whatever the scheme
says; a config that carries its own quantizers is quantized through a scheme of its own (:meth:`QuantizeConfig.scheme
<ste.qat.QuantizeConfig.scheme>`), on the same path.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Literal

import keras

from .._common._abstract import Extension
from .._keras._rewrite import is_weight
from ..quantizers import Quantizer
from ._copy import float_copy

__all__ = ["InputFeed", "Role", "Scheme"]

Role = Literal["compute", "output", "shared", "passthrough"]


@dataclass(frozen=True)
class InputFeed:
    """What feeds a compute layer, as the model's graph shows it (:meth:`Scheme.adapt_input`).

    ``non_negative``: every float input of some call of the layer is known to be ≥ 0 (a ReLU, ReLU6, sigmoid,
    softmax, ... computes it, possibly through pooling, reshapes, dropout, padding or Add/Concatenate of such
    tensors); ``sources`` names what makes it so, e.g. ``("'conv1' (relu)",)``. A model input has an unknown sign.
    """

    non_negative: bool = False
    sources: tuple[str, ...] = ()


class Scheme(Extension):
    """A quantization scheme (see the module docstring). Subclasses: :class:`ste.qat.Int8Scheme`,
    :class:`ste.qat.NBitScheme`, :class:`ste.qat.BinaryScheme`, :class:`ste.qat.TernaryScheme`."""

    name: str = ""

    @abc.abstractmethod
    def role(self, layer: keras.layers.Layer) -> Role | None:
        """How ``layer`` takes part (``None``: the scheme does not cover it)."""

    @abc.abstractmethod
    def quantize(
        self, layer: keras.layers.Layer, batch_norm: keras.layers.Layer | None, activation: Any
    ) -> keras.layers.Layer:
        """A new quantized layer computing ``layer`` (then ``batch_norm``, if given, folded in) then ``activation``;
        its weights are copied by :meth:`copy_weights` once it is built. For a layer it
        :meth:`quantizes_in_place`, ``layer`` is a private copy, which it changes and returns."""

    @abc.abstractmethod
    def copy_weights(
        self, new: keras.layers.Layer, layer: keras.layers.Layer, batch_norm: keras.layers.Layer | None
    ) -> None:
        """Copy the trained float weights of ``layer`` (and ``batch_norm``) into ``new`` (built)."""

    @abc.abstractmethod
    def folds(self, layer: keras.layers.Layer, batch_norm: keras.layers.Layer) -> bool:
        """Whether ``batch_norm`` directly after ``layer`` is folded into it."""

    @abc.abstractmethod
    def fuses(self, activation: Any) -> bool:
        """Whether ``activation`` (a function) runs inside the quantized layer, before its output quantizer."""

    def fuses_into(self, layer: keras.layers.Layer, activation: Any) -> bool:
        """Whether ``activation`` runs inside the quantized ``layer``; the default is :meth:`fuses`, for every
        layer."""
        return self.fuses(activation)

    @abc.abstractmethod
    def activation_quantizer(self, name: str, after: Any = None) -> Quantizer | None:
        """A new quantizer for one activation tensor; ``after`` is the activation function that produced it, if
        known (a scheme may give e.g. softmax outputs a fixed range). ``None``: the tensor stays as it is (a scheme
        whose layers quantize their own inputs, :class:`ste.qat.BinaryScheme`)."""

    def float_layer(self, layer: keras.layers.Layer, owner: str) -> keras.layers.Layer:
        """A new, unbuilt layer that computes what ``layer`` (not a compute layer: a batch norm, pooling, an
        uncovered layer) computes, for the quantized model; its trained weights are copied into it once it is built.
        The default: a layer of the same class and config. A scheme may pick an equivalent class (the low-bit
        schemes train Keras's batch norm as ``ste.layers.BatchNormalization``, on TensorFlow's fused kernel)."""
        return float_copy(layer, owner)

    def check(self, layer: keras.layers.Layer, path: str, owner: str) -> None:
        """Raise an ``ste.errors`` error naming the fix if the compute layer ``layer`` (at ``path``) is one this
        scheme cannot quantize; called for every compute layer before anything is built. The default accepts
        every layer."""
        del layer, path, owner

    def quantizes_in_place(self, layer: keras.layers.Layer) -> bool:
        """Whether :meth:`quantize` changes the compute layer it is given (then it is given a private copy, built,
        with its weights) instead of making a new layer from its config; the default: no."""
        del layer
        return False

    def computed_weights(self, layer: keras.layers.Layer) -> list[Any]:
        """The weights of the compute layer ``layer`` that its quantized layer computes with (quantized); the
        default: every weight of rank >= 2 but biases."""
        return [variable for variable in layer.weights if is_weight(variable)]

    def casts_integers(self, layer: keras.layers.Layer) -> bool:
        """Whether an integer input of the compute layer ``layer`` is cast to its float dtype (then quantized), as
        the float layer's arithmetic promotes it; the default: yes, but for Embedding (its integers are indices)."""
        return not isinstance(layer, keras.layers.Embedding)

    def output_quantized(self, new: keras.layers.Layer) -> bool | None:
        """Whether the layer :meth:`quantize` made (and the rewrite called) quantizes its own output: ``None`` (the
        default) lets the rewrite add an activation quantizer after it; ``True`` or ``False`` says the layer decided,
        and the rewrite adds none."""
        del new
        return None

    def adapt_input(self, layer: keras.layers.Layer, feed: InputFeed) -> str | None:
        """Called after :meth:`prepare`, before anything is built, once for each compute layer that :meth:`prepare`
        was given, with what feeds it. ``None`` (the default): the layer's input is quantized as usual. A sentence
        (e.g. "its input is quantized to 8 bits instead"): the scheme quantizes that layer's input otherwise, because
        its usual input quantizer would lose the input (a sign of a non-negative tensor is a constant);
        :meth:`quantize` then makes the layer so, and the rewrite names the layer and the sentence in one warning,
        or raises :class:`ste.errors.UnsupportedLayerError` under ``strict=True``."""
        del layer, feed
        return None

    def prepare(self, compute_layers: list[keras.layers.Layer]) -> None:
        """Called once before a model is rewritten, with the layers that will get the role ``"compute"`` in the
        order the model computes them (nested models included); a scheme may treat e.g. the first and the last
        differently. The default does nothing."""
        del compute_layers
