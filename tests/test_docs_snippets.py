"""Every Python code block of README.md and docs/ runs as written: in order, one session per page.

A page's blocks run like a reader's session: a later block may use the functions and values an earlier block
defined, but every block imports the modules it uses itself, so a block copied on its own has its imports. A block
whose first line is ``# raises ste.SomeError`` must raise that error. A block that cannot run here is marked, on the
line right before its fence, with ``<!-- not run: REASON -->``; the marker is rare (see ``MAX_NOT_RUN``) and must
give its reason. Blocks that include a file (``--8<--``) show the example scripts, which tests/test_recipes.py runs.
"""

from __future__ import annotations

import os
import re
import types
from pathlib import Path

import pytest

import ste
from tests.helpers import run_python

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")], key=lambda path: str(path.relative_to(ROOT)))
BLOCK = re.compile(r"^(?:(?P<marker><!--[^\n]*-->)\n)?```python\n(?P<code>.*?)^```", re.S | re.M)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>.*?)\s*-->")
RAISES = re.compile(r"#\s*raises\s+ste\.(\w+)")
MAX_NOT_RUN = 4  # fragments are the exception: more than this means pages are drifting from runnable code (larq's
# two, which need Keras 2; distributed.md's multi-worker script and TPU recipe, which need a cluster and a TPU)
# Pages whose blocks need an optional tool: the module, and why the page is skipped without it.
NEEDS = {
    "docs/deploying.md": ("larq_compute_engine", "deploying.md converts with larq-compute-engine (ste[deploy])"),
    "docs/spiking.md": ("nir", "spiking.md's NIR section writes NIR files with nir (ste[nir])"),
}


def _blocks(path: Path) -> list[tuple[str, str | None]]:
    """(code, reason it is not run or None) of every python block of the page."""
    blocks = []
    for match in BLOCK.finditer(path.read_text()):
        marker = NOT_RUN.fullmatch(match.group("marker") or "")
        blocks.append((match.group("code"), marker.group("reason") if marker else None))
    return blocks


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def run_page(name: str) -> None:
    """Run the page's blocks as a reader's session, in the current directory (the fresh process that
    ``test_page_code_runs`` starts)."""
    path = ROOT / name
    namespace: dict = {"__name__": f"docs_{path.stem.replace('-', '_')}"}
    for number, (block, not_run) in enumerate(_blocks(path)):
        if not_run is not None or "--8<--" in block:
            continue
        # Each block runs in its own globals: the earlier blocks' names but not their modules (functions defined
        # earlier keep theirs), so a block that uses a module it does not import fails.
        scope = {name: value for name, value in namespace.items() if not isinstance(value, types.ModuleType)}
        expected = RAISES.match(block.lstrip())
        code = compile(block, f"{name}[block {number}]", "exec")
        if expected is None:
            exec(code, scope)
        else:
            with pytest.raises(getattr(ste, expected.group(1))):
                exec(code, scope)
        namespace.update(scope)


@pytest.mark.parametrize("name", [_name(path) for path in PAGES if _blocks(path)])
def test_page_code_runs(name, tmp_path):
    """The page's blocks in a fresh interpreter, as a reader runs them, in a directory of its own (blocks that save
    files write there; what a block registers or sets stays in its own process)."""
    if name in NEEDS:
        pytest.importorskip(NEEDS[name][0], reason=NEEDS[name][1])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3", "MPLBACKEND": "Agg"}
    run_python(["-c", f"from tests.test_docs_snippets import run_page; run_page({name!r})"], tmp_path, env=env)


def test_blocks_not_run_are_rare_and_say_why():
    reasons = [(_name(path), reason) for path in PAGES for _, reason in _blocks(path) if reason is not None]
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
