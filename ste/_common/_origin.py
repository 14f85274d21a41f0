"""Where a class is defined: ste's own classes (``ste.layers``' quantized layers, ``ste.qat``'s transformer layers)
subclass Keras layers on purpose and keep their parents' weights, where another subclass may not."""

from __future__ import annotations

__all__ = ["defined_by_ste"]


def defined_by_ste(cls: type) -> bool:
    """Whether ``cls`` is defined in the ``ste`` package."""
    module = getattr(cls, "__module__", "") or ""
    return module == "ste" or module.startswith("ste.")
