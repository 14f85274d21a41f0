"""How ``ste`` names user functions and rules in reprs and error messages."""

from __future__ import annotations

from typing import Any


def callable_name(fn: Any) -> str:
    """A short name for a user function: ``sign``, ``MyLayer.call``, ``<lambda>``; falls back to ``repr``."""
    name = getattr(fn, "__name__", None)
    if isinstance(name, str) and name:
        return name
    return repr(fn)


def format_params(params: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value!r}" for key, value in params.items())
