"""Rewrite the top-level spellings of names that left ``ste``'s top level (``ste.errors.ParameterError``) to their new
path (``ste.errors.ParameterError``), in code and documentation.

Usage (from the repository root): ``python .dev/moved_names.py`` — reads ``MOVED_NAMES`` from ``ste/_deprecated.py``.
A line holding ``old path`` (a test of the old spelling itself) is left alone, and so is ``CHANGELOG.md``.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from move_modules import tracked_files  # this folder is on sys.path when the script runs

ROOT = Path(__file__).resolve().parent.parent


def read_names() -> dict[str, str]:
    for node in ast.parse((ROOT / "ste" / "_deprecated.py").read_text()).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "MOVED_NAMES":
            assert node.value is not None
            names = ast.literal_eval(node.value)
            assert isinstance(names, dict)
            return names
    raise SystemExit("no MOVED_NAMES in ste/_deprecated.py")


def main() -> int:
    names = read_names()
    pattern = re.compile(rf"(?<![\w.])ste\.({'|'.join(map(re.escape, sorted(names, key=len, reverse=True)))})(?!\w)")
    for path in tracked_files():  # the project's text files, CHANGELOG.md and ste/_deprecated.py left out
        name = path.relative_to(ROOT)
        text = path.read_text()
        lines = [
            line if "old path" in line else pattern.sub(lambda m: names[m.group(1)].replace(":", "."), line)
            for line in text.splitlines(keepends=True)
        ]
        if "".join(lines) != text:
            path.write_text("".join(lines))
            print(f"rewrote {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
