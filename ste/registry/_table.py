"""The surrogate registry's name table: name → ``Surrogate`` class.

Its own module so that ``_surrogate`` (a surrogate's config and pickle name it) and ``_registry`` (which registers
and looks names up) both read it without importing each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._common._names import NameTable
from ..errors import UnknownSurrogateError

if TYPE_CHECKING:
    from ._surrogate import Surrogate

__all__ = ["TABLE"]

TABLE: NameTable[type[Surrogate]] = NameTable(
    "surrogate",
    UnknownSurrogateError,
    " A name registered in your own code is known once the module that registers it is imported.",
)
