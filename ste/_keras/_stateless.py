"""Running a wrapped Keras layer with some of its variables read as computed values.

A wrapper that changes what a weight is in the forward pass (fake-quantized in QAT, masked in pruning, clustered)
maps the variable to the computed value in a ``keras.StatelessScope`` while the wrapped layer runs, so that every
attribute or sub-layer that reads the variable sees it. :func:`call_with_values` keeps what the layer does besides:
the values of an outer stateless call of the whole model stay in force, an assignment the layer makes (moving
statistics, activation ranges) reaches its variable (or the outer scope), and a loss it adds reaches the wrapper.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import keras
from keras.src.backend.common.stateless_scope import get_stateless_scope

__all__ = ["call_with_values"]


def call_with_values(
    owner: Any, mapping: Sequence[tuple[Any, Any]], variables: Iterable[Any], call: Callable[[], Any]
) -> Any:
    """``call()`` with each ``(variable, value)`` of ``mapping`` read as its value; assignments to ``variables``
    made inside are applied (or handed to an outer stateless scope), and losses are added to ``owner``."""
    outer = get_stateless_scope()  # a stateless call of the whole model: its values stay in force here
    scope = keras.StatelessScope(state_mapping=list(mapping), collect_losses=True)
    seeded = dict(outer.state_mapping) if outer is not None else {}
    scope.state_mapping = {**seeded, **scope.state_mapping}
    with scope:
        outputs = call()
    mapped = {id(variable) for variable, _ in mapping}
    for variable in variables:
        value = scope.get_current_value(variable)
        if id(variable) in mapped or value is None or value is seeded.get(id(variable)):
            continue
        if outer is not None:
            outer.add_update((variable, value))
        else:
            variable.assign(value)
    for loss in scope.losses:
        owner.add_loss(loss)
    return outputs
