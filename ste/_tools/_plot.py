"""``ste.plot``: a surrogate's primitive and derivative, or an op's (a quantizer's) forward and gradient.

matplotlib is optional (the ``plot`` extra) and imported only when a plot is drawn. The figure is a bare
``matplotlib.figure.Figure`` (no pyplot, no global state, any backend): save it with ``fig.savefig(path)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

import numpy as np
import tensorflow as tf

from .._common._matplotlib import figure_class as _figure_class
from .._core._describe import callable_name
from .._core._dsl import Forward, STEFunction
from ..errors import CallError
from ..quantizers import Quantizer
from ..registry import HasPrimitive, Surrogate, get
from ._catalog import plateau_edge
from ._targets import as_quantizer

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["PlotTarget", "auto_range", "plot"]

#: What :func:`plot` draws: a registry name or spec string, a surrogate (instance, class or config), an ste op, or a
#: quantizer (instance, class, name or spec string).
PlotTarget = Union[str, Surrogate, "type[Surrogate]", Mapping[str, Any], STEFunction[..., Any], Quantizer]

_FORWARD_COLOR = "#1f77b4"
_GRADIENT_COLOR = "#d62728"
_DEFAULT_RANGE = (-3.0, 3.0)
# Where auto_range looks for the derivative's peak and width: 0 and ±10^-6 ... ±10^4.
_PROBE = np.concatenate([-np.logspace(4, -6, 2001), [0.0], np.logspace(-6, 4, 2001)])
_NICE = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)
# Values of the lower curve within this relative distance of its maximum count as the peak (one ulp in halves).
_FLAT = {tf.float16: 2.0**-10, tf.bfloat16: 2.0**-7}
_WIDTHS = 4.0  # auto_range spans this many half-widths at half-maximum on each side of the peak


@dataclass(frozen=True)
class _Curves:
    title: str
    upper_label: str | None  # None: one panel
    upper: np.ndarray | None
    lower_label: str
    lower: np.ndarray
    gradient: Callable[[np.ndarray], np.ndarray]  # the lower curve at other points (to locate a plateau's ends)


def _nice(value: float) -> float:
    """The smallest of 1, 1.5, 2, 2.5, 3, 4, 5, 6, 8 (times a power of ten) that is >= value."""
    scale = 10.0 ** math.floor(math.log10(value))
    return next(step * scale for step in _NICE if step * scale >= value * (1 - 1e-12))


def auto_range(surrogate: Surrogate) -> tuple[float, float]:
    """An x range that shows a surrogate's derivative: its peak ± 4 half-widths at half-maximum, rounded.

    The width is measured, not read from parameters, so it holds for every entry (``fast_sigmoid``'s spike, a
    sigmoid's long tails, a boxcar's plateau). A derivative that does not fall to half its peak on both sides
    (constant, ``zero``) gets (−3, 3).
    """
    values = np.asarray(surrogate.derivative(tf.constant(_PROBE, tf.float64)).numpy(), dtype=np.float64)
    finite = np.isfinite(values)
    if not finite.any():
        return _DEFAULT_RANGE
    top = float(np.max(values[finite]))
    if top <= 0:
        return _DEFAULT_RANGE
    above = np.flatnonzero(finite & (values >= top / 2))
    first, last = int(above.min()), int(above.max())
    if first == 0 or last == len(_PROBE) - 1:
        return _DEFAULT_RANGE  # does not fall to half within ±1e4
    peak = np.flatnonzero(finite & (values >= top * (1 - 1e-9)))
    center = 0.5 * (_PROBE[peak.min()] + _PROBE[peak.max()])
    half_width = 0.5 * (_PROBE[last] - _PROBE[first])
    reach = _nice(_WIDTHS * half_width)
    center = round(center / (reach / 4)) * (reach / 4)  # on a quarter of the reach: round tick labels
    return center - reach, center + reach


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


def _traced(fn: Callable[..., Any], title: str, forward_name: str, xs: tf.Tensor, params: dict[str, Any]) -> _Curves:
    """The forward and gradient (for an upstream gradient of ones) of an elementwise op or quantizer."""

    def values(points: tf.Tensor) -> tuple[Any, Any]:
        with tf.GradientTape() as tape:
            tape.watch(points)
            ys = fn(points, **params)
        if not isinstance(ys, tf.Tensor) or ys.shape != points.shape:
            raise CallError(
                f"ste.plot({title}): plots an elementwise one-output op; the forward returned "
                f"{type(ys).__name__} of shape {getattr(ys, 'shape', '?')} for an input of shape {points.shape}."
            )
        return ys, tape.gradient(ys, points, unconnected_gradients=tf.UnconnectedGradients.ZERO)

    def gradient(points: np.ndarray) -> np.ndarray:
        return np.asarray(values(tf.constant(points, xs.dtype))[1].numpy(), dtype=np.float64)

    ys, grads = values(xs)
    return _Curves(title, f"forward {forward_name}(x)", ys.numpy(), "gradient", grads.numpy(), gradient)


def _surrogate_curves(surrogate: Surrogate, xs: tf.Tensor) -> _Curves:
    def gradient(points: np.ndarray) -> np.ndarray:
        return np.asarray(surrogate.derivative(tf.constant(points, xs.dtype)).numpy(), dtype=np.float64)

    derivative = surrogate.derivative(xs).numpy()
    if not isinstance(surrogate, HasPrimitive):
        return _Curves(repr(surrogate), None, None, "derivative d(x)", derivative, gradient)
    primitive = surrogate.primitive(xs).numpy()
    return _Curves(repr(surrogate), "primitive P(x)", primitive, "derivative d(x) = P'(x)", derivative, gradient)


def _target(obj: Any, params: dict[str, Any]) -> Surrogate | STEFunction[..., Any] | Quantizer:
    """Resolve what :func:`plot` received (at its entry): a quantizer, an op, or a surrogate."""
    quantizer = as_quantizer(obj)
    if quantizer is not None:
        if params:
            raise CallError(
                f"ste.plot({quantizer!r}): a quantizer takes its parameters in its spec string or constructor; "
                f"received keywords {sorted(params)}. Fix: e.g. "
                f'ste.plot(ste.quantizers.Sign(surrogate="straight_through(clip=1.5)")).'
            )
        return quantizer
    if isinstance(obj, Forward):
        obj(tf.zeros([1]))  # raises MissingBackwardError, which says how to attach a rule
    if isinstance(obj, STEFunction):
        return obj
    if not isinstance(obj, (str, Surrogate, Mapping)) and not (isinstance(obj, type) and issubclass(obj, Surrogate)):
        raise CallError(
            f"ste.plot() draws a registry name or spec string, a ste.registry.Surrogate, an ste op "
            f"(ste.forward(f).backward(...)) or a quantizer; received {type(obj).__name__} {obj!r:.80}."
        )
    return get(obj, **params)


def _curves(target: Surrogate | STEFunction[..., Any] | Quantizer, xs: tf.Tensor, params: dict[str, Any]) -> _Curves:
    if isinstance(target, Surrogate):
        return _surrogate_curves(target, xs)
    if isinstance(target, Quantizer):
        return _traced(target, repr(target), type(target).__name__, xs, {})
    return _traced(target, repr(target), callable_name(target.forward_fn), xs, params)


def _short(value: float) -> str:
    return "0" if abs(value) < 1e-12 else f"{value:.4g}"


def _mark_peak(axis: Axes, xv: np.ndarray, curves: _Curves, tolerance: float) -> None:
    """Mark the lower curve's peak: a dot at a point, a bar over a plateau; nothing for a constant (``zero``)."""
    values = np.asarray(curves.lower, dtype=np.float64)
    finite = np.isfinite(values)
    if not finite.any():
        return
    top = float(np.max(values[finite]))
    level = top - tolerance * max(abs(top), 1e-300)
    on = finite & (values >= level)
    if on.all():
        return  # constant on the whole range: no peak to show
    where = np.flatnonzero(on)
    first, last = int(where.min()), int(where.max())
    style: dict[str, Any] = {
        "color": _GRADIENT_COLOR,
        "fontsize": "small",
        "textcoords": "offset points",
        "bbox": {"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.85},
    }
    if first == last or not on[first : last + 1].all():
        axis.plot([xv[first]], [top], "o", color=_GRADIENT_COLOR, markersize=4)
        axis.annotate(
            f"peak {_short(top)} at x = {_short(float(xv[first]))}", (xv[first], top), xytext=(8, -14), **style
        )
        return
    low = xv[first] if first == 0 else plateau_edge(curves.gradient, float(xv[first]), float(xv[first - 1]), level)
    high = (
        xv[last] if last == len(xv) - 1 else plateau_edge(curves.gradient, float(xv[last]), float(xv[last + 1]), level)
    )
    axis.plot([low, high], [top, top], color=_GRADIENT_COLOR, linewidth=4, alpha=0.5, solid_capstyle="butt")
    axis.plot([low, high], [top, top], "|", color=_GRADIENT_COLOR, markersize=10)
    axis.annotate(
        f"peak {_short(top)} for x in [{_short(low)}, {_short(high)}]",
        ((low + high) / 2, top),
        xytext=(0, -14),
        ha="center",
        **style,
    )


def plot(
    obj: PlotTarget,
    x: tuple[float, float] | Any = None,
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
    an op made with ``ste.forward(f).backward(...)``, or a quantizer (a :class:`ste.quantizers.Quantizer`, or a
    quantizer name or spec string such as ``"sign"``; a name that is also a surrogate's means the surrogate).
    For a surrogate the upper panel is its primitive P (when it has one) and the lower its derivative d = P'; for an
    op or a quantizer they are the forward and the gradient for an upstream gradient of ones. ``x`` is
    ``(low, high)`` (sampled at ``points`` points) or an array of points; by default, for a surrogate, the peak of d
    ± 4 half-widths at half-maximum (:func:`auto_range`), else (−3, 3). ``params`` are the surrogate's parameters
    (``ste.plot("atan", alpha=4)``) or the op's keyword hyperparameters. The peak of the lower curve is marked: a
    dot, or a bar over a plateau; nothing when the curve is constant.

    Returns a ``matplotlib.figure.Figure`` (``fig.savefig("rule.png")``). Raises
    :class:`ste.errors.MissingDependencyError` when matplotlib is not installed.

    >>> fig = ste.plot("sigmoid_surrogate", beta=4.0)  # doctest: +SKIP
    """
    figure_class = _figure_class()
    tf_dtype = tf.as_dtype(dtype)
    target = _target(obj, dict(params))
    if x is None and isinstance(target, Surrogate):
        x = auto_range(target)
    grid = _grid(_DEFAULT_RANGE if x is None else x, points)
    xs = tf.constant(grid, dtype=tf_dtype)
    curves = _curves(target, xs, dict(params))
    xv = xs.numpy().astype(np.float64)

    fig = figure_class(figsize=figsize, dpi=dpi, layout="constrained")
    if curves.upper_label is None:
        axes = [fig.subplots(1, 1)]
    else:
        top, bottom = fig.subplots(2, 1, sharex=True)
        top.plot(xv, np.asarray(curves.upper, dtype=np.float64), color=_FORWARD_COLOR, linewidth=1.8)
        top.set_ylabel(curves.upper_label)
        axes = [top, bottom]
    bottom = axes[-1]
    values = np.asarray(curves.lower, dtype=np.float64)
    bottom.plot(xv, values, color=_GRADIENT_COLOR, linewidth=1.8)
    bottom.fill_between(xv, 0.0, values, color=_GRADIENT_COLOR, alpha=0.08)
    bottom.set_ylabel(curves.lower_label)
    bottom.set_xlabel("x")
    _mark_peak(bottom, xv, curves, _FLAT.get(tf_dtype, 1e-7))
    for axis in axes:
        axis.grid(True, alpha=0.3)
        axis.axhline(0.0, color="0.6", linewidth=0.6)
        axis.axvline(0.0, color="0.6", linewidth=0.6)
    fig.suptitle(title if title is not None else curves.title, fontsize="medium")
    return fig
