"""What a person wants to know about a registry entry: parameters and defaults, formula, reference, peak.

Shared by the command line (``python -m ste list/show``) and the documentation's surrogate gallery, so that both
show the same facts, read from the code (the class attributes, the docstring) or computed from it (the peak).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from ..registry import HasPrimitive, Surrogate, get, lookup

__all__ = ["REQUIRED", "EntryInfo", "Peak", "describe", "find_peak", "format_value", "plateau_edge"]

#: Marks a hyperparameter that has no default (a user entry may declare one).
REQUIRED = inspect.Parameter.empty

# The peak is searched on this grid: wide enough for every built-in's default, fine enough to hit x = 0 exactly.
_PEAK_GRID = np.linspace(-8.0, 8.0, 16001)


@dataclass(frozen=True)
class Peak:
    """The largest value of d(x) on a grid, and where it is reached (an interval when d is flat there)."""

    value: float
    low: float
    high: float

    @property
    def constant(self) -> bool:
        """Whether d reaches its peak on the whole search grid (a constant derivative)."""
        return bool(self.low <= _PEAK_GRID[0] and self.high >= _PEAK_GRID[-1])

    def describe(self) -> str:
        if self.constant:
            return f"{format_value(self.value)} everywhere"
        if self.low == self.high:
            return f"{format_value(self.value)} at x = {format_value(self.low)}"
        return f"{format_value(self.value)} for x in [{format_value(self.low)}, {format_value(self.high)}]"


@dataclass(frozen=True)
class EntryInfo:
    """Everything the command line and the gallery show about one entry."""

    name: str
    spec: str
    parameters: Mapping[str, Any]  # name -> default, or REQUIRED
    formula: str
    reference: str
    doc: str
    has_primitive: bool
    peak: Peak | None  # None when the entry needs parameters that have no default

    def parameter_text(self) -> str:
        """``beta=1.0, clip=None``, or ``-`` for an entry without hyperparameters."""
        if not self.parameters:
            return "-"
        return ", ".join(
            name if default is REQUIRED else f"{name}={default!r}" for name, default in self.parameters.items()
        )


def format_value(value: float) -> str:
    """A short, exact-looking rendering of a float: ``0.25``, ``1``, ``-0.5``, ``6.25e-05``."""
    if value == 0:
        return "0"
    return f"{value:.6g}"


def plateau_edge(values: Callable[[np.ndarray], np.ndarray], inside: float, outside: float, level: float) -> float:
    """Where ``values >= level`` ends between a point inside and a grid neighbour outside (to 1/65536 of the gap)."""
    for _ in range(2):
        points = np.linspace(inside, outside, 257)
        on = np.flatnonzero(values(points) >= level)
        last = int(on.max()) if on.size else 0
        inside, outside = float(points[last]), float(points[min(last + 1, 256)])
    return inside


def find_peak(surrogate: Surrogate) -> Peak:
    """The maximum of ``surrogate.derivative`` on a float64 grid over [-8, 8] and where it is attained.

    A plateau's ends are located between grid points (``boxcar``'s is [-0.5, 0.5], not the grid's [-0.499, 0.499]).
    """

    def derivative(points: np.ndarray) -> np.ndarray:
        return np.asarray(surrogate.derivative(tf.constant(points, tf.float64)).numpy())

    values = derivative(_PEAK_GRID)
    top = float(np.max(values))
    level = top - 1e-12 * max(1.0, abs(top))
    at = np.flatnonzero(values >= level)
    first, last = int(at.min()), int(at.max())
    low, high = float(_PEAK_GRID[first]), float(_PEAK_GRID[last])
    if first < last and first > 0:
        low = plateau_edge(derivative, low, float(_PEAK_GRID[first - 1]), level)
    if first < last and last < len(_PEAK_GRID) - 1:
        high = plateau_edge(derivative, high, float(_PEAK_GRID[last + 1]), level)
    return Peak(top, low, high)


def describe(entry: str | Surrogate) -> EntryInfo:
    """Describe a registry name, a spec string (``"sigmoid_surrogate(beta=4)"``) or a :class:`Surrogate`.

    A plain name describes the entry at its defaults; a spec string or an instance at its parameters.
    Unknown names raise :class:`ste.errors.UnknownSurrogateError` (with suggestions).
    """
    instance: Surrogate | None
    if isinstance(entry, str) and entry.strip().isidentifier():
        cls = lookup(entry.strip())
        defaults: Mapping[str, Any] = dict(cls._defaults)
        instance = None if any(value is REQUIRED for value in defaults.values()) else cls()
        parameters = defaults
    else:
        instance = get(entry)
        cls = type(instance)
        parameters = dict(instance.params)
    return EntryInfo(
        name=cls.name,
        spec=repr(instance) if instance is not None else f"{cls.name}(...)",
        parameters=parameters,
        formula=cls.formula,
        reference=cls.reference,
        doc=inspect.cleandoc(cls.__dict__.get("__doc__") or ""),  # its own, not Surrogate's
        has_primitive=issubclass(cls, HasPrimitive),
        peak=find_peak(instance) if instance is not None else None,
    )
