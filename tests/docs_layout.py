"""Layout checks of the built site in headless Chromium: ``python -m tests.docs_layout SITE_DIR OUT_DIR``.

Each page is loaded at a desktop size (1280×900) and a phone size (390×844) with a script that measures, in the
browser's own layout: tables that overflow the page without a horizontal scroll bar (clipped), wrapped lines of
code whose continuation starts at the line's left edge (a comment's end reading as code at column 0), a copy
button over the text of a code block's first line, and, on the desktop, sidebar sections below the window. Chromium
prints the page's DOM after the script ran (``--dump-dom``), and the findings are read from it. The same launch writes
a screenshot of every page at both sizes to OUT_DIR (``--screenshot``; the findings' element is hidden), a build
artifact, never committed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SIZES = {"desktop": (1280, 900), "phone": (390, 844)}
# the pages with wide tables or long code, those that grow a section at a time, and a gallery entry (a page outside
# the navigation: the sidebar must still show every section)
PAGES = (
    "index",
    "getting-started",
    "deploying",
    "qat",
    "sparsity",
    "clustering",
    "performance",
    "results",
    "spiking",
    "larq",
    "api",
    "gallery",
    "gallery/atan",
)

CHECK = r"""
<script>
window.addEventListener("load", () => {
  const problems = [];
  const content = document.querySelector(".md-content").getBoundingClientRect();
  const where = (el) => (el.closest("[id]") || {}).id || el.tagName;
  for (const table of document.querySelectorAll(".md-typeset table")) {
    if (table.getBoundingClientRect().right <= content.right + 1) continue;
    let scroller = table.parentElement, scrolls = false;
    for (; scroller && scroller !== document.body; scroller = scroller.parentElement) {
      const style = getComputedStyle(scroller);
      if (["auto", "scroll"].includes(style.overflowX) && scroller.scrollWidth > scroller.clientWidth) {
        scrolls = scroller.getBoundingClientRect().right <= content.right + 1; break;
      }
    }
    if (!scrolls) problems.push("clipped table near #" + where(table));
  }
  for (const code of document.querySelectorAll(".highlight:not(.language-text) pre > code")) {
    const lines = [...code.children].filter((s) => s.id && s.id.startsWith("__span"));
    for (const line of lines) {
      const range = document.createRange();
      range.selectNodeContents(line);
      const rects = [...range.getClientRects()].filter((r) => r.width > 0);
      if (rects.length < 2) continue;
      const start = Math.min(...rects.map((r) => r.left));
      const first = rects.find((r) => Math.abs(r.left - start) < 1);
      const wrapped = rects.filter((r) => r.top > first.top + 2);
      if (wrapped.some((r) => r.left < start + 8)) {
        problems.push("wrapped code line at column 0: " + line.textContent.trim().slice(0, 60));
      }
    }
    // Material 9.6+ puts the copy button in nav.md-code__nav (.md-code__button); before, .md-clipboard
    const button = code.parentElement.querySelector(".md-code__button[data-md-type='copy'], .md-clipboard");
    if (!button) problems.push("no copy button found (the check cannot run): " + code.textContent.trim().slice(0, 40));
    if (button && lines.length) {
      const b = button.getBoundingClientRect();
      // the first line's visible characters only: the blanks that align a comment may run under the button
      const ink = [];
      const walker = document.createTreeWalker(lines[0], NodeFilter.SHOW_TEXT);
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        for (const word of node.textContent.matchAll(/\S+/g)) {
          const range = document.createRange();
          range.setStart(node, word.index);
          range.setEnd(node, word.index + word[0].length);
          ink.push(...range.getClientRects());
        }
      }
      for (const r of ink) {
        if (r.width > 0 && r.right > b.left + 1 && r.left < b.right && r.bottom > b.top && r.top < b.bottom) {
          problems.push("copy button over: " + lines[0].textContent.trim().slice(0, 60)); break;
        }
      }
    }
  }
  if (window.innerWidth >= 1220) {
    for (const item of document.querySelectorAll(".md-sidebar--primary .md-nav--primary > .md-nav__list > li")) {
      const r = item.getBoundingClientRect();
      if (r.height > 0 && r.top > window.innerHeight) {
        problems.push("sidebar item below the window: " + item.textContent.trim().slice(0, 40));
      }
    }
  }
  const out = document.createElement("pre");
  out.id = "layout-problems";
  out.hidden = true;
  out.textContent = JSON.stringify(problems);
  document.body.appendChild(out);
});
</script>
"""


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def _run(browser: str, url: str, size: tuple[int, int], extra: list[str]) -> subprocess.CompletedProcess[str]:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--window-size={size[0]},{size[1]}"]
    return subprocess.run(
        [browser, *flags, "--virtual-time-budget=3000", *extra, url], capture_output=True, text=True, timeout=120
    )


def check(site: Path, out: Path, pages: tuple[str, ...] = PAGES) -> dict[str, list[str]]:
    """{"PAGE at SIZE": [problems]} for every page and size; screenshots into ``out``."""
    browser = chromium()
    assert browser is not None, "no Chromium found"
    site, out = site.resolve(), out.resolve()  # file:// URIs need absolute paths ("site" is the usual argument)
    out.mkdir(parents=True, exist_ok=True)
    found: dict[str, list[str]] = {}
    for page in pages:
        html = site / page / "index.html" if page != "index" else site / "index.html"
        probe = html.with_name("_layout_probe.html")  # beside the page: its relative links and styles resolve
        probe.write_text(html.read_text().replace("</body>", CHECK + "</body>"))
        try:
            for label, size in SIZES.items():
                shot = out / f"{page.replace('/', '_')}-{label}.png"
                # one launch: the DOM after the probe ran, and a screenshot (the probe's output is hidden: the
                # screenshot shows the page as built)
                dom = _run(browser, probe.as_uri(), size, ["--dump-dom", f"--screenshot={shot}"]).stdout
                match = re.search(r'<pre id="layout-problems"[^>]*>(.*?)</pre>', dom, re.S)
                problems = json.loads(match.group(1).replace("&quot;", '"').replace("&amp;", "&")) if match else None
                found[f"{page} at {label}"] = problems if problems is not None else ["the probe did not run"]
        finally:
            probe.unlink()
    return found


if __name__ == "__main__":
    site_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("site")
    out_dir = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(tempfile.mkdtemp(prefix="ste-layout-"))
    results = check(site_dir, out_dir)
    for key, problems in results.items():
        print(f"{key}: {'ok' if not problems else '; '.join(problems)}")
    print(f"screenshots: {out_dir}")
    sys.exit(1 if any(results.values()) else 0)
