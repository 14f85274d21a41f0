""":class:`QuantizeConfig`: how one annotated layer is quantized, whatever the scheme says (TFMOT's ``QuantizeConfig``).

Two kinds, one class:

* the config itself, ``QuantizeConfig(quantize_output=True)`` or ``(float=True)``, for a layer the scheme does not
  cover: quantize around it, pass a quantized input through, or keep it float without a warning;
* a subclass, TFMOT's way: it carries its own quantizers, returned by ``get_weights_and_quantizers``,
  ``get_activations_and_quantizers`` and ``get_output_quantizers`` (and implements ``set_quantize_activations``,
  ``get_config``), as every subclass of TFMOT's abstract ``QuantizeConfig`` does. This is declared by the class,
  not detected: :attr:`QuantizeConfig.carries_quantizers` is False for ``QuantizeConfig`` itself and True for a
  subclass, which may set ``carries_quantizers = False`` to be a plain per-layer choice. Its layer is a compute
  layer, quantized by :class:`ste.qat.QuantizeWrapper` through
  :meth:`QuantizeConfig.scheme`, a :class:`ste.qat.Scheme` on the same path as the built-in ones: its inputs are
  quantized by the model's scheme where needed, its weights, activations and outputs by the config. What the
  methods return is checked when the wrapper is built (see :class:`ste.qat.QuantizeWrapper`): lists of (weight or
  activation, quantizer) pairs and a list of output quantizers, each a :class:`ste.quantizers.Quantizer`, else
  :class:`ste.errors.ParameterTypeError`. A subclass that quantizes nothing on a layer with weights (TFMOT's
  ``NoOpQuantizeConfig``) warns, since the layer stays float inside a wrapper that looks quantized: a warning
  rather than an error, because keeping a layer float is a legitimate choice, which ``QuantizeConfig(float=True)``
  makes without one.
"""

from __future__ import annotations

from typing import Any

import keras

from .._common._arguments import check_bool
from ..quantizers import Quantizer
from ._copy import float_copy
from ._scheme import Role, Scheme
from ._wrapper import QuantizeWrapper

__all__ = ["QuantizeConfig"]


class QuantizeConfig:
    """A per-layer choice for :func:`ste.qat.quantize_annotate_layer` (see the module docstring).

    ``quantize_output=True`` quantizes the layer's inputs and its output (the layer itself is kept as it is, e.g. a
    custom activation); ``quantize_output=False`` passes a quantized input through; ``float=True`` keeps the layer
    float without a warning. A subclass (TFMOT's way) quantizes the layer with the quantizers TFMOT's methods
    below return (those two arguments are then unused, but for ``float=True``), unless it declares
    ``carries_quantizers = False``.
    """

    quantize_output: bool = True
    float: bool = False

    def __init__(self, quantize_output: bool = True, float: bool = False) -> None:
        self.quantize_output = check_bool("ste.qat.QuantizeConfig", "quantize_output", quantize_output)
        self.float = check_bool("ste.qat.QuantizeConfig", "float", float)

    # -- TFMOT's interface ------------------------------------------------------------------------------

    def get_weights_and_quantizers(self, layer: keras.layers.Layer) -> list[tuple[Any, Quantizer]]:
        """``[(weight variable, quantizer), ...]``: the layer's weights to quantize, e.g.
        ``[(layer.kernel, ste.qat.LastValueQuantizer(8, per_axis=False, symmetric=True, narrow_range=True))]``.
        Each weight is read as its quantized value while the layer runs."""
        del layer
        return []

    def get_activations_and_quantizers(self, layer: keras.layers.Layer) -> list[tuple[Any, Quantizer]]:
        """``[(activation function, quantizer), ...]``, e.g. ``[(layer.activation,
        ste.qat.MovingAverageQuantizer(8, per_axis=False, symmetric=False, narrow_range=False))]``."""
        del layer
        return []

    def set_quantize_weights(self, layer: keras.layers.Layer, quantize_weights: list[Any]) -> None:
        """Not called by ste: the weights :meth:`get_weights_and_quantizers` names are replaced by their quantized
        values without it (Keras 3's kernels are read-only properties, so ``layer.kernel = ...`` cannot run). An
        override is harmless."""
        del layer, quantize_weights

    def set_quantize_activations(self, layer: keras.layers.Layer, quantize_activations: list[Any]) -> None:
        """Put the quantize-aware activations (in the order of :meth:`get_activations_and_quantizers`) on the layer,
        e.g. ``layer.activation = quantize_activations[0]``. Called once, when the layer is built."""
        del layer, quantize_activations

    def get_output_quantizers(self, layer: keras.layers.Layer) -> list[Quantizer]:
        """Quantizers of the layer's outputs (one per output; ``[]``: the outputs are not quantized)."""
        del layer
        return []

    def get_config(self) -> dict[str, Any]:
        return {"quantize_output": self.quantize_output, "float": self.float}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> QuantizeConfig:
        return cls(**config)

    # -- how the rewrite uses it ------------------------------------------------------------------------

    @property
    def carries_quantizers(self) -> bool:
        """Whether this config quantizes the layer with its own quantizers (the ``get_*`` methods): False for
        ``QuantizeConfig`` itself, True for a subclass; a subclass overrides it with a class attribute
        (``carries_quantizers = False``) to be a plain per-layer choice."""
        return type(self) is not QuantizeConfig

    def role(self) -> Role | None:
        if self.float:
            return None
        if self.carries_quantizers:
            return "compute"
        return "output" if self.quantize_output else "passthrough"

    def scheme(self, base: Scheme) -> Scheme:
        """The scheme that quantizes a compute layer annotated with this config: one that wraps it in a
        :class:`ste.qat.QuantizeWrapper` when the config carries its own quantizers, else ``base``."""
        return _ConfigScheme(self, base) if self.carries_quantizers else base

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QuantizeConfig) or type(other) is not type(self):
            return False
        return other.get_config() == self.get_config()

    def __hash__(self) -> int:
        return hash(type(self))

    def __repr__(self) -> str:
        shown = ", ".join(f"{key}={value!r}" for key, value in self.get_config().items())
        return f"{type(self).__name__}({shown})"


class _ConfigScheme(Scheme):
    """The scheme of one layer annotated with a config that carries quantizers: the layer (its own activation
    included) runs inside a :class:`ste.qat.QuantizeWrapper`; nothing is folded or fused into it; its float inputs
    are quantized by the model's scheme; its output is quantized as the config says."""

    def __init__(self, config: QuantizeConfig, base: Scheme) -> None:
        self.config = config
        self.base = base
        self.name = base.name

    def role(self, layer: keras.layers.Layer) -> Role | None:
        return "compute"

    def quantize(
        self, layer: keras.layers.Layer, batch_norm: keras.layers.Layer | None, activation: Any
    ) -> keras.layers.Layer:
        return QuantizeWrapper(float_copy(layer, "ste.qat.QuantizeWrapper"), self.config, name=layer.name)

    def copy_weights(
        self, new: keras.layers.Layer, layer: keras.layers.Layer, batch_norm: keras.layers.Layer | None
    ) -> None:
        new.layer.set_weights(layer.get_weights())

    def folds(self, layer: keras.layers.Layer, batch_norm: keras.layers.Layer) -> bool:
        return False

    def fuses(self, activation: Any) -> bool:
        return activation is keras.activations.linear

    def fuses_into(self, layer: keras.layers.Layer, activation: Any) -> bool:
        return activation is (getattr(layer, "activation", None) or keras.activations.linear)  # its own only

    def activation_quantizer(self, name: str, after: Any = None) -> Quantizer | None:
        return self.base.activation_quantizer(name, after)

    def casts_integers(self, layer: keras.layers.Layer) -> bool:
        return False  # the layer gets what the float layer got

    def output_quantized(self, new: keras.layers.Layer) -> bool | None:
        return bool(new.quantizes_output)
