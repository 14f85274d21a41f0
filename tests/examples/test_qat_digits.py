"""Smoke test of examples/qat_digits.py (few epochs), run as a user runs it: float, QAT and int8 TFLite accuracies
and file sizes."""

from __future__ import annotations

import re

from tests.helpers import example_job

EXAMPLE_RUN = example_job("qat_digits", "--epochs", "4", "--qat-epochs", "1")


@EXAMPLE_RUN.needed
def test_example_trains_quantizes_and_converts():
    done = EXAMPLE_RUN.wait()
    assert done.returncode == 0, done.stderr[-3000:]
    accuracy = re.search(r"test accuracy  float: ([\d.]+)%   QAT: ([\d.]+)%   int8 TFLite: ([\d.]+)%", done.stdout)
    size = re.search(r"TFLite file    float: (\d+) bytes   int8: (\d+) bytes", done.stdout)
    assert accuracy and size, done.stdout
    float_accuracy, qat, int8 = (float(accuracy[i]) for i in (1, 2, 3))
    assert float_accuracy > 80 and qat > 80  # 4 + 1 epochs; the full run reaches about 99 %
    assert abs(int8 - qat) <= 1.0  # points: the int8 model computes what QAT trained
    assert int(size[2]) <= 0.3 * int(size[1])
