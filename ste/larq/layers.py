"""``lq.layers``: larq's quantized layers, :mod:`ste.layers`' classes with larq's two conventions.

Each ``lq.layers.X`` subclasses ``ste.layers.X`` and differs only where larq differs from ste:

- the missing-constraint warning is given when the layer is constructed, for every binary kernel quantizer other
  than ``NoOp`` (larq's rule; ste warns when the layer is built, and only where the quantizer's gradient vanishes
  far out);
- a layer constructed inside ``lq.context.metrics_scope(["flip_ratio"])`` tracks its kernels' flip ratio.

They compute, save and load exactly as their ``ste.layers`` parents (``isinstance(lq_layer, ste.layers.X)``).
``QuantLocallyConnected1D`` / ``2D`` raise :class:`ste.errors.UnsupportedLayerError` (Keras 3 has no locally connected
layers).
"""

from __future__ import annotations

from typing import Any

import keras

from .. import layers as _ste_layers
from ..quantizers import NoOp
from . import context

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


class _LarqConventions:
    """What ``lq.layers`` changes in an ``ste.layers`` class (see the module docstring)."""

    slots: Any

    def _apply_options(self, options: dict[str, Any]) -> None:
        if options["metrics"] is None and context.get_training_metrics():
            options["metrics"] = sorted(context.get_training_metrics())
        super()._apply_options(options)  # type: ignore[misc]
        for slot in self.slots:  # larq: when constructed, for any binary quantizer but NoOp
            quantizer = getattr(self, slot.quantizer)
            if getattr(quantizer, "precision", None) == 1 and not isinstance(quantizer, NoOp):
                if getattr(self, slot.constraint, None) is None:
                    self._warn_missing_constraint(slot)  # type: ignore[attr-defined]

    def _warn_missing_constraints(self) -> None:
        """Nothing when built: larq's rule warned at construction."""


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
