"""mypy --strict and ruff on the package, run by pytest so that CI runs them (config in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_mypy_strict_on_the_package_and_the_signature_checks():
    pytest.importorskip("mypy")
    done = _run("mypy", "ste", "tests/type_checks/check_signatures.py")
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_check_and_format():
    pytest.importorskip("ruff")
    checked = _run("ruff", "check", ".")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    formatted = _run("ruff", "format", "--check", "ste")
    assert formatted.returncode == 0, formatted.stdout + formatted.stderr
