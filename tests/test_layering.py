"""The package is layered: no module imports a module of a higher layer, even lazily inside a function.

The layers, from the bottom (each ``ste/*/__init__.py`` docstring says what its package holds):

0. ``ste.errors`` and the modules that import nothing else of ste (the version, the patches of Keras and TensorFlow);
1. ``ste._common``: argument checks and name tables;
2. ``ste.registry``: the surrogate gradients;
3. ``ste._core``: the op machinery (the DSL, rules, compilation, op serialization);
4. ``ste._keras``: the Keras and TensorFlow integration;
5. the families: quantizers, layers, QAT, spiking, and the Keras pieces around them;
6. the tools: ``ste._tools`` (command line, plots, summaries, export) and ``ste.testing``;
7. the compatibility views: ``ste.larq``;
8. the front door: ``ste/__init__.py`` and ``python -m ste``.

A new module must be placed in a layer here (the test fails for one that is not), so its place is decided once.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.imports import import_edges, package_modules

ROOT = Path(__file__).resolve().parents[1]

LAYERS: list[tuple[str, ...]] = [
    ("ste.errors", "ste._version", "ste._patches"),
    ("ste._common",),
    ("ste.registry",),
    ("ste._core",),
    ("ste._keras",),
    (
        "ste.activations",
        "ste.constraints",
        "ste.quantizers",
        "ste.layers",
        "ste.optimizers",
        "ste.metrics",
        "ste.callbacks",
        "ste.qat",
        "ste.sparsity",
        "ste.clustering",
        "ste.spiking",
    ),
    ("ste._tools", "ste.testing"),
    ("ste.larq",),
    ("ste", "ste.__main__"),
]


def _layer(module: str, layers: list[tuple[str, ...]]) -> int | None:
    """The layer of the longest prefix that names the module or a package holding it."""
    best: tuple[int, int] | None = None
    for index, prefixes in enumerate(layers):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    return None if best is None else best[1]


def _upward_imports(package: Path, layers: list[tuple[str, ...]]) -> list[str]:
    found = []
    for module, targets in sorted(import_edges(package).items()):
        low = _layer(module, layers)
        for target in sorted(targets):
            high = _layer(target, layers)
            if low is not None and high is not None and high > low:
                found.append(f"{module} (layer {low}) imports {target} (layer {high})")
    return found


def _unplaced(package: Path, layers: list[tuple[str, ...]]) -> list[str]:
    return sorted(module for module in package_modules(package) if _layer(module, layers) is None)


def test_the_layer_check_finds_an_upward_import_even_a_lazy_one(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "_low").mkdir(parents=True)
    (package / "__init__.py").write_text("from ._low import _a\n")
    (package / "_low" / "__init__.py").write_text("")
    (package / "_low" / "_a.py").write_text("def f():\n    from .._high import g\n")
    (package / "_low" / "_b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg._high\n"
    )
    (package / "_high.py").write_text("from ._low._a import f\nimport pkg._low._b\n")
    layers = [("pkg._low",), ("pkg._high",), ("pkg",)]
    assert _upward_imports(package, layers) == ["pkg._low._a (layer 0) imports pkg._high (layer 1)"]
    assert _unplaced(package, layers[:2]) == ["pkg"]


def test_every_module_of_the_package_has_a_layer() -> None:
    assert _unplaced(ROOT / "ste", LAYERS) == [], "place the new module or package in LAYERS above"


def test_no_module_imports_a_module_of_a_higher_layer() -> None:
    assert _upward_imports(ROOT / "ste", LAYERS) == []


@pytest.mark.parametrize("package", sorted(p.name for p in (ROOT / "ste").iterdir() if (p / "__init__.py").exists()))
def test_every_package_says_what_it_holds(package: str) -> None:
    """``ls ste/`` and the ``__init__`` docstrings are enough to find where each part lives."""
    tree = ast.parse((ROOT / "ste" / package / "__init__.py").read_text(encoding="utf-8"))
    docstring = ast.get_docstring(tree)
    assert docstring and len(docstring.split()) >= 8, f"ste/{package}/__init__.py needs a docstring"
