"""Encoders: static values or signals -> spike trains ``[batch, time, ...]`` (time is axis 1).

* :func:`rate_encode`: Bernoulli rate coding, a spike with probability ``clip(gain·x, 0, 1)`` at every step.
* :func:`latency_encode`: one spike per input, earlier for larger values (an RC neuron's charging time).
* :func:`delta_encode`: a spike where a signal changes by at least ``threshold`` from the previous step.

Names and defaults follow snnTorch's ``spikegen.rate``, ``spikegen.latency`` and ``spikegen.delta``.
"""

from __future__ import annotations

import math
import numbers
import os
from typing import Any

import numpy as np
import tensorflow as tf

from .._common._arguments import check_bool
from ..errors import CallError, ParameterError

__all__ = ["delta_encode", "latency_encode", "rate_encode"]


#: The most time steps an encoder makes (TensorFlow's loop counters and the RNN's time index are int32).
MAX_STEPS = 2**31 - 1


def _steps(steps: Any, where: str) -> int:
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or not 1 <= steps <= MAX_STEPS:
        raise ParameterError(f"{where}: steps must be an integer in [1, 2**31 − 1]; received {steps!r}.")
    return int(steps)


def _number(value: Any, name: str, where: str, low: float, low_open: bool = False) -> float:
    """A finite real number >= low (> low with ``low_open``); NaN and ±inf are refused, not turned into no spikes."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise ParameterError(f"{where}: {name} must be a finite number; received {value!r}.")
    if float(value) < low or (low_open and float(value) == low):
        raise ParameterError(f"{where}: {name} must be {'>' if low_open else '>='} {low}; received {value!r}.")
    return float(value)


def _seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not -(2**63) <= seed < 2**63:
        raise ParameterError(
            f"rate_encode: seed must be None or an integer in [−2**63, 2**63 − 1] (a stateless seed is int64); "
            f"received {seed!r}. Fix: reduce it, e.g. seed % 2**63."
        )
    return int(seed)


def _fits_in_memory(x: tf.Tensor, steps: int) -> None:
    """Refuse a spike train that would not fit in the memory free now (a typed error rather than an OOM kill).

    Each element needs its float32 draw, the boolean comparison and the output in x's dtype.
    """
    if not x.shape.is_fully_defined():
        return
    needed = math.prod(x.shape) * steps * (4 + 1 + x.dtype.size)
    try:
        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # no sysconf: let TensorFlow decide
        return
    if needed > available:
        raise ParameterError(
            f"rate_encode: {steps} steps of an input of shape {tuple(x.shape)} need {needed / 2**30:.1f} GiB, "
            f"more than the {available / 2**30:.1f} GiB of memory free. Fix: encode fewer steps or smaller "
            f"batches (e.g. inside a tf.data pipeline)."
        )


def _floating(x: Any, where: str) -> tf.Tensor:
    tensor = tf.convert_to_tensor(x)
    if not tensor.dtype.is_floating:
        tensor = tf.cast(tensor, tf.float32)
    if tensor.shape.rank is not None and tensor.shape.rank < 1:
        raise CallError(f"{where}: x needs a batch axis; received a scalar. Fix: pass x[None].")
    return tensor


def rate_encode(x: Any, steps: int, *, gain: float = 1.0, seed: int | None = None) -> tf.Tensor:
    """Bernoulli rate coding: ``S[b, t, ...] = 1`` with probability ``clip(gain·x[b, ...], 0, 1)``, independently.

    Args:
        x: values in [0, 1] (firing probabilities per step), shape ``[batch, ...]``.
        steps: number of time steps.
        gain: multiplies x before clipping (snnTorch's ``gain``); a finite number >= 0.
        seed: an integer in the int64 range makes the spikes reproducible (``tf.random.stateless_uniform``);
            None draws fresh ones.

    Returns:
        Spikes (0/1) of shape ``[batch, steps, ...]`` in x's floating dtype (float32 for integer input).
    """
    steps = _steps(steps, "rate_encode")
    gain = _number(gain, "gain", "rate_encode", 0.0)
    seed = None if seed is None else _seed(seed)
    x = _floating(x, "rate_encode")
    _fits_in_memory(x, steps)
    p = tf.clip_by_value(x * tf.cast(gain, x.dtype), 0, 1)
    shape = tf.concat([tf.shape(x)[:1], [steps], tf.shape(x)[1:]], axis=0)
    if seed is None:
        u = tf.random.uniform(shape, dtype=tf.float32)
    else:
        u = tf.random.stateless_uniform(shape, seed=[int(seed), 0], dtype=tf.float32)
    return tf.cast(u < tf.cast(tf.expand_dims(p, 1), tf.float32), x.dtype)


def latency_encode(x: Any, steps: int, *, tau: float = 5.0, threshold: float = 0.01, linear: bool = False) -> tf.Tensor:
    """Latency coding: one spike per input at ``t = round(tau·ln(x / (x − threshold)))``, none where x ≤ threshold.

    The time an RC circuit driven by x takes to charge to ``threshold`` (snnTorch's ``spikegen.latency``), clipped
    to the last step. ``linear=True`` uses ``t = round((1 − x)·(steps − 1))`` instead (x in [0, 1]).

    Returns:
        Spikes (0/1) of shape ``[batch, steps, ...]``.
    """
    linear = check_bool("latency_encode", "linear", linear)
    steps = _steps(steps, "latency_encode")
    tau = _number(tau, "tau", "latency_encode", 0.0, low_open=True)
    threshold = _number(threshold, "threshold", "latency_encode", 0.0, low_open=True)
    x = _floating(x, "latency_encode")
    fires = x > threshold
    if linear:
        time = tf.round((1 - tf.clip_by_value(x, 0, 1)) * (steps - 1))
    else:
        safe = tf.where(fires, x, tf.ones_like(x) * 2 * threshold)
        time = tf.round(tau * tf.math.log(safe / (safe - threshold)))
    time = tf.cast(tf.clip_by_value(time, 0, steps - 1), tf.int32)
    spikes = tf.one_hot(time, steps, dtype=x.dtype) * tf.cast(fires, x.dtype)[..., None]  # [batch, ..., steps]
    rank = len(spikes.shape)
    return tf.transpose(spikes, [0, rank - 1, *range(1, rank - 1)])


def delta_encode(x: Any, *, threshold: float = 0.1, padding: bool = False, off_spike: bool = False) -> tf.Tensor:
    """Delta modulation of a signal ``x[batch, time, ...]``: 1 where ``x[t] − x[t−1] ≥ threshold``.

    The first step is compared with 0, or with itself (no spike) when ``padding=True``. ``off_spike=True`` also
    emits −1 where the signal falls by at least ``threshold``.

    Returns:
        Spikes of x's shape: 0/1, or −1/0/1 with ``off_spike``.
    """
    padding = check_bool("delta_encode", "padding", padding)
    off_spike = check_bool("delta_encode", "off_spike", off_spike)
    threshold = _number(threshold, "threshold", "delta_encode", 0.0, low_open=True)
    x = _floating(x, "delta_encode")
    if x.shape.rank is not None and x.shape.rank < 2:
        raise CallError(f"delta_encode: x must be [batch, time, ...]; received shape {x.shape}.")
    first = x[:, :1] if padding else tf.zeros_like(x[:, :1])
    change = x - tf.concat([first, x[:, :-1]], axis=1)
    on = tf.cast(change >= threshold, x.dtype)
    if off_spike:
        return on - tf.cast(change <= -threshold, x.dtype)
    return on
