"""Every Python code block of README.md and docs/ runs as written: in order, one session per page.

A page's blocks run like a reader's session: a later block may use the functions and values an earlier block
defined, but every block imports the modules it uses itself, so a block copied on its own has its imports. A block
whose first line is ``# raises ste.SomeError`` must raise that error. A block that cannot run here is marked, on the
line right before its fence, with ``<!-- not run: REASON -->``; the marker is rare (see ``MAX_NOT_RUN``) and must
give its reason. A block that needs an optional tool is marked ``<!-- needs: NAME -->`` (``BLOCK_NEEDS``): without
the tool the page's other blocks run and the test is skipped, naming the block and what to install. Blocks that
include a file (``--8<--``) show the example scripts, which tests/test_recipes.py runs.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import sys
import types
from pathlib import Path

import pytest

import ste
from tests.helpers import run_python

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")], key=lambda path: str(path.relative_to(ROOT)))
BLOCK = re.compile(r"^(?:(?P<marker><!--[^\n]*-->)\n)?```python\n(?P<code>.*?)^```", re.S | re.M)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>.*?)\s*-->")
NEEDS_MARKER = re.compile(r"<!--\s*needs:\s*(?P<need>\w+)\s*-->")
RAISES = re.compile(r"#\s*raises\s+ste\.((?:\w+\.)*\w+)")
MAX_NOT_RUN = 4  # fragments are the exception: more than this means pages are drifting from runnable code (larq's
# two, which need Keras 2; distributed.md's multi-worker script and TPU recipe, which need a cluster and a TPU)
# Pages whose blocks need an optional tool: the module, and why the page is skipped without it.
NEEDS = {
    "docs/deploying.md": ("larq_compute_engine", "deploying.md converts with larq-compute-engine (ste[deploy])"),
    "docs/keras-hub.md": ("keras_hub", "keras-hub.md builds KerasHub backbones with keras-hub (ste[zoo])"),
    "docs/spiking.md": ("nir", "spiking.md's NIR section writes NIR files with nir (ste[nir])"),
}
# Blocks whose tool is optional: what is missing without it, and how a reader gets it.
BLOCK_NEEDS = {
    "ai_edge_litert": "LiteRT's interpreter is not installed (pip install 'ste[litert]')",
    "lce_interpreter": "LCE's interpreter needs a Python with larq-compute-engine and numpy < 2: set STE_LCE_PYTHON "
    "or make .venv-lce (docs/deploying.md, 'Checking outputs')",
}
SKIPPED = "docs-snippet-skipped:"  # the line a page's job prints for each block it could not run here


def _available(need: str) -> bool:
    if need == "lce_interpreter":  # set for the page's job by _lce_python
        return bool(os.environ.get("STE_LCE_PYTHON"))
    return importlib.util.find_spec(need) is not None


def _lce_python() -> str | None:
    """A Python that runs LCE's interpreter, as tests/test_deploy.py finds one: ``STE_LCE_PYTHON``, else
    ``.venv-lce`` in the repository, else this Python if it has larq-compute-engine and numpy < 2."""
    if os.environ.get("STE_LCE_PYTHON"):
        return os.environ["STE_LCE_PYTHON"]
    if (ROOT / ".venv-lce" / "bin" / "python").exists():
        return str(ROOT / ".venv-lce" / "bin" / "python")
    import numpy as np

    if int(np.__version__.split(".")[0]) < 2 and importlib.util.find_spec("larq_compute_engine") is not None:
        return sys.executable
    return None


def _blocks(path: Path) -> list[tuple[str, str | None, str | None]]:
    """(code, reason it is not run or None, the optional tool it needs or None) of every python block of the page."""
    blocks = []
    for match in BLOCK.finditer(path.read_text()):
        marker = NOT_RUN.fullmatch(match.group("marker") or "")
        needs = NEEDS_MARKER.fullmatch(match.group("marker") or "")
        if needs and needs.group("need") not in BLOCK_NEEDS:
            raise ValueError(f"{path.name}: unknown '<!-- needs: {needs.group('need')} -->', see BLOCK_NEEDS")
        blocks.append((match.group("code"), marker.group("reason") if marker else None, needs and needs.group("need")))
    return blocks


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def run_page(name: str) -> None:
    """Run the page's blocks as a reader's session, in the current directory (the fresh process that
    ``test_page_code_runs`` starts)."""
    path = ROOT / name
    namespace: dict = {"__name__": f"docs_{path.stem.replace('-', '_')}"}
    for number, (block, not_run, need) in enumerate(_blocks(path)):
        if not_run is not None or "--8<--" in block:
            continue
        if need is not None and not _available(need):
            print(f"{SKIPPED} {name} block {number}: {BLOCK_NEEDS[need]}", flush=True)
            continue
        # Each block runs in its own globals: the earlier blocks' names but not their modules (functions defined
        # earlier keep theirs), so a block that uses a module it does not import fails.
        scope = {name: value for name, value in namespace.items() if not isinstance(value, types.ModuleType)}
        expected = RAISES.match(block.lstrip())
        code = compile(block, f"{name}[block {number}]", "exec")
        if expected is None:
            exec(code, scope)
        else:
            with pytest.raises(functools.reduce(getattr, expected.group(1).split("."), ste)):
                exec(code, scope)
        namespace.update(scope)


@pytest.mark.parametrize("name", [_name(path) for path in PAGES if _blocks(path)])
def test_page_code_runs(name, tmp_path):
    """The page's blocks in a fresh interpreter, as a reader runs them, in a directory of its own (blocks that save
    files write there; what a block registers or sets stays in its own process)."""
    if name in NEEDS:
        pytest.importorskip(NEEDS[name][0], reason=NEEDS[name][1])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3", "MPLBACKEND": "Agg"}
    lce_python = _lce_python()
    if lce_python:
        env["STE_LCE_PYTHON"] = lce_python
    done = run_python(["-c", f"from tests.test_docs_snippets import run_page; run_page({name!r})"], tmp_path, env=env)
    skipped = [line.split(SKIPPED, 1)[1].strip() for line in done.stdout.splitlines() if line.startswith(SKIPPED)]
    if skipped:
        pytest.skip("every other block ran; not run here: " + "; ".join(skipped))


def test_blocks_not_run_are_rare_and_say_why():
    reasons = [(_name(path), reason) for path in PAGES for _, reason, _ in _blocks(path) if reason is not None]
    assert len(reasons) <= MAX_NOT_RUN, reasons
    for page, reason in reasons:
        assert len(reason.split()) >= 4, f"{page}: '<!-- not run: ... -->' needs a reason, got {reason!r}"


def test_every_python_fence_is_found():
    """A fence the pattern misses (indented, ```py) would silently escape the test above."""
    for path in PAGES:
        fences = len(re.findall(r"^\s*```\s*py(?:thon)?\b", path.read_text(), re.M))
        assert fences == len(_blocks(path)), f"{_name(path)}: write code blocks as an unindented ```python fence"


def test_gallery_pages_code_runs():
    """The "Use it" block that docs/hooks.py writes on every generated gallery page."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    for info in hooks._entries():
        blocks = [match.group("code") for match in BLOCK.finditer(hooks._entry_page(info))]
        assert blocks, info.name
        for block in blocks:
            namespace: dict = {}
            exec(compile(block, f"gallery/{info.name}.md", "exec"), namespace)
            assert isinstance(namespace["op"], ste.STEFunction), info.name
