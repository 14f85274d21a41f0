"""The import graph of a package, read from its source with ``ast`` (shared by the cycle and the layering tests)."""

from __future__ import annotations

import ast
from pathlib import Path


def package_modules(package: Path) -> dict[str, Path]:
    """Every module of ``package`` by dotted name (a package by its own name, not ``__init__``) → its file."""
    modules = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def import_edges(package: Path, *, relative_only: bool = False) -> dict[str, set[str]]:
    """Every module of ``package`` → the modules of the package it imports, at any depth: a lazy import inside a
    function counts, one under ``if TYPE_CHECKING:`` does not. ``from . import name`` is an import of the submodule
    ``name`` when there is one, of the package otherwise. With ``relative_only``, absolute imports are not read (the
    cycle test: an absolute ``import ste.x`` inside ste runs after ste is imported)."""
    modules = package_modules(package)
    top = package.name
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
            if id(node) in typing_only:
                continue
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and (node.level or not relative_only):
                if node.level:
                    base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            elif isinstance(node, ast.Import) and not relative_only:
                targets = [a.name for a in node.names]
            for target in targets:
                while target and target not in modules:  # `import ste.x.y` where only ste.x is a module of ours
                    target = target.rpartition(".")[0]
                if target and (target == top or target.startswith(top + ".")) and target != name:
                    edges[name].add(target)
    return edges
