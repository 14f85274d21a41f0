"""The spiking example in a reduced form (fewer epochs and steps); the full run reaches about 97 % (docs/spiking.md)."""

from __future__ import annotations

import re

from tests.helpers import example_job

EXAMPLE_RUN = example_job("spiking_digits", "--epochs", "6", "--steps", "10", "--verbose", "0", "--plots", ".")


@EXAMPLE_RUN.needed
def test_spiking_example_learns_and_saves_its_plots():
    done = EXAMPLE_RUN.wait()
    assert done.returncode == 0, done.stderr[-3000:]
    found = re.search(r"test accuracy  spiking: ([\d.]+)%   float: ([\d.]+)%", done.stdout)
    assert found, done.stdout
    assert float(found[1]) >= 90 and float(found[2]) >= 90, found[0]  # 10 classes: chance is 0.1
    for name in ("spiking_raster.png", "spiking_membrane.png"):
        assert (done.directory / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
