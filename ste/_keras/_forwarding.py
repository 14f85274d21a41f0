"""A wrapper layer called as the layer it wraps (pruning's and clustering's wrappers).

Keras binds a call to the layer's ``call`` signature before anything runs, and builds an unbuilt layer from the
shapes of the inputs that its ``build`` names. A wrapper with ``call(self, inputs, ...)`` therefore refuses the
wrapped layer's keyword inputs (``MultiHeadAttention``'s ``mha(query=q, value=v)``: "missing a required argument:
'inputs'"), and a wrapper with ``build(self, input_shape)`` builds the wrapped layer from the first input's shape only
(an unbuilt ``MultiHeadAttention`` then fails with "build() missing ... 'value_shape'").

* :func:`take_call_signature` gives the wrapper the wrapped layer's call signature (plus ``training``, which the
  wrapper always receives), so that Keras binds, converts and masks the inputs as it would for the wrapped layer, and
  passes them on as given.
* :func:`build_inner` builds an unbuilt wrapped layer whose ``build`` takes several shapes from the call being made,
  as Keras would build it if it were called directly.
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["build_inner", "take_call_signature"]


def take_call_signature(wrapper: Any, layer: Any) -> None:
    """Make ``wrapper`` (a Keras layer whose ``call`` takes ``*args, **kwargs``) bind its calls as ``layer`` does."""
    signature = inspect.signature(layer.call)
    parameters = list(signature.parameters.values())
    if not any(parameter.name == "training" for parameter in parameters):
        at = next((i for i, p in enumerate(parameters) if p.kind is inspect.Parameter.VAR_KEYWORD), len(parameters))
        parameters.insert(at, inspect.Parameter("training", inspect.Parameter.KEYWORD_ONLY, default=None))
    signature = signature.replace(parameters=parameters)
    names = [parameter.name for parameter in parameters]
    # the attributes keras.layers.Layer.__init__ derives from inspect.signature(self.call)
    wrapper._call_signature = signature
    wrapper.call_signature_parameters = names
    wrapper._call_has_training_arg = True
    wrapper._call_has_mask_arg = "mask" in names
    wrapper._call_has_context_arg = {arg: arg in names for arg in wrapper._call_context_args}


def _shape_arguments(layer: Any) -> int:
    """How many arguments the layer's ``build`` takes (its input shapes)."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.KEYWORD_ONLY)
    return sum(1 for p in inspect.signature(layer.build).parameters.values() if p.kind in kinds)


def build_inner(layer: Any, call_spec: Any) -> None:
    """Build ``layer`` from ``call_spec`` (the wrapper's bound call, with ``layer``'s signature) when its ``build``
    takes several input shapes; a layer built from one shape is left to the wrapper's ``build``."""
    if not layer.built and _shape_arguments(layer) > 1:
        layer._maybe_build(call_spec)
