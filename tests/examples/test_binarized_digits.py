"""Smoke test of the main example (few epochs); the README's main command runs it in full."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import run_example

ROOT = Path(__file__).resolve().parents[2]


def test_readme_main_command_runs_the_binarized_example():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- main-command -->", 1)[1]
    command = re.search(r"```bash\n(.+?)\n```", block, re.S).group(1)
    assert command.rstrip().endswith("python examples/binarized_digits.py")


def test_example_trains_both_networks_and_prints_the_summary(tmp_path):
    done = run_example("binarized_digits", tmp_path, "--epochs", "3", "--verbose", "0")
    binarized, float_accuracy = done.numbers(r"test accuracy  binarized: ([\d.]+)%   float: ([\d.]+)%")
    assert binarized > 80 and float_accuracy > 80  # 3 epochs; the full run reaches about 98 %
    assert "compression ratio" in done.stdout
    assert "values [-1, 1]" in done.stdout
