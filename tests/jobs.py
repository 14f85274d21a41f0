"""Background test jobs: Python subprocesses started early in the session, beside the in-process tests, and waited
for by the tests that read their results, which run last.

A fresh process spends most of its time in one Python thread (importing TensorFlow, tracing), so on 2 cores it runs
almost for free beside the in-process tests; run in a test, it would add its whole time to the suite's (issue 18).

* :class:`Jobs`: named processes that a test orchestrates (tests/reliability/processes.py: multi-worker training
  that the fault test kills mid-epoch, exports loaded without ste, determinism).
* :class:`BackgroundJob`: one command whose outcome some tests check (the benchmark smoke run, ``mkdocs build``,
  mypy and ruff, the command line in a fresh process). ``@JOB.needed`` marks a test; tests/conftest.py queues every
  marked test's job once the session's tests are collected and moves those tests to the end. The queued jobs run
  one at a time, on one core.
* :func:`offload`: the tests of the :data:`OFFLOADED` modules, run by one pytest subprocess in that queue, and
  reported in the session by :class:`Offloaded` proxies under their own ids.

Output goes to files, never a pipe that could fill up, and every process has a deadline counted from its start.
"""

from __future__ import annotations

import functools
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

TIMEOUT = 480.0  # a safety net, not a speed check: every job runs slower while the others run


class Jobs:
    """Subprocesses with output in log files (never a pipe that could fill up) and a deadline counted from start."""

    def __init__(self, *program: str | Path) -> None:
        self.program = [str(part) for part in program]  # what follows ``python``: a script, or ``-m`` and a module
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}  # stdout
        self.errors: dict[str, Path] = {}  # stderr
        self.deadlines: dict[str, float] = {}

    def start(
        self,
        name: str,
        args: list[str],
        env: dict[str, str],
        cwd: Path,
        timeout: float = TIMEOUT,
        logs: Path | None = None,
    ) -> None:
        """``python PROGRAM ARGS`` in ``cwd``; its stdout and stderr go to ``name.log`` and ``name.err`` in ``logs``
        (default ``cwd``)."""
        self.logs[name], self.errors[name] = ((logs or cwd) / f"{name}.{kind}" for kind in ("log", "err"))
        with open(self.logs[name], "wb") as out, open(self.errors[name], "wb") as err:
            self.procs[name] = subprocess.Popen(
                [sys.executable, *self.program, *args],
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        self.deadlines[name] = time.monotonic() + timeout

    def output(self, name: str) -> str:
        """The end of job ``name``'s stdout and stderr (for failure messages)."""
        out, err = (path.read_text(errors="replace")[-3000:] for path in (self.logs[name], self.errors[name]))
        return f"stdout:\n{out}\nstderr:\n{err}"

    def wait(self, name: str) -> None:
        proc = self.procs[name]
        try:
            proc.wait(timeout=max(1.0, self.deadlines[name] - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail(f"subprocess {name} did not finish within its time limit")
        assert proc.returncode == 0, f"subprocess {name} failed:\n{self.output(name)}"

    def wait_for_file(self, name: str, path: Path) -> None:
        """Until ``path`` exists (written by job ``name``, which goes on running), within the job's time limit."""
        proc = self.procs[name]
        while not path.exists():
            if proc.poll() is not None and not path.exists():
                pytest.fail(
                    f"subprocess {name} ended (code {proc.returncode}) before writing {path.name}:\n{self.output(name)}"
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


@dataclass(frozen=True)
class Finished:
    """What a background job's process did."""

    returncode: int
    stdout: str
    stderr: str
    directory: Path  # where it ran (files it wrote are there)

    def numbers(self, pattern: str) -> list[float]:
        """The groups of ``pattern``'s first match in stdout, as numbers (the test fails if nothing matches)."""
        found = re.search(pattern, self.stdout)
        assert found, f"{pattern!r} not in the output:\n{self.stdout[-3000:]}"
        return [float(group) for group in found.groups()]


#: ``command(directory) -> (python arguments, environment, working directory)``, called when the job is queued (in
#: the main thread); it may write the files the process reads into ``directory`` (a temporary directory of its own).
Command = Callable[[Path], tuple[list[str], dict[str, str], Path]]
Test = TypeVar("Test", bound=Callable[..., Any])
STARTED: list[BackgroundJob] = []  # stopped at the end of the session (tests/conftest.py)
_QUEUE: queue.Queue[BackgroundJob] = queue.Queue()
_RUNNER: list[threading.Thread] = []


def _run_queue() -> None:
    """One background process at a time, in the order queued: the core the in-process tests leave idle, not both
    (eight processes started together slowed the tests beside them more than they saved)."""
    while True:
        job = _QUEUE.get()
        try:
            job.run()
        except Exception as error:  # the job's test reports it; the jobs after it still run
            job.error = f"{type(error).__name__}: {error}"


class BackgroundJob:
    """One ``python ...`` command that tests check the outcome of, run beside the suite (see the module's text)."""

    def __init__(self, name: str, command: Command, timeout: float = 900.0) -> None:
        self.name, self.command, self.timeout = name, command, timeout
        self.jobs = Jobs()
        self.directory: Path | None = None
        self.launch: tuple[list[str], dict[str, str], Path] | None = None
        self.done = threading.Event()
        self.timed_out = self.stopped = False
        self.error = ""
        self.queued = self.began = self.ended = 0.0  # time.monotonic() when queued, started, finished

    def needed(self, test: Test) -> Test:
        """Mark ``test`` as one that reads this job (``JOB.wait()``): the job starts when the test is collected."""
        return self.background_mark()(test)  # type: ignore[no-any-return]

    def background_mark(self) -> pytest.MarkDecorator:
        """The mark itself, for one case of a parametrized test (``pytest.param(..., marks=JOB.background_mark())``)."""
        return pytest.mark.background_job(self)

    def start(self) -> None:
        """Queue the job (once); the queue's thread runs it when the jobs queued before it are done."""
        if self.directory is not None:
            return
        self.directory = Path(tempfile.mkdtemp(prefix=f"ste-{self.name}-"))
        self.launch = self.command(self.directory)
        self.queued = time.monotonic()
        STARTED.append(self)
        if not _RUNNER:
            _RUNNER.append(threading.Thread(target=_run_queue, name="background-jobs", daemon=True))
            _RUNNER[0].start()
        _QUEUE.put(self)

    def run(self) -> None:
        """The process, start to end, within its time limit (in the queue's thread)."""
        assert self.launch is not None and self.directory is not None
        try:
            if not self.stopped:
                self.began = time.monotonic()
                args, env, cwd = self.launch
                self.jobs.start(self.name, args, env, cwd, self.timeout, logs=self.directory)
                try:
                    self.jobs.procs[self.name].wait(timeout=self.timeout)
                except subprocess.TimeoutExpired:
                    self.timed_out = True
                    self.jobs.kill(self.name)
                self.ended = time.monotonic()
        finally:
            self.done.set()

    def wait(self) -> Finished:
        """The finished process (queued now if the session did not queue it, e.g. a test called by hand)."""
        self.start()
        assert self.directory is not None
        self.done.wait()
        if self.error or self.name not in self.jobs.procs:
            pytest.fail(f"background job {self.name} did not start: {self.error or 'stopped'}")
        if self.timed_out:
            pytest.fail(
                f"background job {self.name} did not finish within {self.timeout} s:\n{self.jobs.output(self.name)}"
            )
        read = lambda path: path.read_text(errors="replace")  # noqa: E731
        returncode = self.jobs.procs[self.name].returncode
        return Finished(returncode, read(self.jobs.logs[self.name]), read(self.jobs.errors[self.name]), self.directory)

    def succeeded(self) -> Finished:
        """:meth:`wait`, and the test fails unless the process exited 0 (with the end of its stderr)."""
        done = self.wait()
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    def timing(self) -> str:
        """When the job started and ended, in seconds after the first job was queued (for the terminal summary)."""
        if not self.ended:
            return f"{self.name}: did not {'finish' if self.began else 'start'}"
        began, ended = (moment - min(job.queued for job in STARTED) for moment in (self.began, self.ended))
        return f"{self.name}: {ended - began:.0f} s, from {began:.0f} to {ended:.0f} s"

    def stop(self) -> None:
        self.stopped = True  # not started any more if still queued
        self.jobs.kill_all()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)


#: The heaviest modules without background jobs of their own (~185 s of the suite's thread on 2 cores): their tests run
#: in one pytest subprocess in the queue, beside the rest, whenever the session has other tests too (issue 18).
OFFLOADED = (
    "tests/reliability/test_distributed.py",
    "tests/reliability/test_properties.py",
    "tests/reliability/test_vectorized.py",
)
IN_ONE_PROCESS = "STE_TESTS_IN_ONE_PROCESS"  # set (to anything): nothing is offloaded (the subprocess sets it)
# where a session writes its tests' reports as JSON (set for the subprocess, whose reports the proxies read)
OUTCOMES = "STE_TESTS_OUTCOMES"


class Offloaded(pytest.Item):
    """A test that a pytest subprocess ran: reports that run's outcome (failure text, skip or xfail reason) under the
    test's own id."""

    def __init__(self, *, job: BackgroundJob, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job = job

    def runtest(self) -> None:
        done = self.job.wait()
        outcomes = _read_outcomes(done.directory / "outcomes.json")
        if outcomes is None:
            pytest.fail(
                f"the pytest subprocess wrote no outcomes (exit code {done.returncode}):\n{done.stderr[-3000:]}"
            )
        reports = outcomes.get(self.nodeid)
        if not reports:
            pytest.fail(f"the pytest subprocess did not run this test:\n{done.stdout[-3000:]}")
        for report in reports:
            if report["outcome"] == "failed":
                pytest.fail(f"(in a pytest subprocess, {report['when']})\n{report['text']}", pytrace=False)
        for report in reports:
            if report["outcome"] == "skipped":
                if report["xfail"] is not None:
                    pytest.xfail(report["xfail"])
                pytest.skip(report["text"].removeprefix("Skipped: "))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.name


@functools.cache
def _read_outcomes(path: Path) -> dict[str, list[dict[str, Any]]] | None:
    """The finished subprocess's reports by test id (read once for all its proxies), or None if it wrote none."""
    return json.loads(path.read_text()) if path.exists() else None


def offload(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` with those of the :data:`OFFLOADED` modules replaced by :class:`Offloaded` proxies of one queued
    pytest subprocess that runs them (unless ``STE_TESTS_IN_ONE_PROCESS`` is set, or every item is offloaded)."""
    root = Path(__file__).resolve().parents[1]
    paths = {root / name for name in OFFLOADED}
    moved = [item for item in items if Path(str(item.fspath)).resolve() in paths]
    if os.environ.get(IN_ONE_PROCESS) or not moved or len(moved) == len(items):
        return items

    def command(directory: Path) -> tuple[list[str], dict[str, str], Path]:
        (directory / "tests.txt").write_text("".join(f"{item.nodeid}\n" for item in moved))
        env = {**os.environ, IN_ONE_PROCESS: "1", OUTCOMES: str(directory / "outcomes.json")}
        return ["-m", "pytest", "-p", "no:cacheprovider", f"@{directory / 'tests.txt'}"], env, root

    job = BackgroundJob("pytest-offloaded", command, timeout=900.0)
    proxies = {}
    for item in moved:
        proxy = Offloaded.from_parent(item.parent, name=item.name, job=job)
        proxy.own_markers = list(item.own_markers)
        proxy.add_marker(job.background_mark())  # queued with the other jobs, and run after the other tests
        proxies[item] = proxy
    return [proxies.get(item, item) for item in items]


class Outcomes:
    """Every test's reports, by test id, written as JSON to ``path`` when the session ends (a plugin: the
    subprocess that :func:`offload` starts registers it)."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.reports: dict[str, list[dict[str, Any]]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.outcome == "passed" and report.when != "call":
            return
        text = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr or "")
        entry = {
            "when": report.when,
            "outcome": report.outcome,
            "text": text,
            "xfail": getattr(report, "wasxfail", None),
        }
        self.reports.setdefault(report.nodeid, []).append(entry)

    def pytest_sessionfinish(self) -> None:
        self.path.write_text(json.dumps(self.reports))


def in_fresh_process(function: Callable[..., None], *args: Any, timeout: float = 600.0) -> BackgroundJob:
    """A background job that calls ``function(directory, *args)`` in a fresh interpreter (``function`` a module-level
    function of an importable test module; ``args`` JSON values): the test's body, run beside the suite, that fails
    the test when it raises (its traceback is the job's stderr)."""
    import inspect

    root = Path(__file__).resolve().parents[1]
    module = ".".join(Path(inspect.getfile(function)).resolve().relative_to(root).with_suffix("").parts)
    name = function.__qualname__

    def command(directory: Path) -> tuple[list[str], dict[str, str], Path]:
        call = f"{name}(pathlib.Path({str(directory)!r}), *json.loads({json.dumps(args)!r}))"
        code = f"import importlib, json, pathlib\nimportlib.import_module({module!r}).{call}\n"
        env = {**os.environ, "PYTHONPATH": str(root), "TF_CPP_MIN_LOG_LEVEL": "3"}
        return ["-c", code], env, directory

    return BackgroundJob(f"{name.strip('_')}-{abs(hash(json.dumps(args))) % 10**6}", command, timeout)
