"""Weight constraints for quantized layers: :class:`WeightClip` (name ``"weight_clip"``, also larq's alias).

Binary and ternary kernel quantizers have a zero (or clipped) gradient for large latent weights; without a clip
the latent weights drift away from the quantization range and stop learning. ``WeightClip`` keeps them in
[−clip_value, clip_value] after every optimizer step.

Constraint names live in one table with the rules of :mod:`ste.registry` (identifiers, NFKC, ``replace=True``,
suggestions, :func:`unregister`), and Keras's own lookups find them: ``keras.constraints.get("weight_clip")``,
``keras.layers.Dense(4, kernel_constraint="weight_clip")``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import keras

from ._common._names import NameTable, build
from ._keras._lookup import publish_constraint
from .errors import ParameterError, RegistrationError, SpecError, UnknownConstraintError
from .registry import parse_spec

__all__ = ["WeightClip", "get", "names", "register", "unregister", "weight_clip"]

C = TypeVar("C", bound="type[keras.constraints.Constraint]")

_TABLE: NameTable[type[keras.constraints.Constraint]] = NameTable(
    "constraint", UnknownConstraintError, on_change=publish_constraint
)


@keras.saving.register_keras_serializable(package="ste")
class WeightClip(keras.constraints.Constraint):  # type: ignore[misc]
    """Clip weights to [−clip_value, clip_value] (larq's ``WeightClip`` / ``"weight_clip"``)."""

    clip_value: float

    def __init__(self, clip_value: float = 1.0, **unexpected: Any) -> None:
        if unexpected:  # a typed error instead of Python's raw TypeError (also for weight_clip(foo=1))
            raise ParameterError(
                f"WeightClip: unexpected keyword argument(s) {sorted(unexpected)}; its only parameter is clip_value. "
                f"Fix: e.g. WeightClip(clip_value=1.0)."
            )
        if isinstance(clip_value, bool) or not isinstance(clip_value, numbers.Real) or not _positive(clip_value):
            shown = repr(clip_value) if len(repr(clip_value)) <= 40 else repr(clip_value)[:37] + "..."
            raise ParameterError(
                f"WeightClip: clip_value must be a finite number > 0; received {shown}. "
                f"Fix: e.g. WeightClip(clip_value=1.0)."
            )
        self.clip_value = float(clip_value)

    def __call__(self, w: Any) -> Any:
        if isinstance(w, keras.Variable):
            w = w.value  # the latent kernel, also inside lq.context.quantized_scope(True) (a kernel reads quantized)
        return keras.ops.clip(w, -self.clip_value, self.clip_value)

    def get_config(self) -> dict[str, Any]:
        return {"clip_value": self.clip_value}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> WeightClip:
        return build("WeightClip", cls, (), dict(config))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WeightClip):
            return NotImplemented
        return type(self) is type(other) and self.clip_value == other.clip_value

    def __hash__(self) -> int:
        return hash((type(self), self.clip_value))

    def __repr__(self) -> str:
        return f"WeightClip(clip_value={self.clip_value!r})"


def _positive(value: numbers.Real) -> bool:
    try:
        number = float(value)
    except OverflowError:  # an int beyond float range
        return False
    return math.isfinite(number) and number > 0


#: larq's lowercase alias of :class:`WeightClip`.
weight_clip = WeightClip


def register(name: str, *, replace: bool = False) -> Callable[[C], C]:
    """Class decorator: make a Keras constraint class available by ``name`` in :func:`get`, spec strings and
    Keras's own lookups (``keras.constraints.get(name)``; a Keras built-in name keeps its Keras meaning there).

    Names follow the rules of :func:`ste.registry.register` (identifiers, NFKC, ``replace=True``).
    """
    return _TABLE.decorator(name, replace=replace, check=_check_constraint, owner=f"ste.constraints.register({name!r})")


def _check_constraint(name: str, cls: Any) -> None:
    """A ``keras.constraints.Constraint`` subclass, or the error naming what was received and the fix."""
    if not (isinstance(cls, type) and issubclass(cls, keras.constraints.Constraint)):
        raise RegistrationError(
            f"ste.constraints.register({name!r}): expected a keras.constraints.Constraint subclass; received "
            f"{type(cls).__name__} {cls!r}. Fix: decorate a class deriving from keras.constraints.Constraint, whose "
            f"__call__(w) returns the constrained weights."
        )


def unregister(name: str) -> None:
    """Remove the constraint name ``name`` (also from Keras's lookups)."""
    _TABLE.unregister(name)


def names() -> list[str]:
    """The constraint names :func:`get` accepts, sorted."""
    return _TABLE.names()


register("weight_clip")(WeightClip)


def get(identifier: Any) -> Any:
    """Resolve a constraint: ``"weight_clip"``, ``"weight_clip(clip_value=0.5)"`` or anything Keras accepts.

    A config larq saved (``{"module": "larq.constraints", ...}``) raises :class:`ste.errors.UnknownConstraintError`
    naming :func:`ste.larq.constraints.get`, which reads it."""
    if isinstance(identifier, Mapping) and str(identifier.get("module", "")).split(".")[0] == "larq":
        shown = repr(dict(identifier))
        raise UnknownConstraintError(
            f"ste.constraints.get: the config {shown if len(shown) <= 120 else shown[:117] + '...'} was saved by "
            f"larq (module {identifier.get('module')!r}); ste.constraints reads ste's and Keras's configs. "
            f"Fix: ste.larq.constraints.get(config) reads larq's (and ste.larq.layers read them as layer arguments)."
        )
    if isinstance(identifier, str):
        try:
            name, args, kwargs = parse_spec(identifier)
        except SpecError:
            return keras.constraints.get(identifier)
        cls = _TABLE.get(name)
        if cls is not None:
            return build(f"constraint {identifier!r}", cls, args, kwargs)
        if args or kwargs:
            raise _TABLE.unknown(name, identifier)
    try:
        return keras.constraints.get(identifier)
    except ValueError:
        if isinstance(identifier, str):  # neither ste's nor Keras's: suggest ste's names
            raise _TABLE.unknown(identifier) from None
        raise
