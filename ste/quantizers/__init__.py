"""Quantizers as Keras 3 layers, each one ``ste`` op (``ste.forward(...).backward(...)``).

>>> import ste
>>> q = ste.quantizers.get("sign(surrogate='straight_through(clip=1.5)')")
>>> q([-0.5, 0.0, 2.0]).numpy().tolist()
[-1.0, 1.0, 1.0]

Native quantizers (spec names in brackets): :class:`Sign` (``sign``), :class:`Heaviside` (``heaviside``),
:class:`Ternary` (``ternary``), :class:`MagnitudeAwareSign` (``magnitude_aware_sign``), :class:`DoReFa` (``dorefa``),
:class:`Uniform` (``uniform``), :class:`LSQ` (``lsq``), :class:`PACT` (``pact``); BitNet b1.58's
:class:`AbsmeanTernary` (``absmean_ternary``) and :class:`AbsmaxPerToken` (``absmax_per_token``). larq 0.14 aliases:
:class:`SteSign` (``ste_sign``), :class:`ApproxSign` (``approx_sign``), :class:`SwishSign` (``swish_sign``),
:class:`SteHeaviside` (``ste_heaviside``), :class:`SteTern` (``ste_tern``), ``magnitude_aware_sign`` and
``dorefa_quantizer`` (:class:`DoReFa` with ``k_bit=``), :data:`DoReFaQuantizer`;
:class:`NoOp` (identity with a declared precision; no spec name).
larq's function forms: :func:`ste_sign`, :func:`approx_sign`, :func:`swish_sign`, :func:`ste_heaviside`,
:func:`ste_tern`, :func:`magnitude_aware_sign`, :func:`dorefa_quantizer` (larq's keyword names).
"""

from ._base import Quantizer, QuantizerLike, get, lookup, names, register, serialize, unregister
from ._binary import Heaviside, MagnitudeAwareSign, Sign, SurrogateQuantizer, Ternary
from ._bitnet import AbsmaxPerToken, AbsmeanTernary
from ._functions import (
    approx_sign,
    dorefa_quantizer,
    magnitude_aware_sign,
    ste_heaviside,
    ste_sign,
    ste_tern,
    swish_sign,
)
from ._larq import ApproxSign, DoReFaQuantizer, SteHeaviside, SteSign, SteTern, SwishSign
from ._learned import LSQ, PACT
from ._noop import NoOp
from ._uniform import DoReFa, Uniform

__all__ = [
    "LSQ",
    "PACT",
    "AbsmaxPerToken",
    "AbsmeanTernary",
    "ApproxSign",
    "DoReFa",
    "DoReFaQuantizer",
    "Heaviside",
    "MagnitudeAwareSign",
    "NoOp",
    "Quantizer",
    "QuantizerLike",
    "Sign",
    "SteHeaviside",
    "SteSign",
    "SteTern",
    "SurrogateQuantizer",
    "SwishSign",
    "Ternary",
    "Uniform",
    "approx_sign",
    "dorefa_quantizer",
    "get",
    "lookup",
    "magnitude_aware_sign",
    "names",
    "register",
    "serialize",
    "ste_heaviside",
    "ste_sign",
    "ste_tern",
    "swish_sign",
    "unregister",
]
