"""Class signatures that show a layer's real arguments: ``inspect.signature(ste.spiking.LIF)`` lists ``beta``,
``threshold``, ``surrogate``, ... with their defaults instead of the ``(*args, **kwargs)`` that forwarding leaves.

A layer class whose ``__init__`` forwards ``**kwargs`` (to its base class, or to the cell it builds) gets a
:class:`ClassSignature` made by :func:`forwarding_signature`: its own parameters followed by those it forwards.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

__all__ = ["NOT_GIVEN", "ClassSignature", "forwarding_signature", "init_signature"]

_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


class _NotGiven:
    """The default of an argument whose absence means something: shown as ``<not given>`` in a signature (a bare
    ``object()`` shows as ``<object object at 0x7f...>``)."""

    def __repr__(self) -> str:
        return "<not given>"


NOT_GIVEN: Any = _NotGiven()


class ClassSignature:
    """``__signature__`` of a layer class only: its instances keep their own (``call``'s) signature, which
    ``tf.function(layer, input_signature=...)`` and Keras inspect."""

    def __init__(self, signature: inspect.Signature) -> None:
        self.signature = signature

    def __get__(self, instance: object, owner: type) -> inspect.Signature:
        if instance is not None:
            raise AttributeError("__signature__")
        return self.signature


def init_signature(cls: type) -> inspect.Signature:
    """The signature of ``cls.__init__`` without ``self``."""
    signature = inspect.signature(cls.__init__)  # type: ignore[misc]
    return signature.replace(parameters=list(signature.parameters.values())[1:])


def forwarding_signature(
    own: inspect.Signature, forwarded: Iterable[inspect.Signature], drop: Iterable[str] = ()
) -> ClassSignature:
    """``own``'s named parameters, then the named parameters of each ``forwarded`` signature that ``own`` does not
    name (keyword-only: they travel in ``**kwargs``), without ``drop`` (those the class sets itself), and a final
    ``**kwargs`` for the Keras layer arguments. Where ``own`` takes ``*args`` (and hands them on), the positional
    parameters of the first forwarded signature follow ``own``'s as positional ones."""
    dropped = set(drop)
    positional = [p for p in own.parameters.values() if p.kind not in _VARIADIC and p.kind is not p.KEYWORD_ONLY]
    keywords = [p for p in own.parameters.values() if p.kind is p.KEYWORD_ONLY]
    seen = {p.name for p in (*positional, *keywords)} | dropped
    forwarded = list(forwarded)
    if forwarded and any(p.kind is p.VAR_POSITIONAL for p in own.parameters.values()):
        for parameter in forwarded[0].parameters.values():
            if parameter.kind is parameter.POSITIONAL_OR_KEYWORD and parameter.name not in seen:
                positional.append(parameter)
                seen.add(parameter.name)
    for signature in forwarded:
        for parameter in signature.parameters.values():
            if parameter.kind not in _VARIADIC and parameter.name not in seen:
                keywords.append(parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY))
                seen.add(parameter.name)
    var_keyword = inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)
    return ClassSignature(inspect.Signature([*positional, *keywords, var_keyword]))
