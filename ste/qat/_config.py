""":class:`QuantizeConfig`: how one annotated layer is quantized, whatever the scheme says (TFMOT's ``QuantizeConfig``).

Two kinds, one name:

* ``QuantizeConfig(quantize_output=True)`` or ``(float=True)``, called on the base itself, for a layer the scheme
  does not cover: quantize around it, pass a quantized input through, or keep it float without a warning. The base
  builds the plain per-layer choice (a private subclass that carries no quantizers);
* a subclass, TFMOT's way: an extension point like every other of ste's (:class:`ste._common._abstract.Extension`).
  TFMOT's six methods are abstract, as in TFMOT's abstract ``QuantizeConfig``: ``get_weights_and_quantizers``,
  ``get_activations_and_quantizers``, ``set_quantize_weights``, ``set_quantize_activations``,
  ``get_output_quantizers`` and ``get_config``. A subclass that leaves one out (or misspells it) is refused when it
  is instantiated, with :class:`ste.errors.MissingMethodError` naming the method and the fix, before any layer is
  built. It carries its own quantizers (:attr:`QuantizeConfig.carries_quantizers`, declared True on the base), or
  declares ``carries_quantizers = False`` to be a plain per-layer choice. Its layer is a compute layer, quantized by
  :class:`ste.qat.QuantizeWrapper` through :meth:`QuantizeConfig.scheme`, a :class:`ste.qat.Scheme` on the same path
  as the built-in ones: its inputs are quantized by the model's scheme where needed, its weights, activations and
  outputs by the config. What the methods return is checked when the wrapper is built (see
  :class:`ste.qat.QuantizeWrapper`): lists of (weight or activation, quantizer) pairs and a list of output
  quantizers, each a :class:`ste.quantizers.Quantizer`, else :class:`ste.errors.ParameterTypeError`. A subclass that
  quantizes nothing on a layer with weights (TFMOT's ``NoOpQuantizeConfig``) warns, since the layer stays float
  inside a wrapper that looks quantized: a warning rather than an error, because keeping a layer float is a
  legitimate choice, which ``QuantizeConfig(float=True)`` makes without one.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import keras

from .._common._abstract import Extension
from .._common._arguments import check_bool
from ..quantizers import Quantizer
from ._copy import float_copy
from ._scheme import Role, Scheme
from ._wrapper import QuantizeWrapper

__all__ = ["QuantizeConfig"]

F = TypeVar("F", bound=Callable[..., Any])

if TYPE_CHECKING:  # a type checker sees the base as concrete: QuantizeConfig(float=True) builds the plain choice

    def _abstract(method: F) -> F:
        return method

else:
    _abstract = abc.abstractmethod


class QuantizeConfig(Extension):
    """A per-layer choice for :func:`ste.qat.quantize_annotate_layer` (see the module docstring).

    ``QuantizeConfig(...)`` itself: ``quantize_output=True`` quantizes the layer's inputs and its output (the layer
    itself is kept as it is, e.g. a custom activation); ``quantize_output=False`` passes a quantized input through;
    ``float=True`` keeps the layer float without a warning. A subclass (TFMOT's way) implements the six abstract
    methods below and quantizes the layer with the quantizers they return (the two arguments are then unused, but
    for ``float=True``), unless it declares ``carries_quantizers = False``.
    """

    quantize_output: bool = True
    float: bool = False
    #: Whether the config quantizes the layer with its own quantizers (the ``get_*`` methods): declared True for a
    #: subclass (TFMOT's kind); a subclass sets ``carries_quantizers = False`` to be a plain per-layer choice.
    carries_quantizers: ClassVar[bool] = True
    _extension_rule: ClassVar[str] = (
        "TFMOT's QuantizeConfig makes the same six methods abstract; a config that quantizes nothing returns [] "
        "from the get_* methods and passes in the set_* ones (or use ste.qat.QuantizeConfig(float=True))."
    )

    if not TYPE_CHECKING:  # type checkers read __init__

        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            # the base called itself builds the plain per-layer choice; a subclass is checked by Extension
            return super().__new__(_PerLayerChoice if cls is QuantizeConfig else cls, *args, **kwargs)

    def __init__(self, quantize_output: bool = True, float: bool = False) -> None:
        self.quantize_output = check_bool("ste.qat.QuantizeConfig", "quantize_output", quantize_output)
        self.float = check_bool("ste.qat.QuantizeConfig", "float", float)

    # -- TFMOT's interface: abstract, as in TFMOT ------------------------------------------------------

    @_abstract
    def get_weights_and_quantizers(self, layer: keras.layers.Layer) -> list[tuple[Any, Quantizer]]:
        """``[(weight variable, quantizer), ...]``: the layer's weights to quantize, e.g.
        ``[(layer.kernel, ste.qat.LastValueQuantizer(8, per_axis=False, symmetric=True, narrow_range=True))]``
        (``[]``: none). Each weight is read as its quantized value while the layer runs."""
        return []

    @_abstract
    def get_activations_and_quantizers(self, layer: keras.layers.Layer) -> list[tuple[Any, Quantizer]]:
        """``[(activation function, quantizer), ...]``, e.g. ``[(layer.activation,
        ste.qat.MovingAverageQuantizer(8, per_axis=False, symmetric=False, narrow_range=False))]`` (``[]``: none)."""
        return []

    @_abstract
    def set_quantize_weights(self, layer: keras.layers.Layer, quantize_weights: list[Any]) -> None:
        """TFMOT's setter of the quantized weights. ste does not call it: the weights
        :meth:`get_weights_and_quantizers` names are replaced by their quantized values without it (Keras 3's
        kernels are read-only properties, so ``layer.kernel = ...`` cannot run); ``pass`` is a complete body."""

    @_abstract
    def set_quantize_activations(self, layer: keras.layers.Layer, quantize_activations: list[Any]) -> None:
        """Put the quantize-aware activations (in the order of :meth:`get_activations_and_quantizers`) on the layer,
        e.g. ``layer.activation = quantize_activations[0]``. Called once, when the layer is built."""

    @_abstract
    def get_output_quantizers(self, layer: keras.layers.Layer) -> list[Quantizer]:
        """Quantizers of the layer's outputs (one per output; ``[]``: the outputs are not quantized)."""
        return []

    @_abstract
    def get_config(self) -> dict[str, Any]:
        """The constructor's arguments (``{}`` for a config that takes none)."""
        return {}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> QuantizeConfig:
        return cls(**config)

    # -- how the rewrite uses it ------------------------------------------------------------------------

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


class _PerLayerChoice(QuantizeConfig):
    """What ``QuantizeConfig(quantize_output=..., float=...)`` builds: a choice that carries no quantizers."""

    carries_quantizers = False

    def get_weights_and_quantizers(self, layer: keras.layers.Layer) -> list[tuple[Any, Quantizer]]:
        return []

    def get_activations_and_quantizers(self, layer: keras.layers.Layer) -> list[tuple[Any, Quantizer]]:
        return []

    def set_quantize_weights(self, layer: keras.layers.Layer, quantize_weights: list[Any]) -> None:
        pass

    def set_quantize_activations(self, layer: keras.layers.Layer, quantize_activations: list[Any]) -> None:
        pass

    def get_output_quantizers(self, layer: keras.layers.Layer) -> list[Quantizer]:
        return []

    def get_config(self) -> dict[str, Any]:
        return {"quantize_output": self.quantize_output, "float": self.float}

    def __repr__(self) -> str:
        return "QuantizeConfig" + super().__repr__()[len(type(self).__name__) :]


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
