"""Smoke test of examples/qat_digits.py (few epochs): float, QAT and int8 TFLite accuracies and file sizes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "qat_digits.py"


def test_example_trains_quantizes_and_converts(capsys):
    spec = importlib.util.spec_from_file_location("qat_digits", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.main(["--epochs", "4", "--qat-epochs", "1"])
    out = capsys.readouterr().out
    assert "int8 TFLite:" in out and "TFLite file" in out
    assert result["float"] > 0.8 and result["qat"] > 0.8  # 4 + 1 epochs; the full run reaches about 99 %
    assert abs(result["int8"] - result["qat"]) <= 0.01  # the int8 model computes what QAT trained
    assert result["int8_bytes"] <= 0.3 * result["float_bytes"]
