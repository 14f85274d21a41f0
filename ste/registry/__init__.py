"""Named surrogate gradients: look them up by name or spec string, and register your own.

>>> import ste
>>> ste.registry.get("sigmoid_surrogate(beta=4.0)")
sigmoid_surrogate(beta=4.0)
"""

from ._registry import SurrogateLike, get, lookup, names, register, unregister
from ._smooth import SigmoidSurrogate
from ._spec import parse_spec
from ._straight_through import Identity, StraightThrough, Zero
from ._surrogate import Surrogate

__all__ = [
    "Identity",
    "SigmoidSurrogate",
    "StraightThrough",
    "Surrogate",
    "SurrogateLike",
    "Zero",
    "get",
    "lookup",
    "names",
    "parse_spec",
    "register",
    "unregister",
]
