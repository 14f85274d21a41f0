"""Test-wide set-up: quiet TensorFlow, four logical CPU devices (for distribution tests), hypothesis profiles."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf
from hypothesis import HealthCheck, settings

# Logical devices must be configured before TensorFlow runs its first op, so it happens here, once per session.
_cpus = tf.config.list_physical_devices("CPU")
try:
    tf.config.set_logical_device_configuration(
        _cpus[0],
        [tf.config.LogicalDeviceConfiguration() for _ in range(4)],  # 2 and 4 replicas on one host
    )
except RuntimeError:  # already initialised (e.g. a plugin ran an op first)
    pass

settings.register_profile(
    "ci", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.register_profile("dev", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))  # HYPOTHESIS_PROFILE=dev for a longer run


# Tests whose results depend on the CPU kernels TensorFlow has (oneDNN on or off: NCHW convolutions, dilated
# transposed convolutions, the BFC allocator's statistics): .ci/run runs them a second time with oneDNN flipped.
_CPU_KERNEL_TESTS = ("layers", "benchmarks/test_smoke.py", "test_serialization.py", "test_bit_masks.py")
_TESTS = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    from tests.jobs import OUTCOMES, Outcomes

    if os.environ.get(OUTCOMES):  # a pytest subprocess of tests/jobs.py's offload: its outcomes, for the proxies
        config.pluginmanager.register(Outcomes(os.environ[OUTCOMES]), "ste-outcomes")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        where = Path(str(item.fspath)).resolve()
        if any(where.is_relative_to(_TESTS / part) for part in _CPU_KERNEL_TESTS):
            item.add_marker(pytest.mark.cpu_kernels)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Replace the offloaded modules' tests by proxies of one pytest subprocess (tests/jobs.py's ``offload``), start
    the background job of every collected test marked ``@JOB.needed`` (those proxies too), and run those tests last,
    so that the jobs run beside the rest of the suite."""
    from tests.jobs import offload

    if session.config.option.collectonly:
        return
    session.items[:] = offload(session.items)
    readers = [item for item in session.items if item.get_closest_marker("background_job")]
    for item in readers:
        for marker in item.iter_markers("background_job"):
            marker.args[0].start()
    session.items[:] = [item for item in session.items if item not in readers] + readers


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How long each background job ran, and when: the queue runs one at a time, so its total bounds the suite's."""
    from tests.jobs import STARTED

    if STARTED:
        terminalreporter.section("background jobs (seconds after the first was queued)")
        for job in STARTED:
            terminalreporter.write_line(job.timing())


def pytest_sessionfinish(session: pytest.Session) -> None:
    from tests.jobs import STARTED

    for job in STARTED:
        job.stop()
