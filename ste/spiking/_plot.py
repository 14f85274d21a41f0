"""``plot_raster`` and ``plot_membrane``: a spike raster and membrane traces of one sample, as matplotlib figures.

matplotlib is optional (the ``plot`` extra) and imported only when a figure is drawn; the result is a bare
``matplotlib.figure.Figure`` (no pyplot state): save it with ``fig.savefig(path)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._common._matplotlib import figure_class
from ..errors import CallError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["plot_membrane", "plot_raster"]


def _trace(values: Any, sample: int, where: str) -> np.ndarray:
    """[time, units] of one sample from [batch, time, units] (or [time, units] as given)."""
    array = np.asarray(values.numpy() if hasattr(values, "numpy") else values, dtype=np.float64)
    if array.ndim == 3:
        if not 0 <= sample < array.shape[0]:
            raise CallError(f"{where}: sample={sample} is out of range for a batch of {array.shape[0]}.")
        array = array[sample]
    if array.ndim != 2:
        raise CallError(f"{where}: expected [batch, time, units] or [time, units]; received shape {array.shape}.")
    return array


def _integer_steps(axes: Any) -> None:
    from matplotlib.ticker import MaxNLocator  # matplotlib is there: a figure was just made

    axes.xaxis.set_major_locator(MaxNLocator(integer=True))


def plot_raster(spikes: Any, *, sample: int = 0, title: str = "spike raster", ax: Any = None) -> Figure:
    """A raster of one sample's spikes: a dot at (time step, neuron) for every spike."""
    trace = _trace(spikes, sample, "plot_raster")
    figure = ax.figure if ax is not None else figure_class()(figsize=(6, 3.2))
    axes = ax if ax is not None else figure.add_subplot()
    steps, units = np.nonzero(trace)
    size = float(np.clip(2500.0 / max(trace.shape[1], 1), 1.0, 60.0))  # marker area shrinks with the neuron count
    axes.scatter(steps, units, marker="s" if trace.shape[1] > 40 else "|", s=size, color="black", linewidths=0)
    axes.set_xlim(-0.5, trace.shape[0] - 0.5)
    axes.set_ylim(-0.5, trace.shape[1] - 0.5)
    axes.set_xlabel("time step")
    _integer_steps(axes)
    axes.set_ylabel("neuron")
    axes.set_title(f"{title} ({int(trace.sum())} spikes)")
    return figure


def plot_membrane(
    membrane: Any,
    *,
    sample: int = 0,
    neurons: Sequence[int] | None = None,
    threshold: float | None = None,
    spikes: Any = None,
    title: str = "membrane potential",
    ax: Any = None,
) -> Figure:
    """Membrane traces U[t] of some neurons of one sample, with the threshold as a dashed line and spikes marked."""
    trace = _trace(membrane, sample, "plot_membrane")
    chosen = list(range(min(trace.shape[1], 10))) if neurons is None else list(neurons)
    figure = ax.figure if ax is not None else figure_class()(figsize=(6, 3.2))
    axes = ax if ax is not None else figure.add_subplot()
    steps = np.arange(trace.shape[0])
    fired = _trace(spikes, sample, "plot_membrane") if spikes is not None else None
    for neuron in chosen:
        (line,) = axes.plot(steps, trace[:, neuron], label=f"neuron {neuron}", linewidth=1.2)
        if fired is not None:
            at = np.nonzero(fired[:, neuron])[0]
            axes.scatter(at, trace[at, neuron], color=line.get_color(), marker="^", s=18, zorder=3)
    if threshold is not None:
        axes.axhline(threshold, color="gray", linestyle="--", linewidth=1, label="threshold")
    axes.set_xlabel("time step")
    _integer_steps(axes)
    axes.set_ylabel("U[t]")
    axes.set_title(title)
    axes.legend(fontsize="x-small", ncol=2)
    return figure
