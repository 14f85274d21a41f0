"""NIR's channels-first layout ``(C, H, W)`` against Keras's channels-last one, for shapes and arrays, and NIR's
integer-or-tuple arguments as tuples."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def _nir_shape(keras_shape: Sequence[int]) -> tuple[int, ...]:
    """Per-step features in NIR's layout (channels first) from Keras's (channels last)."""
    shape = tuple(int(n) for n in keras_shape)
    return shape if len(shape) < 2 else (shape[-1], *shape[:-1])


def _keras_shape(nir_shape: Sequence[int]) -> tuple[int, ...]:
    shape = tuple(int(n) for n in nir_shape)
    return shape if len(shape) < 2 else (*shape[1:], shape[0])


def _channels_last(array: Any) -> np.ndarray:
    a = np.asarray(array, np.float64)
    return a if a.ndim < 2 else np.moveaxis(a, 0, -1)


def _nir_array(array: Any) -> np.ndarray:
    a = np.asarray(array)
    return a if a.ndim < 2 else np.moveaxis(a, -1, 0)


def _pair(value: Any, rank: int) -> tuple[int, ...]:
    array = np.atleast_1d(np.asarray(value)).astype(int)
    return tuple(int(v) for v in np.broadcast_to(array, (rank,)))
