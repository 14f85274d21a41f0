"""Test-wide set-up: a pytest-xdist worker per core, quiet TensorFlow, four logical CPU devices (for distribution
tests), hypothesis profiles."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf
from hypothesis import HealthCheck, settings

# Logical devices must be configured before TensorFlow runs its first op, so it happens here, once per process.
_cpus = tf.config.list_physical_devices("CPU")
try:
    tf.config.set_logical_device_configuration(
        _cpus[0],
        [tf.config.LogicalDeviceConfiguration() for _ in range(4)],  # 2 and 4 replicas on one host
    )
except RuntimeError:  # already initialised (e.g. a plugin ran an op first)
    pass


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Where pytest-xdist is installed: ``-n auto`` unless the command line gives ``-n``, and ``--dist loadfile``
    unless it gives ``--dist``: the tests of one file run in one worker, so a module-scoped fixture (a documentation
    build, the multi-worker processes) runs once. ``-n 0`` or ``-p no:xdist`` runs every test in this process (for
    debugging: ``--pdb``, ``-s``). A hook rather than ``addopts``, which would break ``-p no:xdist`` and a run without
    pytest-xdist installed. (Not ``--dist loadgroup``: with pytest 9.2, pytest-xdist 3.8 ignores ``xdist_group``
    marks without a word, pytest-dev/pytest-xdist#1386.)"""
    if not hasattr(config.option, "numprocesses") or hasattr(config, "workerinput"):
        return  # no pytest-xdist, or one of its workers
    if config.option.numprocesses is None:
        config.option.numprocesses = "auto"
    if config.option.dist == "no":
        config.option.dist = "loadfile"


settings.register_profile(
    "ci", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.register_profile("dev", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))  # HYPOTHESIS_PROFILE=dev for a longer run


# Tests whose results depend on the CPU kernels TensorFlow has (oneDNN on or off: NCHW convolutions, dilated
# transposed convolutions, the BFC allocator's statistics): .ci/run runs them a second time with oneDNN flipped.
_CPU_KERNEL_TESTS = ("layers", "benchmarks/test_smoke.py", "test_serialization.py", "test_bit_masks.py")
_TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        where = Path(str(item.fspath)).resolve()
        if any(where.is_relative_to(_TESTS / part) for part in _CPU_KERNEL_TESTS):
            item.add_marker(pytest.mark.cpu_kernels)
