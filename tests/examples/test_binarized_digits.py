"""Smoke test of the main example (few epochs); the README's main command runs it in full."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "binarized_digits.py"


def test_readme_main_command_runs_the_binarized_example():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- main-command -->", 1)[1]
    command = re.search(r"```bash\n(.+?)\n```", block, re.S).group(1)
    assert command.rstrip().endswith("python examples/binarized_digits.py")


def test_example_trains_both_networks_and_prints_the_summary(capsys):
    spec = importlib.util.spec_from_file_location("binarized_digits", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.main(["--epochs", "3", "--verbose", "0"])
    out = capsys.readouterr().out
    assert result["binarized"] > 0.8 and result["float"] > 0.8  # 3 epochs; the full run reaches about 98 %
    assert "test accuracy  binarized:" in out and "compression ratio" in out
    assert "values [-1, 1]" in out
