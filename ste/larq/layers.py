"""``lq.layers``: larq's quantized layers, :mod:`ste.layers`' classes with larq's two conventions.

Each ``lq.layers.X`` subclasses ``ste.layers.X`` and differs only where larq differs from ste:

- the missing-constraint warning is given when the layer is constructed, for every binary kernel quantizer other
  than ``NoOp`` (larq's rule; ste warns when the layer is built, and only where the quantizer's gradient vanishes
  far out);
- a layer constructed inside ``lq.context.metrics_scope(["flip_ratio"])`` tracks its kernels' flip ratio;
- larq's names: ``activation="hard_tanh"`` (and ``"leaky_tanh"``) mean larq's functions (:mod:`ste.activations`),
  quantizer names mean larq's quantizers (``"magnitude_aware_sign"`` is :class:`ste.larq.quantizers.MagnitudeAwareSign`,
  through :func:`ste.larq.quantizers.get`), constraint arguments read larq's saved configs
  (:func:`ste.larq.constraints.get`),
  ``QuantDepthwiseConv2D`` also takes ``depthwise_quantizer`` (larq's name of its ``kernel_quantizer``), and a larq
  keyword a layer does not take (``pad_values`` on a Dense, ``implementation``) raises
  :class:`ste.errors.ParameterError` saying why (``LARQ_KEYWORDS``).

They compute, save and load exactly as their ``ste.layers`` parents (``isinstance(lq_layer, ste.layers.X)``).
``QuantLocallyConnected1D`` / ``2D`` raise :class:`ste.errors.UnsupportedLayerError` (Keras 3 has no locally connected
layers).
"""

from __future__ import annotations

from typing import Any

import keras

from .. import activations
from .. import layers as _ste_layers
from ..errors import ParameterError
from ..quantizers import NoOp
from . import constraints, context, quantizers

__all__ = [
    "QuantConv1D",
    "QuantConv1DTranspose",
    "QuantConv2D",
    "QuantConv2DTranspose",
    "QuantConv3D",
    "QuantConv3DTranspose",
    "QuantDense",
    "QuantDepthwiseConv2D",
    "QuantSeparableConv1D",
    "QuantSeparableConv2D",
]


#: larq keywords ste's layers do not take (or that this layer does not take), with what to do instead.
LARQ_KEYWORDS = {
    "pad_values": "only convolutions pad their input",
    "input_quantizer": "this layer has no quantized input",
    "kernel_quantizer": "this layer's kernels are quantized by the arguments listed below",
    "depthwise_quantizer": "this layer has no depthwise kernel",
    "pointwise_quantizer": "this layer has no pointwise kernel",
    "implementation": "Keras 3 has no LocallyConnected layers",
}

#: larq's spellings of quantizer arguments, by layer: larq's name -> ste's.
QUANTIZER_ALIASES: dict[str, dict[str, str]] = {"QuantDepthwiseConv2D": {"depthwise_quantizer": "kernel_quantizer"}}

#: Activation names that mean larq's functions in larq's layers (Keras 3's own ``hard_tanh`` has that name too).
LARQ_ACTIVATIONS = {"hard_tanh": activations.hard_tanh, "leaky_tanh": activations.leaky_tanh}

_MIGRATION = "docs/larq.md (Migrating from larq)"


class _LarqConventions:
    """What ``lq.layers`` changes in an ``ste.layers`` class (see the module docstring)."""

    slots: Any
    warns_when_built = False  # larq's rule warns at construction instead

    @classmethod
    def options(cls) -> dict[str, tuple[Any, str]]:
        aliases = QUANTIZER_ALIASES.get(cls.__name__, {})
        return {**super().options(), **{alias: (None, "QuantizerLike") for alias in aliases}}  # type: ignore[misc]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        cls = type(self)
        for alias, target in QUANTIZER_ALIASES.get(cls.__name__, {}).items():
            value = kwargs.pop(alias, None)
            if value is not None:
                if kwargs.get(target) is not None:
                    raise ParameterError(
                        f"{cls.__name__}: give {target}= or larq's {alias}=, not both "
                        f"(received {target}={kwargs[target]!r}, {alias}={value!r})."
                    )
                kwargs[target] = value
        options = cls.options()
        for name in kwargs:
            if name in LARQ_KEYWORDS and name not in options:
                raise ParameterError(
                    f"{cls.__name__} does not take larq's {name}= ({LARQ_KEYWORDS[name]}). It takes the arguments "
                    f"of {_keras_parent(cls)} plus {', '.join(options)}. See {_MIGRATION} for every larq argument "
                    f"and its ste equivalent."
                )
        for name, value in kwargs.items():  # larq's meanings of names and configs, before ste's layer reads them
            if name.endswith("_constraint") and isinstance(value, (str, dict)):
                kwargs[name] = constraints.get(value)
            elif name in options and name != "metrics" and isinstance(value, str):
                kwargs[name] = quantizers.get(value)
        if isinstance(kwargs.get("activation"), str) and kwargs["activation"] in LARQ_ACTIVATIONS:
            kwargs["activation"] = LARQ_ACTIVATIONS[kwargs["activation"]]  # larq's meaning, not Keras's
        if kwargs.get("metrics") is None and context.get_training_metrics():
            kwargs["metrics"] = sorted(context.get_training_metrics())
        super().__init__(*args, **kwargs)
        for slot in self.slots:  # larq: when constructed, for any binary quantizer but NoOp
            quantizer = getattr(self, slot.quantizer)
            if getattr(quantizer, "precision", None) == 1 and not isinstance(quantizer, NoOp):
                if getattr(self, slot.constraint, None) is None:
                    self.warn_missing_constraint(slot)  # type: ignore[attr-defined]


def _keras_parent(cls: type) -> str:
    """The name of the Keras layer class ``cls`` quantizes (``Conv2D``)."""
    for base in cls.__mro__[1:]:
        if base.__module__.startswith("keras"):
            return base.__name__
    return cls.__name__


def _larq_layer(parent: type) -> Any:
    cls = type(
        parent.__name__,
        (_LarqConventions, parent),
        {
            "__module__": __name__,
            "__doc__": f"larq's ``{parent.__name__}``: :class:`ste.layers.{parent.__name__}` "
            f"with larq's conventions (:mod:`ste.larq.layers`).",
        },
    )
    return keras.saving.register_keras_serializable(package="ste.larq")(cls)


QuantConv1D = _larq_layer(_ste_layers.QuantConv1D)
QuantConv1DTranspose = _larq_layer(_ste_layers.QuantConv1DTranspose)
QuantConv2D = _larq_layer(_ste_layers.QuantConv2D)
QuantConv2DTranspose = _larq_layer(_ste_layers.QuantConv2DTranspose)
QuantConv3D = _larq_layer(_ste_layers.QuantConv3D)
QuantConv3DTranspose = _larq_layer(_ste_layers.QuantConv3DTranspose)
QuantDense = _larq_layer(_ste_layers.QuantDense)
QuantDepthwiseConv2D = _larq_layer(_ste_layers.QuantDepthwiseConv2D)
QuantSeparableConv1D = _larq_layer(_ste_layers.QuantSeparableConv1D)
QuantSeparableConv2D = _larq_layer(_ste_layers.QuantSeparableConv2D)


def __getattr__(name: str) -> Any:
    return getattr(_ste_layers, name)  # ste.layers explains the larq names it does not have
