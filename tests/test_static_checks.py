"""mypy --strict and ruff on the package, run by pytest so that CI runs them (config in pyproject.toml)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import run_python

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_strict_on_the_package_and_the_signature_checks(tmp_path):
    pytest.importorskip("mypy")
    done = run_python(["-m", "mypy", "ste", "tests/type_checks/check_signatures.py"], tmp_path, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_check_and_format(tmp_path):
    pytest.importorskip("ruff")
    for args in (["check", "."], ["format", "--check", "ste"]):
        done = run_python(["-m", "ruff", *args], tmp_path, cwd=ROOT, check=False)
        assert done.returncode == 0, done.stdout + done.stderr


def _imports(package: Path) -> dict[str, set[str]]:
    """Every module of ``package`` -> the modules of ``package`` it imports, relative imports at any depth (a lazy
    import inside a function counts; one under ``if TYPE_CHECKING:`` does not). ``from . import name`` is an import
    of the submodule ``name`` when there is one, of the package otherwise."""
    import ast

    modules = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        here = (name if path.name == "__init__.py" else name.rsplit(".", 1)[0]).split(".")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for statement in node.body
            for inner in ast.walk(statement)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level and id(node) not in typing_only:
                base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
                for alias in node.names:
                    target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    if target in modules and target != name:
                        edges[name].add(target)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """An import cycle's modules (sorted) in a list, or an empty list when there is none (graphlib's topological
    sort names one cycle)."""
    import graphlib

    try:
        graphlib.TopologicalSorter(edges).prepare()
    except graphlib.CycleError as error:
        return [sorted(set(error.args[1]))]
    return []


def test_the_cycle_finder_finds_a_lazy_cycle_and_ignores_typing_only_imports(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from . import _a\n")
    (package / "_a.py").write_text("from ._b import f\n")
    (package / "_b.py").write_text("def f():\n    from ._a import g\n")
    (package / "_c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._d import h\n")
    (package / "_d.py").write_text("from ._c import k\n")
    assert _cycles(_imports(package)) == [["pkg._a", "pkg._b"]]


def test_no_two_modules_of_the_package_import_each_other():
    """One concept per module, layered: a module that imports another (even lazily, inside a function) is not
    imported back by it, directly or through others."""
    assert _cycles(_imports(ROOT / "ste")) == []
