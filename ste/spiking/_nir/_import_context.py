"""What an importer (a NIR node -> its Keras layers) receives: the node's name, time step, input features and
metadata, with the error that refuses it and the surrogate ste wrote into it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...errors import ConversionError, STEError
from ...registry import get
from .._spike import DEFAULT_SURROGATE
from ._graph import SURROGATE_KEY


@dataclass
class _Import:
    dt: float
    name: str  # the node's name
    shape: tuple[int, ...]  # per-step input features, NIR layout
    metadata: dict[str, Any] = field(default_factory=dict)

    def refuse(self, node: Any, why: str, fix: str) -> ConversionError:
        return ConversionError(f"from_nir: node '{self.name}' ({type(node).__name__}) {why}. Fix: {fix}.")

    def surrogate(self) -> Any:
        """The surrogate ste wrote into the node's metadata, else the default (never a reason to refuse)."""
        spec = self.metadata.get(SURROGATE_KEY)
        if isinstance(spec, bytes):
            spec = spec.decode()
        if isinstance(spec, str):
            try:
                return get(spec)
            except STEError:
                pass
        return DEFAULT_SURROGATE

    def layer_name(self, suffix: str = "") -> str:
        return (self.name + suffix).replace("/", "_")
