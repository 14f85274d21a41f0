"""Where a class is defined: ste's own classes (``ste.layers``' quantized layers, ``ste.qat``'s transformer layers)
subclass Keras layers on purpose and keep their parents' weights, where another subclass may not."""

from __future__ import annotations

__all__ = ["defined_by_ste", "table_class"]


def defined_by_ste(cls: type) -> bool:
    """Whether ``cls`` is defined in the ``ste`` package."""
    module = getattr(cls, "__module__", "") or ""
    return module == "ste" or module.startswith("ste.")


#: What a subclass overrides when it computes something else than its parent (or holds other weights).
_OVERRIDES = ("__init__", "build", "call", "get_config")


def table_class(cls: type, table: tuple[type, ...]) -> type | None:
    """The class of ``table`` that a layer of class ``cls`` computes as, or None: ``cls`` itself; else the nearest
    class of ``table`` that ``cls`` derives from without overriding ``__init__``, ``build``, ``call`` or
    ``get_config`` on the way (KerasHub's ``ReversibleEmbedding`` is Keras's under another name); else, for ste's own
    classes (which keep their parents' weights), the first class of ``table`` it derives from."""
    for kind in cls.__mro__:
        if kind in table:
            return kind
        if any(name in vars(kind) for name in _OVERRIDES):
            break
    if defined_by_ste(cls):
        return next((kind for kind in table if issubclass(cls, kind)), None)
    return None
