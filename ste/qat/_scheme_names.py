"""Scheme names: the table ``scheme="int8"`` reads, :func:`register_scheme`, and what an unknown name probably meant.

:data:`SCHEMES` is a :class:`ste._common._names.NameTable` of zero-argument factories (a :class:`Scheme` subclass,
or a function returning a scheme), as the surrogate registry's: ``ste.qat.register_scheme("my4bit")(MyScheme)``
makes ``ste.quantize_model(model, scheme="my4bit")`` build ``MyScheme()``.

:func:`suggestion` reads the usual spellings of a bit width: ``"int4"``, ``"4bit"``, ``"4-bit"``, ``"w4a8"``,
``"w4"`` (activations 8 bits) map to ``ste.qat.NBitScheme(num_bits_weight=4)`` (and ``"w4a4"`` to
``NBitScheme(num_bits_weight=4, num_bits_activation=4)``); 8 and 8 is ``"int8"``; 1 bit is ``"binary"`` and 1.58 bits
``"ternary"``. TFMOT's scheme class names and collaborative-optimization acronyms (PQAT, CQAT, PCQAT) map to ste's
names. Anything else gets the nearest known name (``difflib``), if one is close. Names are compared in lower case,
without ``-``, ``_``, ``.`` or spaces.
"""

from __future__ import annotations

import difflib
import inspect
import re
from collections.abc import Callable, Iterable
from typing import TypeVar

from .._common._abstract import check_complete
from .._common._names import NameTable
from ..errors import ParameterError, RegistrationError
from ._int8 import Int8Scheme
from ._lowbit import BinaryScheme, TernaryScheme
from ._preserve import ClusterPreserveScheme, PrunePreserveScheme
from ._scheme import Scheme

__all__ = ["SCHEMES", "register_scheme", "schemes", "suggestion", "unregister_scheme"]

F = TypeVar("F", bound=Callable[[], Scheme])

#: Scheme name -> a zero-argument factory of the scheme.
SCHEMES: NameTable[Callable[[], Scheme]] = NameTable("scheme", ParameterError)


def _check_factory(name: str, factory: object) -> None:
    if isinstance(factory, type):
        if not issubclass(factory, Scheme):
            raise RegistrationError(
                f"cannot register the scheme {name!r}: {factory.__qualname__} is not a ste.qat.Scheme subclass. "
                f"Fix: derive it from ste.qat.Scheme (or ste.qat.Int8Scheme), or register a function returning one."
            )
        check_complete(factory, f"cannot register the scheme {name!r}")
        return
    if isinstance(factory, Scheme) or not callable(factory):
        raise RegistrationError(
            f"cannot register the scheme {name!r}: expected a ste.qat.Scheme subclass or a function returning a "
            f"scheme; received {type(factory).__name__} {factory!r}. Fix: register the class (or "
            f"lambda: scheme), so that each model gets a fresh scheme."
        )
    try:
        inspect.signature(factory).bind()
    except TypeError:
        raise RegistrationError(
            f"cannot register the scheme {name!r}: {factory!r} must be callable without arguments (it builds the "
            f"scheme for scheme={name!r}). Fix: bind its arguments, e.g. lambda: MyScheme(bits=4)."
        ) from None
    except ValueError:  # a builtin without a readable signature
        pass


def register_scheme(name: str, *, replace: bool = False) -> Callable[[F], F]:
    """A decorator registering a scheme factory under ``name``, for ``quantize_model(model, scheme=name)``.

    Usable on a :class:`Scheme` subclass (``@ste.qat.register_scheme("my4bit")``) or called on a function
    returning a scheme (``ste.qat.register_scheme("w4")(lambda: ste.qat.NBitScheme(num_bits_weight=4))``).

    Args:
        name: a Python identifier that is not a keyword.
        replace: overwrite an existing name (a built-in included); otherwise
            :class:`ste.errors.RegistrationError`.
    """
    return SCHEMES.decorator(name, replace=replace, check=_check_factory, owner=f"ste.qat.register_scheme({name!r})")


def unregister_scheme(name: str) -> Callable[[], Scheme]:
    """Remove the scheme ``name`` and return its factory.

    Args:
        name: a registered scheme name.
    """
    return SCHEMES.unregister(name)


def schemes() -> list[str]:
    """The scheme names :func:`ste.quantize_model` accepts, sorted."""
    return SCHEMES.names()


def _prune_cluster_preserve() -> Scheme:
    return ClusterPreserveScheme(preserve_sparsity=True)


for _name, _factory in (
    ("int8", Int8Scheme),
    ("binary", BinaryScheme),
    ("ternary", TernaryScheme),
    ("prune_preserve", PrunePreserveScheme),
    ("cluster_preserve", ClusterPreserveScheme),
    ("prune_cluster_preserve", _prune_cluster_preserve),
):
    SCHEMES.register(_name, _factory)

_LOW, _HIGH = 2, 8  # the bit widths NBitScheme takes

_ALIASES = {
    "default8bit": '"int8"',
    "default8bitquantizescheme": '"int8"',
    "defaultnbit": "ste.qat.NBitScheme()",
    "nbit": "ste.qat.NBitScheme()",
    "defaultnbitquantizescheme": "ste.qat.NBitScheme()",
    "default8bitprunepreservequantizescheme": '"prune_preserve"',
    "default8bitclusterpreservequantizescheme": '"cluster_preserve"',
    "pqat": '"prune_preserve"',
    "cqat": '"cluster_preserve"',
    "pcqat": '"prune_cluster_preserve"',
    "bnn": '"binary"',
    "larq": '"binary"',
    "xnor": '"binary"',
    "sign": '"binary"',
    "bitnet": '"ternary"',
    "bitnetb158": '"ternary"',
    "158bit": '"ternary"',
    "b158": '"ternary"',
    "w158a8": '"ternary"',
    "ternaryweights": '"ternary"',
}

_BITS = (
    re.compile(r"(?:u?int|i)(?P<w>\d+)"),
    re.compile(r"(?P<w>\d+)bits?"),
    re.compile(r"w(?P<w>\d+)(?:a(?P<a>\d+))?"),
    re.compile(r"a(?P<a>\d+)w(?P<w>\d+)"),
)


def _normal(name: str) -> str:
    return re.sub(r"[-_.\s]", "", name.lower())


def _from_bits(weight: int, activation: int) -> tuple[str, str]:
    if weight == 1 and activation in (1, 8):
        return '"binary"', "sign inputs and kernels, larq-style"
    if weight == activation == 8:
        return '"int8"', ""
    if not (_LOW <= weight <= _HIGH and _LOW <= activation <= _HIGH):
        return "", (
            f"ste.qat.NBitScheme takes {_LOW} to {_HIGH} bits for weights and for activations, not {weight} and "
            f"{activation} (TFLite runs it with int8 kernels; 1 bit is the 'binary' scheme). Fix: "
            f"scheme=ste.qat.NBitScheme(num_bits_weight=b, num_bits_activation=b) with b from {_LOW} to {_HIGH}"
        )
    args = f"num_bits_weight={weight}" + ("" if activation == 8 else f", num_bits_activation={activation}")
    return f"ste.qat.NBitScheme({args})", f"{weight}-bit weights, {activation}-bit activations"


def suggestion(name: str, known: Iterable[str]) -> tuple[str, str]:
    """The scheme ``name`` probably meant, as the text of a call or a quoted name, and a note on it; ``""`` and
    the reason for a bit width no scheme takes; ``("", "")`` if nothing is close."""
    key = _normal(name)
    if key in _ALIASES:
        return _ALIASES[key], ""
    for pattern in _BITS:
        match = pattern.fullmatch(key)
        if match:
            activation = match.groupdict().get("a")
            return _from_bits(int(match.group("w")), 8 if activation is None else int(activation))
    names = {_normal(k): k for k in known}
    names.update({alias: target for alias, target in _ALIASES.items() if alias not in names})
    close = difflib.get_close_matches(key, list(names), n=1, cutoff=0.6)
    if not close:
        return "", ""
    target = names[close[0]]
    return (target if target.startswith(('"', "ste.")) else f'"{target}"'), ""
