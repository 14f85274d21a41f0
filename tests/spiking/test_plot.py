"""plot_raster / plot_membrane draw what they are given (checked on the figure's artists)."""

from __future__ import annotations

import numpy as np
import pytest

import ste

pytest.importorskip("matplotlib", reason="the plots need the 'plot' extra (matplotlib)")


def test_raster_has_one_mark_per_spike() -> None:
    spikes = (np.random.default_rng(0).random((2, 12, 7)) < 0.3).astype("float32")
    figure = ste.spiking.plot_raster(spikes, sample=1)
    offsets = figure.axes[0].collections[0].get_offsets()
    np.testing.assert_array_equal(sorted(map(tuple, np.asarray(offsets))), sorted(zip(*np.nonzero(spikes[1]))))
    assert f"({int(spikes[1].sum())} spikes)" in figure.axes[0].get_title()


def test_membrane_traces_and_threshold() -> None:
    membrane = np.random.default_rng(1).normal(size=(15, 4))
    figure = ste.spiking.plot_membrane(membrane, neurons=[0, 3], threshold=0.5)
    lines = figure.axes[0].get_lines()
    np.testing.assert_allclose(lines[0].get_ydata(), membrane[:, 0])
    np.testing.assert_allclose(lines[1].get_ydata(), membrane[:, 3])
    assert lines[2].get_ydata()[0] == 0.5  # the dashed threshold line
    with pytest.raises(ste.errors.CallError):
        ste.spiking.plot_membrane(np.zeros(5))
    with pytest.raises(ste.errors.CallError):
        ste.spiking.plot_raster(np.zeros((2, 3, 4)), sample=2)
