"""Smoke test of examples/qat_digits.py (few epochs): float, QAT and int8 TFLite accuracies and file sizes."""

from __future__ import annotations

from tests.helpers import load_example


def test_example_trains_quantizes_and_converts(capsys):
    result = load_example("qat_digits").main(["--epochs", "4", "--qat-epochs", "1"])
    out = capsys.readouterr().out
    assert "int8 TFLite:" in out and "TFLite file" in out
    assert result["float"] > 0.8 and result["qat"] > 0.8  # 4 + 1 epochs; the full run reaches about 99 %
    assert abs(result["int8"] - result["qat"]) <= 0.01  # the int8 model computes what QAT trained
    assert result["int8_bytes"] <= 0.3 * result["float_bytes"]
