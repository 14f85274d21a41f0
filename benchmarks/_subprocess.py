"""Run a measurement in a fresh process and read back the one ``RESULT {json}`` line it prints."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any


def result_of(argv: Sequence[str], *, env: Mapping[str, str], timeout: float, cwd: str | None = None) -> dict[str, Any]:
    """``argv``'s last ``RESULT `` line, parsed as JSON (the process fails the benchmark if it exits non-zero)."""
    done = subprocess.run(
        list(argv), capture_output=True, text=True, env=dict(env), cwd=cwd, check=True, timeout=timeout
    )
    return parse_result(done.stdout)


def parse_result(stdout: str) -> dict[str, Any]:
    """The last ``RESULT {json}`` line of a process's output, parsed."""
    line = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")][-1]
    result: dict[str, Any] = json.loads(line[len("RESULT ") :])
    return result
