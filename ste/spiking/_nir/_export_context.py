"""What an exporter (a Keras layer -> its NIR node) receives and answers: the layer's context, the answer for a
layer that is no node of its own, and the error that refuses a layer."""

from __future__ import annotations

from dataclasses import dataclass

import keras

from ...errors import ConversionError


@dataclass
class _Export:
    dt: float
    shape: tuple[int, ...]  # per-step input features, Keras layout
    name: str


class _Pass:
    """An exporter's answer for a layer that is the identity (or a sum of its inputs) in NIR: no node of its own."""


PASS = _Pass()


def _refuse(layer: keras.layers.Layer, why: str, fix: str) -> ConversionError:
    return ConversionError(f"to_nir: layer '{layer.name}' ({type(layer).__name__}) {why}. Fix: {fix}.")
