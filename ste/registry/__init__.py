"""Named surrogate gradients: look them up by name or spec string, and register your own.

>>> import ste
>>> ste.registry.get("sigmoid_surrogate(beta=4.0)")
sigmoid_surrogate(beta=4.0)

Built-in entries (local derivative d(x); the rule's VJP is dy·d(x)): ``identity``, ``straight_through``, ``zero``
(the plain straight-through family); ``sigmoid_surrogate``, ``tanh_surrogate``, ``atan``, ``fast_sigmoid``,
``soft_sign``, ``erf_surrogate``, ``gaussian``, ``swish_sign`` (smooth); ``approx_sign``, ``triangle``,
``piecewise_quadratic``, ``boxcar``, ``piecewise_exp`` (piecewise). Each class's docstring gives its formula,
default, peak value and reference.
"""

from ._piecewise import ApproxSign, Boxcar, PiecewiseExp, PiecewiseQuadratic, Triangle
from ._registry import SurrogateLike, get, lookup, names, register, unregister
from ._smooth import (
    Atan,
    ErfSurrogate,
    FastSigmoid,
    Gaussian,
    SigmoidSurrogate,
    SoftSign,
    SwishSign,
    TanhSurrogate,
)
from ._spec import parse_spec
from ._straight_through import Identity, StraightThrough, Zero
from ._surrogate import HasPrimitive, MaskOnly, Surrogate

__all__ = [
    "ApproxSign",
    "Atan",
    "Boxcar",
    "ErfSurrogate",
    "FastSigmoid",
    "Gaussian",
    "HasPrimitive",
    "Identity",
    "MaskOnly",
    "PiecewiseExp",
    "PiecewiseQuadratic",
    "SigmoidSurrogate",
    "SoftSign",
    "StraightThrough",
    "Surrogate",
    "SurrogateLike",
    "SwishSign",
    "TanhSurrogate",
    "Triangle",
    "Zero",
    "get",
    "lookup",
    "names",
    "parse_spec",
    "register",
    "unregister",
]
