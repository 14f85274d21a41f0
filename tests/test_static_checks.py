"""mypy --strict and ruff on the package, run by pytest so that CI runs them (config in pyproject.toml).

Each tool runs as a background job (tests/jobs.py), beside the rest of the suite."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.jobs import BackgroundJob

ROOT = Path(__file__).resolve().parents[1]


def _tool(*args: str) -> BackgroundJob:
    return BackgroundJob(args[0] + "-" + args[1], lambda directory: (["-m", *args], dict(os.environ), ROOT), 600)


MYPY = _tool("mypy", "ste", "tests/type_checks/check_signatures.py")
RUFF_CHECK = _tool("ruff", "check", ".")
RUFF_FORMAT = _tool("ruff", "format", "--check", "ste")


@MYPY.needed
def test_mypy_strict_on_the_package_and_the_signature_checks():
    pytest.importorskip("mypy")
    done = MYPY.wait()
    assert done.returncode == 0, done.stdout + done.stderr


@RUFF_CHECK.needed
@RUFF_FORMAT.needed
def test_ruff_check_and_format():
    pytest.importorskip("ruff")
    for job in (RUFF_CHECK, RUFF_FORMAT):
        done = job.wait()
        assert done.returncode == 0, done.stdout + done.stderr
