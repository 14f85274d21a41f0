"""Reliability tests: start the subprocess jobs early and run the tests that wait for them last."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_WANTS_PROCESSES = pytest.StashKey[bool]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    late = [
        item for item in items if item.path.name == "test_processes.py" and item.path.parent == Path(__file__).parent
    ]
    if late:
        ids = {id(item) for item in late}
        items[:] = [item for item in items if id(item) not in ids] + late
    config.stash[_WANTS_PROCESSES] = bool(late)


@pytest.fixture(scope="session")
def process_jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from .processes import start_jobs

    yield from start_jobs(tmp_path_factory)


@pytest.fixture(scope="session", autouse=True)
def _start_processes_early(request: pytest.FixtureRequest) -> None:
    """The first reliability test starts the subprocesses when test_processes.py was collected."""
    if request.config.stash.get(_WANTS_PROCESSES, False):
        request.getfixturevalue("process_jobs")
