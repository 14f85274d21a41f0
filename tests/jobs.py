"""Background test jobs: Python subprocesses started early in the session, beside the in-process tests, and waited
for by the tests that read their results, which the conftest files run last.

Used by tests/reliability/processes.py (multi-worker training, exports, determinism) and by
tests/benchmarks/test_smoke.py (the benchmark suite's smoke run). Output goes to log files, never a pipe that could
fill up, and every job has a deadline counted from its start.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

TIMEOUT = 480.0  # a safety net, not a speed check: every job runs slower while the others run


class Jobs:
    """Subprocesses with output in log files (never a pipe that could fill up) and a deadline counted from start."""

    def __init__(self, *program: str | Path) -> None:
        self.program = [str(part) for part in program]  # what follows ``python``: a script, or ``-m`` and a module
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}
        self.deadlines: dict[str, float] = {}

    def start(self, name: str, args: list[str], env: dict[str, str], cwd: Path, timeout: float = TIMEOUT) -> None:
        self.logs[name] = cwd / f"{name}.log"
        with open(self.logs[name], "wb") as log:
            self.procs[name] = subprocess.Popen(
                [sys.executable, *self.program, *args], env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT
            )
        self.deadlines[name] = time.monotonic() + timeout

    def wait(self, name: str) -> None:
        proc = self.procs[name]
        try:
            proc.wait(timeout=max(1.0, self.deadlines[name] - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail(f"subprocess {name} did not finish within its time limit")
        output = self.logs[name].read_text(errors="replace")
        assert proc.returncode == 0, f"subprocess {name} failed:\n{output[-4000:]}"

    def wait_for_file(self, name: str, path: Path) -> None:
        """Until ``path`` exists (written by job ``name``, which goes on running), within the job's time limit."""
        proc = self.procs[name]
        while not path.exists():
            if proc.poll() is not None and not path.exists():
                output = self.logs[name].read_text(errors="replace")
                pytest.fail(
                    f"subprocess {name} ended (code {proc.returncode}) before writing {path.name}:\n{output[-4000:]}"
                )
            if time.monotonic() > self.deadlines[name]:
                self.kill(name)
                pytest.fail(f"subprocess {name} did not write {path.name} within its time limit")
            time.sleep(0.2)

    def kill(self, name: str) -> int | None:
        """Kill job ``name`` by its process id (if still running); its exit code."""
        proc = self.procs[name]
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        return proc.wait(timeout=30)

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
