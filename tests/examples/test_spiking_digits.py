"""The spiking example in a reduced form (fewer epochs and steps); the full run reaches about 97 % (docs/spiking.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "spiking_digits.py"


def test_spiking_example_learns_and_saves_its_plots(capsys, tmp_path):
    spec = importlib.util.spec_from_file_location("spiking_digits", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.main(["--epochs", "6", "--steps", "10", "--verbose", "0", "--plots", str(tmp_path)])
    out = capsys.readouterr().out
    assert result["spiking"] >= 0.9 and result["float"] >= 0.9, result  # 10 classes: chance is 0.1
    assert f"test accuracy  spiking: {result['spiking']:.2%}   float: {result['float']:.2%}" in out
    for name in ("spiking_raster.png", "spiking_membrane.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
