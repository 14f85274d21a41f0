"""Helpers for the quantizer tests: run a quantizer forward and backward with a non-trivial upstream gradient."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

FLOATS = [tf.float16, tf.bfloat16, tf.float32, tf.float64]


def np_dtype(dtype: tf.DType) -> Any:
    """The numpy dtype of a TF float dtype (bfloat16 included, via TensorFlow's ml_dtypes type)."""
    return dtype.as_numpy_dtype


def upstream(shape: tuple[int, ...], dtype: tf.DType) -> np.ndarray:
    """A non-constant upstream gradient (0.5 ... 2 in steps exact in every float dtype)."""
    size = int(np.prod(shape))
    return (0.5 + 0.25 * (np.arange(size) % 7)).reshape(shape).astype(np_dtype(dtype))


def run_quantizer(
    quantizer: Callable[..., Any], x: np.ndarray, dtype: tf.DType
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(output, gradient with respect to x for the upstream gradient dy, dy), all as float64 numpy arrays."""
    xt = tf.constant(np.asarray(x, np.float64), dtype=dtype)
    dy = upstream(xt.shape, dtype)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = quantizer(xt)
    assert y.dtype == dtype, f"output dtype {y.dtype} != input dtype {dtype}"
    grad = tape.gradient(y, xt, output_gradients=tf.constant(dy))
    assert grad.dtype == dtype
    return y.numpy().astype(np.float64), grad.numpy().astype(np.float64), dy.astype(np.float64)


@pytest.fixture
def run() -> Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray]]:
    return run_quantizer
