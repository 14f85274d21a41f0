"""Smoke test of examples/qat_digits.py (few epochs), run as a user runs it: float, QAT and int8 TFLite accuracies
and file sizes."""

from __future__ import annotations

from tests.helpers import run_example


def test_example_trains_quantizes_and_converts(tmp_path):
    done = run_example("qat_digits", tmp_path, "--epochs", "4", "--qat-epochs", "1")
    float_accuracy, qat, int8 = done.numbers(
        r"test accuracy  float: ([\d.]+)%   QAT: ([\d.]+)%   int8 TFLite: ([\d.]+)%"
    )
    float_bytes, int8_bytes = done.numbers(r"TFLite file    float: (\d+) bytes   int8: (\d+) bytes")
    assert float_accuracy > 80 and qat > 80  # 4 + 1 epochs; the full run reaches about 99 %
    assert abs(int8 - qat) <= 1.0  # points: the int8 model computes what QAT trained
    assert int8_bytes <= 0.3 * float_bytes
