"""The spiking example in a reduced form (fewer epochs and steps); the full run reaches about 97 % (docs/spiking.md)."""

from __future__ import annotations

from tests.helpers import example_job

EXAMPLE_RUN = example_job("spiking_digits", "--epochs", "6", "--steps", "10", "--verbose", "0", "--plots", ".")


@EXAMPLE_RUN.needed
def test_spiking_example_learns_and_saves_its_plots():
    done = EXAMPLE_RUN.succeeded()
    spiking, float_accuracy = done.numbers(r"test accuracy  spiking: ([\d.]+)%   float: ([\d.]+)%")
    assert spiking >= 90 and float_accuracy >= 90, (spiking, float_accuracy)  # 10 classes: chance is 10 %
    for name in ("spiking_raster.png", "spiking_membrane.png"):
        assert (done.directory / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
