"""``ste.larq`` is built on ste's public API only: every name it takes from another part of ste is in that module's
``__all__``, and no module or name it reaches starts with ``_``. Imports between ``ste.larq``'s own modules are free.

The check reads the source with :mod:`ast` (nothing is imported), lazy imports inside functions included, and also
refuses ``module._name`` on a module of ste that ``ste.larq`` imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OWN = "ste.larq"


def _source(root: Path, module: str) -> Path | None:
    """The file of ``module`` under ``root`` (``pkg/__init__.py`` or ``pkg.py``), or None."""
    base = root.joinpath(*module.split("."))
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _exports(root: Path, module: str) -> set[str] | None:
    """The names in ``module``'s literal ``__all__`` (None: no such module or no literal ``__all__``)."""
    path = _source(root, module)
    if path is None:
        return None
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
            return {e.value for e in ast.walk(node.value) if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return None


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _own(module: str, own: str) -> bool:
    return module == own or module.startswith(own + ".")


def private_uses(root: Path, package: str, own: str) -> list[str]:
    """Every import in the modules of ``package`` (under ``root``) that reaches a private part of the top package."""
    top = package.split(".")[0]
    found: list[str] = []
    for path in sorted(root.joinpath(*package.split(".")).glob("*.py")):
        is_package = path.name == "__init__.py"
        module = package if is_package else f"{package}.{path.stem}"
        where = f"{path.relative_to(root).as_posix()}"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        ste_modules: set[str] = set()  # local names bound to a module of the top package outside ``own``
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] != top or _own(alias.name, own):
                        continue
                    if any(part.startswith("_") for part in alias.name.split(".")):
                        found.append(f"{where}:{node.lineno} imports the private module {alias.name}")
                    ste_modules.add(alias.asname or top)
            elif isinstance(node, ast.ImportFrom):
                target = _absolute(module, is_package, node)
                if target.split(".")[0] != top or _own(target, own):
                    continue
                if any(part.startswith("_") for part in target.split(".")):
                    found.append(f"{where}:{node.lineno} imports from the private module {target}")
                    continue
                exports = _exports(root, target) or set()
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    if _own(full, own):
                        continue
                    if alias.name.startswith("_") or alias.name not in exports:
                        found.append(f"{where}:{node.lineno} imports {alias.name}, not in {target}.__all__")
                    elif _source(root, full) is not None:
                        ste_modules.add(alias.asname or alias.name)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in ste_modules
                and node.attr.startswith("_")
            ):
                found.append(f"{where}:{node.lineno} reads the private name {node.value.id}.{node.attr}")
    return found


def test_the_check_finds_private_imports_and_private_names(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "_low").mkdir(parents=True)
    (tmp_path / "pkg" / "pub").mkdir()
    (tmp_path / "pkg" / "view").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text('__all__ = ["pub"]\n')
    (tmp_path / "pkg" / "_low" / "__init__.py").write_text('__all__ = ["f"]\n')
    (tmp_path / "pkg" / "pub" / "__init__.py").write_text('__all__ = ["g"]\n_h = 1\nk = 2\n')
    (tmp_path / "pkg" / "pub" / "_impl.py").write_text("")
    (tmp_path / "pkg" / "view" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "view" / "_mine.py").write_text("")
    (tmp_path / "pkg" / "view" / "a.py").write_text(
        "from ..pub import g\n"  # public: fine
        "from .. import pub\n"  # a public package: fine
        "from . import _mine\n"  # its own module: fine
        "from ._mine import x\n"  # its own private module: fine
        "from .._low import f\n"  # a private package
        "from ..pub._impl import y\n"  # a private module of a public package
        "from ..pub import _h\n"  # a private name
        "from ..pub import k\n"  # a name the package does not export
        "def lazy():\n"
        "    import pkg.pub._impl\n"  # lazily, with ``import``
        "    return pub._h\n"  # a private name read as an attribute
    )
    assert private_uses(tmp_path, "pkg.view", "pkg.view") == [
        "pkg/view/a.py:5 imports from the private module pkg._low",
        "pkg/view/a.py:6 imports from the private module pkg.pub._impl",
        "pkg/view/a.py:7 imports _h, not in pkg.pub.__all__",
        "pkg/view/a.py:8 imports k, not in pkg.pub.__all__",
        "pkg/view/a.py:10 imports the private module pkg.pub._impl",
        "pkg/view/a.py:11 reads the private name pub._h",
    ]


def test_ste_larq_uses_only_public_ste_api() -> None:
    assert private_uses(ROOT, OWN, OWN) == []
