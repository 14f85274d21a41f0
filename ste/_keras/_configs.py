"""Loading a saved config: a damaged one (missing keys, wrong types, out-of-range values) raises an ste error.

Keras's ``from_config`` wraps any exception of the constructor in a bare ``TypeError("Error when deserializing
...")``, hiding the ste error (and its fix) inside the message. :func:`rebuild` runs the Keras ``from_config`` and
re-raises the constructor's ste error itself, or turns another failure (Keras's own argument checks) into a
:class:`ste.errors.ParameterError` naming the class, the keys received and the fix.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ..errors import ParameterError, STEError

__all__ = ["rebuild"]

T = TypeVar("T")


def rebuild(cls: type, config: Any, build: Callable[[dict[str, Any]], T]) -> T:
    """``build(config)`` (the Keras ``from_config``), with the errors of a damaged config made ste errors."""
    if not isinstance(config, Mapping):
        raise ParameterError(
            f"{cls.__name__}.from_config: expected the dict that {cls.__name__}.get_config() returns; received "
            f"{type(config).__name__} {config!r:.80}."
        )
    try:
        return build(dict(config))
    except STEError:
        raise
    except (TypeError, ValueError, KeyError) as error:
        cause = error.__context__ if error.__context__ is not None else error
        if isinstance(cause, STEError):
            raise cause from None
        raise ParameterError(
            f"{cls.__name__}.from_config: the saved config is damaged ({type(cause).__name__}: {str(cause)[:300]}); "
            f"received keys {sorted(config)}. Fix: save the object again with ste (get_config() writes a config "
            f"that loads), or repair this entry of the .keras file's config.json."
        ) from None
