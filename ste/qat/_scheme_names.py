"""The scheme that an unknown ``scheme=`` name of :func:`ste.quantize_model` probably meant.

:func:`suggestion` reads the usual spellings of a bit width: ``"int4"``, ``"4bit"``, ``"4-bit"``, ``"w4a8"``,
``"w4"`` (activations 8 bits) map to ``ste.qat.NBitScheme(num_bits_weight=4)`` (and ``"w4a4"`` to
``NBitScheme(num_bits_weight=4, num_bits_activation=4)``); 8 and 8 is ``"int8"``; 1 bit is ``"binary"`` and 1.58 bits
``"ternary"``. TFMOT's scheme class names and collaborative-optimization acronyms (PQAT, CQAT, PCQAT) map to ste's
names. Anything else gets the nearest known name (``difflib``), if one is close. Names are compared in lower case,
without ``-``, ``_``, ``.`` or spaces.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

__all__ = ["suggestion"]

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
