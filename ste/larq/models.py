"""``lq.models.summary``: :func:`ste.summary` with larq's signature."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._summary import ModelSummary
from .._summary import summary as ste_summary

__all__ = ["summary"]


def summary(model: Any, print_fn: Callable[[str], Any] | None = None, include_macs: bool = True) -> ModelSummary:
    """Print :func:`ste.summary`'s table with ``print_fn`` (default ``print``, as larq) and return it.

    The figures are ste's (every variable counted; compression ratio float32 ÷ quantized); the table's last lines
    give larq's deployment count (batch normalization folded) and larq's reciprocal ratio. Raises
    :class:`ste.NotBuiltError` (a ``ValueError``, as larq raises) for a model that is not built.
    """
    return ste_summary(model, print_fn=print_fn or print, include_macs=include_macs)
