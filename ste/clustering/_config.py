"""TFMOT's clustering enums: :class:`CentroidInitialization` and :class:`GradientAggregation`, with their names and
string values, and the check that turns an argument into one of them."""

from __future__ import annotations

import enum
from typing import Any, TypeVar

from ..errors import ParameterError

__all__ = ["CentroidInitialization", "GradientAggregation", "member"]


class CentroidInitialization(str, enum.Enum):
    """How the centroids start (TFMOT's ``CentroidInitialization``); see docs/clustering.md for the formulas.

    * ``LINEAR``: evenly spaced in ``[min(w), max(w)]``.
    * ``RANDOM``: uniform in ``[min(w), max(w)]`` (Keras's random seed: ``keras.utils.set_random_seed``).
    * ``DENSITY_BASED``: the inverse of the weights' empirical CDF at evenly spaced probabilities (on TFMOT's
      30-point grid).
    * ``KMEANS_PLUS_PLUS``: k-means++ seeding (TensorFlow's ``KmeansPlusPlusInitialization`` kernel with TFMOT's
      seed 9), so each centroid is one of the weights.

    Each is registered under its name in lower case (``"linear"``); ``cluster_centroids_init`` also takes a name
    registered with :func:`ste.clustering.register_init`.
    """

    LINEAR = "LINEAR"
    RANDOM = "RANDOM"
    DENSITY_BASED = "DENSITY_BASED"
    KMEANS_PLUS_PLUS = "KMEANS_PLUS_PLUS"


class GradientAggregation(str, enum.Enum):
    """How a centroid's gradient is formed from its members' (TFMOT's ``GradientAggregation``): ``SUM`` (the
    default, the true gradient of the gathered kernel) or ``AVG`` (the sum divided by the cluster's size)."""

    SUM = "SUM"
    AVG = "AVG"


E = TypeVar("E", bound=enum.Enum)


def member(kind: type[E], value: Any, owner: str, argument: str) -> E:
    """``value`` (a member of ``kind`` or its string value, any case) as the member, else
    :class:`ste.errors.ParameterError` naming the allowed values."""
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        for candidate in kind:
            if value.upper() == str(candidate.value) or value.upper() == f"{kind.__name__}.{candidate.name}".upper():
                return candidate
    allowed = ", ".join(f"{kind.__name__}.{m.name}" for m in kind)
    raise ParameterError(
        f"{owner}: unknown {argument} {value!r}; expected one of {allowed} (or its string value, e.g. "
        f"{next(iter(kind)).value!r}). Fix: pass e.g. {argument}=ste.clustering.{kind.__name__}."
        f"{next(iter(kind)).name}."
    )
