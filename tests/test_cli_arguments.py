"""Bad command-line arguments are one-line errors with the usage status (docs/tools.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run(
        [sys.executable, "-m", "ste", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize(
    "args",
    [
        ("check", "atan", "--points", "99999999999999999999"),
        ("check", "atan", "--points", "3000000000"),
        ("check", "atan", "--points", "1"),
        ("check", "atan", "--points", "-5"),
        ("check", "atan", "--points", "abc"),
        ("check", "atan", "--range", "0", "inf"),
        ("check", "atan", "--range", "1", "1"),
        (
            "check",
            "atan(alpha=__import__('os'))",
        ),
        (
            "check",
            "no_such_surrogate",
        ),
        ("plot", "atan", "--points", "99999999999999999999", "-o", "x.png"),
        (
            "show",
            "",
        ),
    ],
)
def test_cli_bad_arguments_are_one_line_errors(args: tuple[str, ...]) -> None:
    result = _cli(*args)
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert len([line for line in result.stderr.strip().splitlines() if line.strip()]) <= 3, result.stderr[-2000:]
