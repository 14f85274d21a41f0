"""matplotlib, imported when a plot is drawn: ste's plots need it, ste does not (the ``plot`` extra installs it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import MissingDependencyError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["figure_class"]


def figure_class() -> type[Figure]:
    """matplotlib's ``Figure``, or :class:`ste.errors.MissingDependencyError` naming the command that installs it."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingDependencyError(
            "ste.plot needs matplotlib, which is not installed. "
            "Fix: pip install 'ste[plot]' (or pip install matplotlib)."
        ) from None
    return Figure
