"""Quantizers as Keras 3 layers, each one ``ste`` op (``ste.forward(...).backward(...)``).

>>> import ste
>>> q = ste.quantizers.get("sign(surrogate='straight_through(clip=1.5)')")
>>> q([-0.5, 0.0, 2.0]).numpy().tolist()
[-1.0, 1.0, 1.0]

Quantizers (spec names in brackets): :class:`Sign` (``sign``), :class:`Heaviside` (``heaviside``),
:class:`Ternary` (``ternary``), :class:`MagnitudeAwareSign` (``magnitude_aware_sign``), :class:`DoReFa` (``dorefa``),
:class:`Uniform` (``uniform``), :class:`LSQ` (``lsq``), :class:`PACT` (``pact``); BitNet b1.58's
:class:`AbsmeanTernary` (``absmean_ternary``) and :class:`AbsmaxPerToken` (``absmax_per_token``);
:class:`NoOp` (identity with a declared precision; no spec name).

Extension points: :func:`register` / :func:`unregister` (a quantizer class under a spec name), :func:`add_form`
(another library's names or configs in :func:`get`). larq's quantizer classes, spec names and function forms
(``SteSign``, ``"ste_sign"``, ``ste_sign(x)``, ...) are in :mod:`ste.larq.quantizers`.
"""

from ._base import Quantizer, QuantizerLike, add_form, get, lookup, names, register, serialize, unregister
from ._binary import Heaviside, MagnitudeAwareSign, Sign, SurrogateQuantizer, Ternary
from ._bitnet import AbsmaxPerToken, AbsmeanTernary
from ._learned import LSQ, PACT
from ._noop import NoOp
from ._uniform import DoReFa, Uniform

__all__ = [
    "LSQ",
    "PACT",
    "AbsmaxPerToken",
    "AbsmeanTernary",
    "DoReFa",
    "Heaviside",
    "MagnitudeAwareSign",
    "NoOp",
    "Quantizer",
    "QuantizerLike",
    "Sign",
    "SurrogateQuantizer",
    "Ternary",
    "Uniform",
    "add_form",
    "get",
    "lookup",
    "names",
    "register",
    "serialize",
    "unregister",
]
