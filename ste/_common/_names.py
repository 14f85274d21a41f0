"""One name → entry table, used by the surrogate registry, the quantizer names and the constraint names.

:class:`NameTable` is generic over the entry type. Every table behaves the same way:

* thread-safe: every read and write holds one re-entrant lock;
* a name must be reachable from a spec string: a Python identifier that is not a keyword;
* names are NFKC-normalised the way Python normalises identifiers, so ``"µ_r"`` (micro sign) and ``"μ_r"``
  (Greek mu) are one name (``ast.parse`` of a spec string normalises the same way);
* registering a name that exists (a built-in included) needs ``replace=True``, else
  :class:`ste.errors.RegistrationError`;
* an unknown name raises the table's error class with did-you-mean suggestions;
* :meth:`NameTable.unregister` removes a name;
* an ``on_change`` callback hears of every change (the quantizer and constraint tables publish their names to
  Keras's own lookups through it, see :mod:`ste._keras._lookup`).

:func:`build` calls a constructor with a spec string's arguments and turns Python's argument errors and
overflowing numbers into :class:`ste.errors.ParameterError` naming the bad keyword.
"""

from __future__ import annotations

import difflib
import inspect
import keyword
import threading
import unicodedata
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ..errors import ParameterError, RegistrationError, STEError
from ._arguments import check_bool

__all__ = ["NameTable", "build", "normalize_name"]

T = TypeVar("T")
E = TypeVar("E")


def normalize_name(name: str) -> str:
    """``name`` as Python sees it in source code (NFKC, PEP 3131)."""
    return unicodedata.normalize("NFKC", name)


def _reachable(name: str, kind: str) -> str:
    """A name close to ``name`` that a spec string reaches (``class`` -> ``class_``, as PEP 8 spells it)."""
    if name.isidentifier():
        return name + "_"  # a keyword (identifiers that are not keywords are accepted)
    return f"my_{kind}"


class NameTable(Generic[T]):
    """A thread-safe name → entry table; ``kind`` ("surrogate", "quantizer", ...) appears in every message."""

    def __init__(
        self,
        kind: str,
        unknown_error: type[STEError],
        hint: str = "",
        on_change: Callable[[str, T | None], None] | None = None,
    ) -> None:
        self.kind = kind
        self._unknown_error = unknown_error
        self._hint = hint
        self._on_change = on_change  # told (name, entry) on register and (name, None) on unregister, under the lock
        self._lock = threading.RLock()
        self._entries: dict[str, T] = {}

    @property
    def lock(self) -> threading.RLock:
        """The table's lock (hold it to make a check-then-register sequence atomic)."""
        return self._lock

    def check_name(self, name: Any) -> str:
        """The normalised ``name``, or :class:`ste.errors.RegistrationError` if a spec string cannot reach it."""
        if not isinstance(name, str):
            raise RegistrationError(f"a {self.kind} name must be a string; received {type(name).__name__} {name!r}.")
        normal = normalize_name(name)
        if not normal.isidentifier() or keyword.iskeyword(normal):
            raise RegistrationError(
                f"cannot register the {self.kind} name {name!r}: a name must be a Python identifier and not a "
                f"keyword, so that a spec string such as '{self.kind}_name(...)' can reach it. Fix: e.g. "
                f"{_reachable(normal, self.kind)!r} with letters, digits and underscores."
            )
        return normal

    def register(self, name: str, entry: T, *, replace: bool = False) -> str:
        """Store ``entry`` under ``name`` (normalised, returned); an existing name needs ``replace=True``."""
        replace = check_bool(f"register {self.kind} {name!r}", "replace", replace)
        normal = self.check_name(name)
        with self._lock:
            if normal in self._entries and not replace:
                raise RegistrationError(
                    f"a {self.kind} named {normal!r} is already registered ({_describe(self._entries[normal])}). "
                    f"Fix: pass replace=True to overwrite it, or choose another name."
                )
            previous = self._entries.get(normal)
            self._entries[normal] = entry
            if self._on_change is not None:
                try:
                    self._on_change(normal, entry)
                except BaseException:  # the table stays as it was: the entry is not half registered
                    if previous is None:
                        del self._entries[normal]
                    else:
                        self._entries[normal] = previous
                    raise
        return normal

    def decorator(
        self,
        name: str,
        *,
        replace: bool = False,
        check: Callable[[str, Any], None] | None = None,
        owner: str = "",
    ) -> Callable[[E], E]:
        """A decorator registering its argument under ``name`` and returning it: the name and ``replace`` are checked
        at once, ``check(name, entry)`` (which raises) when the decorator is applied. ``owner`` is the public call
        named in messages (``"ste.qat.register_scheme('w4')"``)."""
        self.check_name(name)
        replace = check_bool(owner or f"register {self.kind} {name!r}", "replace", replace)

        def decorate(entry: E) -> E:
            if check is not None:
                check(name, entry)
            self.register(name, entry, replace=replace)  # type: ignore[arg-type]  # E is T
            return entry

        return decorate

    def _string(self, name: Any, call: str) -> str:
        """``name`` normalised, or the table's error for a name that is not a string (before it is hashed)."""
        if not isinstance(name, str):
            error: STEError = self._unknown_error(
                f"{call}: a {self.kind} name is a string; received {type(name).__name__} {_short(name)}. Fix: pass "
                f"one name, e.g. {(self.names() or ['name'])[0]!r}."
            )
            raise error
        return normalize_name(name)

    def unregister(self, name: str) -> T:
        """Remove ``name`` and return its entry (unknown names raise the table's error, with suggestions)."""
        normal = self._string(name, f"unregister the {self.kind}")
        with self._lock:
            if normal not in self._entries:
                raise self.unknown(name)
            entry = self._entries.pop(normal)
            if self._on_change is not None:
                self._on_change(normal, None)
            return entry

    def lookup(self, name: str, context: str = "") -> T:
        """The entry registered under ``name``; unknown names raise the table's error with suggestions."""
        normal = self._string(name, f"look up the {self.kind}" + (f" (in {context!r})" if context else ""))
        with self._lock:
            entry = self._entries.get(normal)
        if entry is None:
            raise self.unknown(name, context)
        return entry

    def get(self, name: str) -> T | None:
        """The entry registered under ``name``, or None."""
        if not isinstance(name, str):
            return None
        with self._lock:
            return self._entries.get(normalize_name(name))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def names(self) -> list[str]:
        """The registered names, sorted."""
        with self._lock:
            return sorted(self._entries)

    def items(self) -> list[tuple[str, T]]:
        """``(name, entry)`` pairs, sorted by name (a snapshot)."""
        with self._lock:
            return sorted(self._entries.items(), key=lambda item: item[0])

    def unknown(self, name: Any, context: str = "") -> STEError:
        """The error for an unknown ``name``: did-you-mean suggestions and the known names."""
        known = self.names()
        text = normalize_name(name) if isinstance(name, str) else str(name)
        close = difflib.get_close_matches(text, known, n=3, cutoff=0.5)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        where = f" (in {context!r})" if context else ""
        error: STEError = self._unknown_error(
            f"no {self.kind} named {name!r}{where}; {hint}known names: {', '.join(known)}.{self._hint}"
        )
        return error


def _describe(entry: Any) -> str:
    return str(getattr(entry, "__qualname__", None) or type(entry).__qualname__)


def build(owner: str, constructor: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
    """``constructor(*args, **kwargs)`` with argument errors as :class:`ste.errors.ParameterError` naming the keyword.

    A number too large for a float (``OverflowError``) also becomes a :class:`ste.errors.ParameterError`.
    """
    try:
        signature: inspect.Signature | None = inspect.signature(constructor)
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        try:
            signature.bind(*args, **kwargs)
        except TypeError as error:
            accepted = [
                p.name for p in signature.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            ]
            raise ParameterError(
                f"{owner}: cannot be built with {_arguments(args, kwargs)} ({error}); its parameters are {accepted}."
            ) from None
    try:
        return constructor(*args, **kwargs)
    except STEError:
        raise
    except OverflowError as error:
        raise ParameterError(
            f"{owner}: a number in {_arguments(args, kwargs)} is too large for a float ({error}). Fix: pass a "
            f"finite number of float range (|x| < 1.8e308)."
        ) from None
    except (TypeError, ValueError) as error:
        raise ParameterError(f"{owner}: cannot be built with {_arguments(args, kwargs)} ({error}).") from None


def _arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    parts = [_short(a) for a in args] + [f"{k}={_short(v)}" for k, v in kwargs.items()]
    return "(" + ", ".join(parts) + ")"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
