"""mypy --strict and ruff on the package, run by pytest so that CI runs them (config in pyproject.toml)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import run_python
from tests.imports import import_edges

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
    assert _cycles(import_edges(package, relative_only=True)) == [["pkg._a", "pkg._b"]]


def test_no_two_modules_of_the_package_import_each_other():
    """One concept per module, layered: a module that imports another (even lazily, inside a function) is not
    imported back by it, directly or through others."""
    assert _cycles(import_edges(ROOT / "ste", relative_only=True)) == []


#: A timing figure: a ratio of times ("1.35× the", "1.29× against", "~3×", "5x slower") or seconds against seconds.
_TIMING = r"\d(?:\.\d+)?(?:-\d(?:\.\d+)?)?[×x] (?:the|against|slower|faster)|~\d+(?:\.\d+)?×|\d+ m?s against \d+ m?s"


def test_docstrings_state_rules_not_timings():
    """Docstrings state the rule; measured times belong in benchmarks/ and docs/performance.md, which docstrings
    link. The scan finds a planted figure, so it cannot pass by missing them."""
    import ast
    import re

    def timings(source: str) -> list[str]:
        found = []
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                found += [m.group(0) for m in re.finditer(_TIMING, ast.get_docstring(node) or "")]
        return found

    assert timings('def f():\n    """Fast: 1.35× the plain op, ~3× under XLA, 50 s against 106 s."""\n') == [
        "1.35× the",
        "~3×",
        "50 s against 106 s",
    ]
    found = {
        str(path.relative_to(ROOT)): timings(path.read_text(encoding="utf-8")) for path in ROOT.glob("ste/**/*.py")
    }
    assert {path: hits for path, hits in found.items() if hits} == {}


#: larq's spec and class names (larq.quantizers), which ste keeps in ste.larq only.
_LARQ_NAMES = ("ste_sign", "ste_tern", "ste_heaviside", "swish_sign", "dorefa_quantizer", "SteSign", "SteTern")


def test_native_messages_and_examples_use_stes_names():
    """ste's native packages tell users to write ste's names: no error message, and no docstring example
    (``>>>`` lines), of a package outside ste/larq spells one of larq's names."""
    import ast

    found = []
    for path in sorted(ROOT.glob("ste/**/*.py")):
        if "larq" in path.relative_to(ROOT / "ste").parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            texts = []
            if isinstance(node, ast.Raise) and node.exc is not None:
                texts.append(ast.unparse(node.exc))
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node) or ""
                texts += [line for line in doc.splitlines() if line.lstrip().startswith((">>>", "..."))]
            found += [f"{path.relative_to(ROOT)}: {name}" for text in texts for name in _LARQ_NAMES if name in text]
    assert found == []
