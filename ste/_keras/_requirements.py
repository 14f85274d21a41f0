"""TensorFlow and Keras, checked once when ``import ste`` starts, before any module of ste imports them.

TensorFlow is not a requirement of the package (``pyproject.toml``): a user keeps the build installed
(``tensorflow``, ``tensorflow-cpu``, ``tensorflow-macos``, ``tensorflow[and-cuda]``), and the extras of the same
names install one. So without TensorFlow, or with a release older than ste supports, ``import ste`` succeeds (the
command line's ``list`` and ``show`` answer from their catalog) and the first name of ste used raises
:class:`ste.errors.MissingDependencyError` naming the command, instead of Python's bare ``ModuleNotFoundError`` from
deep inside Keras. This module imports nothing heavy at module level.
"""

from __future__ import annotations

import re

from ..errors import MissingDependencyError

__all__ = ["MIN_KERAS", "MIN_TENSORFLOW", "check_requirements", "release"]

#: The oldest releases ste runs on (``pyproject.toml`` and the README say the same; CI runs the oldest).
MIN_TENSORFLOW = (2, 16)
MIN_KERAS = (3, 12)

_INSTALL = (
    "pip install 'ste[tensorflow]' (or the build you use: 'ste[tensorflow-cpu]', 'ste[tensorflow-macos]', "
    "'ste[and-cuda]')"
)


def release(version: str) -> tuple[int, int] | None:
    """(major, minor) of a version string such as ``2.21.0`` or ``2.22.0-dev20261101``; None if it has none."""
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found.group(1)), int(found.group(2))) if found else None


def _dotted(release: tuple[int, int]) -> str:
    return ".".join(map(str, release))


def check_requirements() -> None:
    """Import TensorFlow and Keras; raise :class:`ste.errors.MissingDependencyError` if either is missing or too old."""
    try:
        import tensorflow as tf
    except ImportError as error:
        if error.name == "tensorflow":
            found = "is not installed"
        else:  # installed, but something it imports is missing or broken
            found = f"does not import ({type(error).__name__}: {error})"
        raise MissingDependencyError(
            f"ste needs TensorFlow {_dotted(MIN_TENSORFLOW)} or later, which {found}. Fix: {_INSTALL}."
        ) from error
    version = release(getattr(tf, "__version__", ""))
    if version is not None and version < MIN_TENSORFLOW:
        raise MissingDependencyError(
            f"ste needs TensorFlow {_dotted(MIN_TENSORFLOW)} or later (with Keras 3); found TensorFlow "
            f"{tf.__version__}. Fix: pip install -U 'tensorflow>={_dotted(MIN_TENSORFLOW)}' (or the build you use: "
            f"tensorflow-cpu, tensorflow-macos, tensorflow[and-cuda])."
        )
    import keras

    version = release(getattr(keras, "__version__", ""))
    if version is not None and version < MIN_KERAS:
        raise MissingDependencyError(
            f"ste needs Keras {_dotted(MIN_KERAS)} or later; found Keras {keras.__version__}. "
            f"Fix: pip install -U 'keras>={_dotted(MIN_KERAS)}'."
        )
