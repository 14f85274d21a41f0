"""Centroid initialization names: ``ste.clustering.register_init(name)(my_init)`` and the name an argument means.

:data:`INITS` is a :class:`ste._common._names.NameTable` of initialization functions, as the surrogate registry's.
A function is called ``init(weights, number_of_clusters, preserve_sparsity)``: ``weights`` is the flattened weight
tensor in float32 (float64 for a float64 weight), and it returns ``number_of_clusters`` centroids. With
``preserve_sparsity`` it is called once on the negative and once on the positive weights (``preserve_sparsity`` is
then True), and the zero centroid is added between them (see :func:`ste.clustering.initial_centroids`). It runs
eagerly, so it may use numpy.

The built-in functions are registered under TFMOT's :class:`CentroidInitialization` names in lower case
(``"kmeans_plus_plus"``); :func:`init_name` reads a member of that enum, its name or string value in any case
(``"KMEANS_PLUS_PLUS"``, ``"CentroidInitialization.LINEAR"``) and a registered name, and returns the registered name.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import tensorflow as tf

from .._common._names import NameTable, normalize_name
from ..errors import ParameterError, ParameterTypeError, RegistrationError
from ._config import CentroidInitialization

__all__ = ["INITS", "CentroidInit", "init_member", "init_name", "inits", "register_init", "unregister_init"]

#: ``init(weights, number_of_clusters, preserve_sparsity) -> centroids`` (see the module docstring).
CentroidInit = Callable[[tf.Tensor, int, bool], Any]

F = TypeVar("F", bound=CentroidInit)

INITS: NameTable[CentroidInit] = NameTable(
    "initialization", ParameterError, " Fix: pass a registered name or a ste.clustering.CentroidInitialization member."
)

_PREFIX = f"{CentroidInitialization.__name__}.".upper()


def _check_init(name: str, init: object) -> None:
    if isinstance(init, type) or not callable(init):
        raise RegistrationError(
            f"cannot register the initialization {name!r}: expected a function init(weights, number_of_clusters, "
            f"preserve_sparsity) returning the centroids; received {type(init).__name__} {init!r:.80}. Fix: "
            f"register a function (def my_init(weights, number_of_clusters, preserve_sparsity): ...)."
        )
    try:
        inspect.signature(init).bind(tf.zeros([1]), 1, False)
    except TypeError as error:
        raise RegistrationError(
            f"cannot register the initialization {name!r}: {init!r:.80} cannot be called as init(weights, "
            f"number_of_clusters, preserve_sparsity) ({error}). Fix: give it those three parameters."
        ) from None
    except ValueError:  # a builtin without a readable signature
        pass


def register_init(name: str, *, replace: bool = False) -> Callable[[F], F]:
    """A decorator registering a centroid initialization function under ``name``, for
    ``ste.clustering.cluster_weights(model, k, cluster_centroids_init=name)``.

    Args:
        name: a Python identifier that is not a keyword.
        replace: overwrite an existing name (a built-in included); otherwise
            :class:`ste.errors.RegistrationError`.
    """
    return INITS.decorator(name, replace=replace, check=_check_init, owner=f"ste.clustering.register_init({name!r})")


def unregister_init(name: str) -> CentroidInit:
    """Remove the initialization ``name`` and return its function.

    Args:
        name: a registered initialization name.
    """
    return INITS.unregister(name)


def inits() -> list[str]:
    """The registered centroid initialization names, sorted."""
    return INITS.names()


def init_name(value: Any, owner: str, argument: str = "cluster_centroids_init") -> str:
    """The registered name ``value`` means (see the module docstring), else :class:`ste.errors.ParameterError` with
    the name it probably meant."""
    if isinstance(value, CentroidInitialization):
        key = value.name.lower()
        if key in INITS:
            return key
        raise _unknown(value, owner, argument)
    if not isinstance(value, str):
        raise ParameterTypeError(
            f"{owner}: {argument} must be a registered initialization name or a ste.clustering."
            f"CentroidInitialization member; received {type(value).__name__} {value!r:.80}. Fix: pass e.g. "
            f"{argument}=ste.clustering.CentroidInitialization.KMEANS_PLUS_PLUS, or {argument}='linear'."
        )
    if value in INITS:
        return normalize_name(value)
    key = _without_prefix(value).lower()
    if key in INITS:
        return key
    raise _unknown(value, owner, argument)


def _without_prefix(value: str) -> str:
    return value[len(_PREFIX) :] if value.upper().startswith(_PREFIX) else value


def init_member(name: str) -> str:
    """The :class:`CentroidInitialization` member of a built-in name (``"linear"`` → ``LINEAR``), else ``name``:
    what ``ClusterWeights.cluster_centroids_init`` holds, TFMOT's attribute."""
    member = CentroidInitialization.__members__.get(name.upper())
    return member if member is not None and member.name.lower() == name else name


def _unknown(value: Any, owner: str, argument: str) -> ParameterError:
    known = INITS.names()
    text = _without_prefix(value).lower() if isinstance(value, str) else str(value)
    close = difflib.get_close_matches(text, known, n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    members = ", ".join(f"{CentroidInitialization.__name__}.{m.name}" for m in CentroidInitialization)
    return ParameterError(
        f"{owner}: unknown {argument} {value!r}; {hint}known names: {', '.join(known)} (TFMOT's {members} name the "
        f"built-in ones). Fix: pass one of those, or register your own with ste.clustering.register_init(name)."
    )
