"""One owner per stateful quantizer: a quantizer with variables (LSQ's step, PACT's α) belongs to one layer slot.

Keras saves a quantized layer's quantizer inside that layer's config, with its variables under the layer's path.
Two layers holding the same instance would train with one shared variable, save it once, and fail to load ("Layer
'lsq' expected 2 variables, but received 0"). Sharing a learned step size between two kernels is also rarely meant
(LSQ initialises it from the first tensor it sees). So the second slot to build with such an instance raises
:class:`ste.errors.ParameterError`, before any training step. Quantizers without variables (``Sign``, ``DoReFa``, ...)
are shared freely; a quantizer layer applied twice in a functional model is Keras layer sharing and saves as usual.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import keras

from ..errors import ParameterError

__all__ = ["claim"]

_LOCK = threading.Lock()
_OWNERS: weakref.WeakKeyDictionary[Any, tuple[weakref.ref[Any], str]] = weakref.WeakKeyDictionary()


def _describe(layer: Any) -> str:
    return f"{type(layer).__name__} '{getattr(layer, 'name', '')}'"


def claim(quantizer: Any, owner: Any, argument: str) -> None:
    """Record that ``owner`` uses ``quantizer`` as its ``argument``; raise if another slot owns its variables."""
    if not isinstance(quantizer, keras.layers.Layer) or not quantizer.weights:
        return
    with _LOCK:
        previous = _OWNERS.get(quantizer)
        holder = previous[0]() if previous is not None else None
        if previous is None or holder is None or (holder is owner and previous[1] == argument):
            _OWNERS[quantizer] = (weakref.ref(owner), argument)
            return
    variables = ", ".join(v.name for v in quantizer.weights)
    raise ParameterError(
        f"{_describe(owner)}: its {argument} {quantizer!r} (quantizer '{quantizer.name}') is already the "
        f"{previous[1]} of {_describe(holder)}. A quantizer with variables ({variables}) belongs to one layer: Keras "
        f"saves it inside that layer, so a model sharing it could not be loaded. Fix: give each layer its own, "
        f"e.g. {argument}={type(quantizer).__name__}(...) per layer, or a spec string such as 'lsq(bits=4)', which "
        f"builds a new quantizer for every layer."
    )
