"""The user's line for a warning: the ``stacklevel`` of the first caller outside ``ste``, Keras and TensorFlow."""

from __future__ import annotations

import os
import sys

import keras
import tensorflow as tf

__all__ = ["outside_ste"]

_LIBRARY_DIRS = tuple(
    os.path.dirname(path) + os.sep
    for path in (keras.__file__ or "", tf.__file__ or "", os.path.dirname(os.path.abspath(__file__)))
)


def outside_ste() -> int:
    """The ``stacklevel`` of the first caller outside ``ste``, Keras and TensorFlow (a warning then shows the user's
    line, also when it is given while Keras builds the layer or AutoGraph traces a ``tf.function``)."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and _library_frame(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level


def _library_frame(filename: str) -> bool:
    """A frame of ste, Keras or TensorFlow, or of the copy of a user's function AutoGraph converted (a temporary
    file: the warning shows the line that called that function instead)."""
    return os.path.abspath(filename).startswith(_LIBRARY_DIRS) or os.path.basename(filename).startswith(
        "__autograph_generated"
    )
