"""The spiking example in a reduced form (fewer epochs and steps); the full run reaches about 97 % (docs/spiking.md)."""

from __future__ import annotations

from tests.helpers import run_example


def test_spiking_example_learns_and_saves_its_plots(tmp_path):
    done = run_example("spiking_digits", tmp_path, "--epochs", "6", "--steps", "10", "--verbose", "0", "--plots", ".")
    spiking, float_accuracy = done.numbers(r"test accuracy  spiking: ([\d.]+)%   float: ([\d.]+)%")
    assert spiking >= 90 and float_accuracy >= 90, (spiking, float_accuracy)  # 10 classes: chance is 10 %
    for name in ("spiking_raster.png", "spiking_membrane.png"):
        assert (done.directory / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
