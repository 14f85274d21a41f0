"""Move ste's modules and rewrite every reference to their old paths.

Usage (from the repository root)::

    python .dev/move_modules.py            # rewrite references to every old path in MODULE_MOVES
    python .dev/move_modules.py --move     # first `git mv` each old file that still exists to its new place
    python .dev/move_modules.py --check    # list the references to old paths that are left, exit 1 if any

The moves are read from ``MODULE_MOVES`` in ``ste/_deprecated.py`` (old dotted module → new dotted module), the same
table with which ``import ste`` keeps old module paths importable (pickles name the module of what they hold). To
move a module: add its line there, then run with ``--move``. A branch written against the old paths is fixed by
running the script with no option after merging it.

What is rewritten:

* relative imports in ``ste/`` (``from .._dsl import x``, ``from . import _dsl``), resolved from where the file was
  and spelled again from where it is, so a moved file's own imports stay right;
* absolute spellings anywhere (``from ste._dsl import``, ``import ste._dsl``, ``"ste._dsl.rebuild_op"`` in a
  ``mock.patch`` target or a docstring, ``from ste import _dsl``);
* file paths (``ste/_dsl.py``) in code and documentation.

A line holding ``old path`` (a test of the old spelling itself) is left alone, and so are ``CHANGELOG.md`` and
``ste/_deprecated.py``. Run ``ruff check --fix`` and ``ruff format`` afterwards: imports may need sorting again.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "ste" / "_deprecated.py"
SKIP = {"CHANGELOG.md", "ste/_deprecated.py", ".dev/move_modules.py"}
SUFFIXES = {".py", ".md", ".toml", ".yml", ".yaml", ".cfg", ".txt", ".ini", ".pyi"}
KEEP = "old path"


def read_moves() -> dict[str, str]:
    tree = ast.parse(TABLE.read_text())
    for node in tree.body:
        target = (
            node.target
            if isinstance(node, ast.AnnAssign)
            else (node.targets[0] if isinstance(node, ast.Assign) else None)
        )
        if isinstance(target, ast.Name) and target.id == "MODULE_MOVES" and node.value is not None:
            moves = ast.literal_eval(node.value)
            assert isinstance(moves, dict)
            return moves
    raise SystemExit(f"no MODULE_MOVES in {TABLE}")


def module_file(module: str, package: bool = False) -> Path:
    parts = module.split(".")
    return ROOT.joinpath(*parts, "__init__.py") if package else ROOT.joinpath(*parts).with_suffix(".py")


def module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def renamed(module: str, moves: dict[str, str]) -> str:
    """The module's current name: a moved module or anything inside a moved package follows the move."""
    for _ in range(len(moves) + 1):  # chains of moves (a → b, b → c)
        for old, new in moves.items():
            if module == old or module.startswith(old + "."):
                module = new + module[len(old) :]
                break
        else:
            return module
    raise SystemExit(f"MODULE_MOVES has a cycle through {module}")


def git_mv(moves: dict[str, str]) -> dict[str, str]:
    """Move each old file that still exists; the moves made (new module → old module)."""
    made = {}
    for old, new in moves.items():
        for package in (False, True):
            source, target = module_file(old, package), module_file(new, package)
            if package:
                source, target = source.parent, target.parent
            if source.exists() and not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                subprocess.run(["git", "mv", str(source), str(target)], cwd=ROOT, check=True)
                print(f"moved {source.relative_to(ROOT)} -> {target.relative_to(ROOT)}")
                made[new] = old
    for new in moves.values():  # a new private package gets an __init__ if the move made its folder
        folder = module_file(new).parent
        init = folder / "__init__.py"
        if folder != ROOT / "ste" and not init.exists() and folder.is_dir():
            init.write_text(f'"""{new.rsplit(".", 1)[0]}."""\n')
            subprocess.run(["git", "add", str(init)], cwd=ROOT, check=True)
    return made


def original(module: str, made: dict[str, str]) -> str:
    """Where a module was before this run's moves (itself, or inside a package that moved)."""
    for new, old in made.items():
        if module == new or module.startswith(new + "."):
            return old + module[len(new) :]
    return module


def relative(from_package: str, target: str) -> str:
    """``target`` spelled as a relative import from inside ``from_package``: dots, then the rest."""
    here, there = from_package.split("."), target.split(".")
    common = 0
    while common < min(len(here), len(there)) and here[common] == there[common]:
        common += 1
    dots = "." * (len(here) - common + 1)
    return dots + ".".join(there[common:])


def split_relative(spelled: str) -> tuple[str, str]:
    dots = len(spelled) - len(spelled.lstrip("."))
    return spelled[:dots], spelled[dots:]


def rewrite_relative(path: Path, old_module: str, moves: dict[str, str], exists: set[str]) -> str:
    """The source of a module under ste/ with its relative imports resolved at its old place, spelled at its new."""
    source = path.read_text()
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    is_package = path.name == "__init__.py"
    old_package = old_module if is_package else old_module.rsplit(".", 1)[0]
    new_module = module_of(path)
    new_package = new_module if is_package else new_module.rsplit(".", 1)[0]
    edits: list[tuple[int, int, int, int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or not node.level:
            continue
        base = old_package.split(".")[: len(old_package.split(".")) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
        indent = lines[node.lineno - 1][: node.col_offset]
        segment = ast.get_source_segment(source, node)
        assert segment is not None
        if any(f"{target}.{a.name}" in moves for a in node.names):
            # `from . import _a, b`: each name may be a module that moved, each to its own parent
            groups: dict[str, list[str]] = {}
            for alias in node.names:
                full = renamed(f"{target}.{alias.name}", moves)
                if full in exists or f"{target}.{alias.name}" in moves:
                    parent, name = full.rsplit(".", 1)
                else:
                    parent, name = renamed(target, moves), alias.name
                groups.setdefault(parent, []).append(name + (f" as {alias.asname}" if alias.asname else ""))
            statements = []
            for parent, names in groups.items():
                spelled = relative(new_package, parent)
                dots, rest = split_relative(spelled)
                statements.append(
                    f"from {dots}{rest} import {', '.join(names)}" if rest else f"from {dots} import {', '.join(names)}"
                )
            text = ("\n" + indent).join(statements)
        else:
            spelled = relative(new_package, renamed(target, moves))
            keyword = segment.index(" import ")
            text = f"from {spelled}" + segment[keyword:]
        if text != segment:
            edits.append((node.lineno, node.col_offset, node.end_lineno or node.lineno, node.end_col_offset or 0, text))
    for line, col, end_line, end_col, text in sorted(edits, reverse=True):
        start = sum(len(x) for x in lines[: line - 1]) + col
        end = sum(len(x) for x in lines[: end_line - 1]) + end_col
        source = source[:start] + text + source[end:]
        lines = source.splitlines(keepends=True)
    return source


def absolute_patterns(moves: dict[str, str]) -> list[tuple[re.Pattern[str], str]]:
    patterns = []
    for old in sorted(moves, key=len, reverse=True):
        new = moves[old]
        parent, name = old.rsplit(".", 1)
        new_parent, new_name = new.rsplit(".", 1)
        patterns.append((re.compile(rf"(?<![\w.]){re.escape(old)}(?![\w])"), new))
        patterns.append(
            (re.compile(rf"(?<![\w/]){re.escape(old.replace('.', '/'))}(?=\.py\b|/)"), new.replace(".", "/"))
        )
        patterns.append(
            (
                re.compile(rf"\bfrom {re.escape(parent)} import {re.escape(name)}\b(?! *\()(?=( as \w+)?\s*$)", re.M),
                f"from {new_parent} import {new_name}",
            )
        )
    return patterns


def rewrite_absolute(text: str, patterns: list[tuple[re.Pattern[str], str]]) -> str:
    out = []
    for line in text.splitlines(keepends=True):
        if KEEP not in line:
            for pattern, new in patterns:
                line = pattern.sub(new, line)
        out.append(line)
    return "".join(out)


def tracked_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return [
        ROOT / name for name in listed if Path(name).suffix in SUFFIXES and name not in SKIP and (ROOT / name).exists()
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--move", action="store_true", help="git mv the old files that still exist first")
    parser.add_argument("--check", action="store_true", help="only list the references to old paths that are left")
    args = parser.parse_args()
    moves = read_moves()
    patterns = absolute_patterns(moves)
    if args.check:
        left = 0
        for path in tracked_files():
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if KEEP not in line and any(p.search(line) for p, _ in patterns):
                    print(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
                    left += 1
        return 1 if left else 0
    made = git_mv(moves) if args.move else {}
    files = tracked_files()
    exists = {module_of(p) for p in files if p.suffix == ".py" and p.parts[len(ROOT.parts)] == "ste"}
    for path in files:
        text = path.read_text()
        new = text
        relative_to_root = path.relative_to(ROOT)
        if path.suffix == ".py" and relative_to_root.parts[0] == "ste":
            module = module_of(path)
            new = rewrite_relative(path, original(module, made), moves, exists)
        new = rewrite_absolute(new, patterns)
        if new != text:
            path.write_text(new)
            print(f"rewrote {relative_to_root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
