"""``ste.plot``: a surrogate's primitive and derivative, or an op's forward and gradient, on one x axis.

matplotlib is optional (the ``plot`` extra) and imported only when a plot is drawn. The figure is a bare
``matplotlib.figure.Figure`` (no pyplot, no global state, any backend): save it with ``fig.savefig(path)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Union

import numpy as np
import tensorflow as tf

from ._describe import callable_name
from ._dsl import Forward, STEFunction
from ._errors import CallError, MissingDependencyError
from .registry import Surrogate, get

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["PlotTarget", "plot"]

#: What :func:`plot` draws: a registry name or spec string, a surrogate (instance, class or config) or an ste op.
PlotTarget = Union[str, Surrogate, "type[Surrogate]", Mapping[str, Any], STEFunction[..., Any]]

_FORWARD_COLOR = "#1f77b4"
_GRADIENT_COLOR = "#d62728"


def _figure_class() -> type[Figure]:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingDependencyError(
            "ste.plot needs matplotlib, which is not installed. "
            "Fix: pip install 'ste[plot]' (or pip install matplotlib)."
        ) from None
    return Figure


def _grid(x: Any, points: int) -> np.ndarray:
    if isinstance(x, tuple) and len(x) == 2 and all(isinstance(v, (int, float)) for v in x):
        low, high = float(x[0]), float(x[1])
        if not (np.isfinite(low) and np.isfinite(high) and low < high):
            raise CallError(f"ste.plot(): x=(low, high) needs finite low < high; received {x!r}.")
        if points < 2:
            raise CallError(f"ste.plot(): points must be at least 2; received {points!r}.")
        return np.linspace(low, high, points)
    grid = np.asarray(x, dtype=np.float64)
    if grid.ndim != 1 or grid.size < 2 or not np.all(np.isfinite(grid)):
        raise CallError(
            f"ste.plot(): x must be (low, high) or a 1-D array of at least 2 finite points; received {x!r:.80}."
        )
    return np.sort(grid)


def _curves(obj: Any, xs: tf.Tensor, params: dict[str, Any]) -> tuple[str, str | None, Any, str, Any]:
    """(title, upper label or None, upper values, lower label, lower values) for the object to draw."""
    if isinstance(obj, Forward):
        obj(xs)  # raises MissingBackwardError, which says how to attach a rule
    if isinstance(obj, STEFunction):
        with tf.GradientTape() as tape:
            tape.watch(xs)
            ys = obj(xs, **params)
        if not isinstance(ys, tf.Tensor) or ys.shape != xs.shape:
            raise CallError(
                f"ste.plot({obj!r}): plots an elementwise one-output op; the forward returned "
                f"{type(ys).__name__} of shape {getattr(ys, 'shape', '?')} for an input of shape {xs.shape}."
            )
        grads = tape.gradient(ys, xs)
        name = callable_name(obj.forward_fn)
        return repr(obj), f"forward {name}(x)", ys.numpy(), "gradient (backward rule)", grads.numpy()
    if not isinstance(obj, (str, Surrogate, Mapping)) and not (isinstance(obj, type) and issubclass(obj, Surrogate)):
        raise CallError(
            f"ste.plot() draws a registry name or spec string, a ste.registry.Surrogate, or an ste op "
            f"(ste.forward(f).backward(...)); received {type(obj).__name__} {obj!r:.80}."
        )
    surrogate = get(obj, **params)
    derivative = surrogate.derivative(xs).numpy()
    if not surrogate.has_primitive:
        return repr(surrogate), None, None, "derivative d(x)", derivative
    return repr(surrogate), "primitive P(x)", surrogate.primitive(xs).numpy(), "derivative d(x) = P'(x)", derivative


def plot(
    obj: PlotTarget,
    x: tuple[float, float] | Any = (-3.0, 3.0),
    *,
    points: int = 601,
    dtype: tf.DType | str = "float32",
    title: str | None = None,
    figsize: tuple[float, float] = (6.0, 4.5),
    dpi: float = 100.0,
    **params: Any,
) -> Figure:
    """Draw ``obj``'s forward (or primitive) above its gradient (or derivative), sharing the x axis.

    ``obj`` is a registry name or spec string (``"sigmoid_surrogate(beta=4)"``), a :class:`ste.registry.Surrogate`,
    or an op made with ``ste.forward(f).backward(...)``. For a surrogate the upper panel is its primitive P (when it
    has one) and the lower its derivative d = P'; for an op they are the forward and the gradient its rule gives for
    an upstream gradient of ones. ``x`` is ``(low, high)`` (sampled at ``points`` points) or an array of points;
    ``params`` are the surrogate's parameters (``ste.plot("atan", alpha=4)``) or the op's keyword hyperparameters.
    The derivative's peak is marked.

    Returns a ``matplotlib.figure.Figure`` (``fig.savefig("rule.png")``). Raises :class:`ste.MissingDependencyError`
    when matplotlib is not installed.

    >>> fig = ste.plot("sigmoid_surrogate", beta=4.0)  # doctest: +SKIP
    """
    figure_class = _figure_class()
    grid = _grid(x, points)
    xs = tf.constant(grid, dtype=tf.as_dtype(dtype))
    heading, upper_label, upper, lower_label, lower = _curves(obj, xs, dict(params))
    xv = xs.numpy().astype(np.float64)

    fig = figure_class(figsize=figsize, dpi=dpi, layout="constrained")
    if upper_label is None:
        axes = [fig.subplots(1, 1)]
    else:
        top, bottom = fig.subplots(2, 1, sharex=True)
        top.plot(xv, np.asarray(upper, dtype=np.float64), color=_FORWARD_COLOR, linewidth=1.8)
        top.set_ylabel(upper_label)
        axes = [top, bottom]
    bottom = axes[-1]
    values = np.asarray(lower, dtype=np.float64)
    bottom.plot(xv, values, color=_GRADIENT_COLOR, linewidth=1.8)
    bottom.fill_between(xv, 0.0, values, color=_GRADIENT_COLOR, alpha=0.08)
    bottom.set_ylabel(lower_label)
    bottom.set_xlabel("x")
    finite = np.isfinite(values)
    if finite.any():
        at = int(np.argmax(np.where(finite, values, -np.inf)))
        bottom.plot([xv[at]], [values[at]], "o", color=_GRADIENT_COLOR, markersize=4)
        bottom.annotate(
            f"peak {values[at]:.4g}",
            (xv[at], values[at]),
            textcoords="offset points",
            xytext=(6, -12),
            fontsize="small",
        )
    for axis in axes:
        axis.grid(True, alpha=0.3)
        axis.axhline(0.0, color="0.6", linewidth=0.6)
        axis.axvline(0.0, color="0.6", linewidth=0.6)
    fig.suptitle(title if title is not None else heading, fontsize="medium")
    return fig
