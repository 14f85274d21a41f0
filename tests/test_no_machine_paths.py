"""No absolute path of a developer's machine in the project: code, tests, docs, examples and benchmarks run anywhere.

A peer environment (larq's, snnTorch's, TFMOT's venv) comes from an environment variable or a command-line option
with no default; without one, the test or benchmark that needs it skips and names the variable.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("ste", "tests", "docs", "examples", "benchmarks", ".ci", ".github", ".dev")
FILES = ("README.md", "CHANGELOG.md", "pyproject.toml", "mkdocs.yml")
TEXT = {".py", ".md", ".toml", ".yml", ".yaml", ".cfg", ".txt", ".json", ".sh", ".ini", ""}

# A home, a user folder, a scratch or a machine's own folder at the start of a path (spelled in pieces so that this
# file does not match itself). /usr/share/ is left alone: Debian's documented dataset folder.
_ROOTS = "|".join(["work", "home", "root", "Users", "tmp", "opt", "mnt", "srv", "scratch", "var/folders", "private"])
MACHINE_PATH = re.compile(r"(?<![\w.~$}/-])/(?:" + _ROOTS + r")/[\w.-]")
VENV_DEFAULT = re.compile(r"environ\.get\(\s*['\"]\w*VENV\w*['\"]\s*,\s*['\"][^'\"]+['\"]")


def _project_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *FOLDERS, *FILES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [ROOT / name for name in listed if Path(name).suffix in TEXT and (ROOT / name).is_file()]


def _machine_paths(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if MACHINE_PATH.search(line) or VENV_DEFAULT.search(line)]


def test_the_check_finds_machine_paths_and_venv_defaults() -> None:
    home = "/" + "home/someone/data.npz"
    venv = 'os.environ.get("STE_X_VE' + 'NV", "/' + 'opt/x")'
    found = _machine_paths(f"load('{home}')\nVENV = {venv}\nsee /usr/share/doc and $HOME/x and ~/venvs and a/tmp/b\n")
    assert found == [f"load('{home}')", f"VENV = {venv}"]
    assert _machine_paths("python -m venv snntorch-venv; STE_SNNTORCH_VENV=$PWD/snntorch-venv pytest") == []


def test_no_file_of_the_project_holds_a_machine_path() -> None:
    files = _project_files()
    if not files:
        pytest.skip("not a git checkout")
    found = [
        f"{path.relative_to(ROOT)}: {line}"
        for path in files
        for line in _machine_paths(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert found == [], "a path of one machine; use a relative path, an environment variable or an option"
