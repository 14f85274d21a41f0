"""A float copy of a layer, for the quantized model: the same class and config, weights copied later.

A ``Lambda`` layer is rebuilt around the same function object: its config round-trip would look a named function
up by name (which fails unless it is registered with Keras) and refuses a Python lambda under safe mode, although
the layer itself is fine to reuse. Any other layer whose ``from_config(get_config())`` fails raises
:class:`ste.errors.UnsupportedLayerError` naming it.
"""

from __future__ import annotations

import keras

from .._keras._versions import complete_config
from ..errors import UnsupportedLayerError

__all__ = ["float_copy"]


def float_copy(layer: keras.layers.Layer, owner: str) -> keras.layers.Layer:
    """A new, unbuilt layer computing what ``layer`` computes (its weights are copied once it is built)."""
    if type(layer) is keras.layers.Lambda:
        return keras.layers.Lambda(
            layer.function,
            output_shape=layer._output_shape,
            mask=layer.mask,
            arguments=dict(layer.arguments),
            name=layer.name,
            dtype=layer.dtype_policy,
        )
    try:
        return type(layer).from_config(complete_config(layer, layer.get_config()))
    except Exception as error:  # a custom layer's own from_config/get_config: any exception
        raise UnsupportedLayerError(
            f"{owner}: cannot copy the layer '{layer.name}' ({type(layer).__name__}) into the quantized model: "
            f"{type(layer).__name__}.from_config(layer.get_config()) raised {type(error).__name__}: {error}. "
            f"Fix: give {type(layer).__name__} a get_config() that returns every argument of its __init__ (Keras's "
            f"rule for layers that can be saved and cloned)."
        ) from error
