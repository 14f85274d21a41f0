"""Run the Python code blocks of the documentation pages, in order, one namespace per page.

A block whose first line is ``# raises ste.SomeError`` must raise that error; blocks that import larq (the
"before" half of the migration page) are skipped, since larq does not import on Keras 3.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import ste

DOCS = Path(__file__).resolve().parents[1] / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
RAISES = re.compile(r"#\s*raises\s+ste\.(\w+)")
PAGES = ["index.md", "guide.md", "tools.md", "quantizers.md", "larq.md", "saving.md", "deploying.md"]


def _blocks(page: str) -> list[str]:
    text = (DOCS / page).read_text()
    return [block for block in BLOCK.findall(text) if "import larq" not in block and "--8<--" not in block]


@pytest.mark.parametrize("page", [p for p in PAGES if (DOCS / p).exists()])
def test_page_code_runs(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # blocks that save files write here
    if page == "deploying.md":
        pytest.importorskip(
            "larq_compute_engine", reason="deploying.md converts with larq-compute-engine (ste[deploy])"
        )
    namespace: dict = {"__name__": f"docs_{page[:-3]}"}
    blocks = _blocks(page)
    assert blocks, f"{page} has no python blocks"
    for number, block in enumerate(blocks):
        expected = RAISES.match(block.lstrip())
        code = compile(block, f"{page}[block {number}]", "exec")
        if expected is None:
            exec(code, namespace)
            continue
        error = getattr(ste, expected.group(1))
        with pytest.raises(error):
            exec(code, namespace)
