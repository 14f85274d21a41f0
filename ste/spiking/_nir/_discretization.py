"""Euler's rule at a step ``dt``, written once for both directions: a decay ``β = 1 − dt/τ``, the input gains
``R·dt/τ`` (LIF, LI) and ``R·dt`` (IF, I), and the τ and R that give back ste's exact numbers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def _beta(dt: float, tau: Any) -> Any:
    return 1 - dt / np.asarray(tau, np.float64)


def _lif_gain(r: Any, dt: float, tau: Any) -> Any:
    return np.asarray(r, np.float64) * dt / np.asarray(tau, np.float64)


def _if_gain(r: Any, dt: float) -> Any:
    return np.asarray(r, np.float64) * dt


def _solve(function: Callable[[float], float], target: float, guess: float) -> float:
    """A float x next to ``guess`` with ``function(x) == target`` exactly (so that the import gives back ste's value
    bit for bit); ``guess`` when no neighbour within 64 ulps does."""
    if function(guess) == target:
        return guess
    low = high = guess
    for _ in range(64):
        low, high = np.nextafter(low, -np.inf), np.nextafter(high, np.inf)
        for x in (low, high):
            if function(float(x)) == target:
                return float(x)
    return guess


def _tau_of(beta: float, dt: float) -> float:
    return _solve(lambda tau: float(_beta(dt, tau)), beta, dt / (1 - beta))


def _unit_r(dt: float, tau: float) -> float:
    return _solve(lambda r: float(_lif_gain(r, dt, tau)), 1.0, tau / dt)


def _unit_if_r(dt: float) -> float:
    """R with R·dt = 1 exactly: an integrator (I, IF) that adds its input unscaled."""
    return _solve(lambda x: float(_if_gain(x, dt)), 1.0, 1 / dt)
