"""Layout checks of the built site in headless Chromium: ``python -m tests.docs_layout SITE_DIR OUT_DIR [PAGE ...]``.

Each page is loaded at a desktop size (1280×900) and a phone size (390×844) with a script that measures, in the
browser's own layout: on the desktop, tables wider than their column (a table that needs a scroll bar does not
count as fitting); on the phone, tables that overflow the screen without a horizontal scroll bar (clipped) and a first
column wider than the text column (out of view); at both sizes, lines of code (code blocks and the home page's
cards) broken inside an identifier, wrapped lines of code whose continuation starts at the line's left edge (a
comment's end reading as code at column 0), code blocks (text ones too) wider than their box (cut at the right
edge), a copy button over a visible character of any line of a block, a word or number in a table cell split
across lines anywhere but at a space, after a hyphen or, in code, after the punctuation docs/hooks.py marks
(kera|s_int8), a table cell of prose set one word per line, and, on the desktop, any wrapped line of a code block and
sidebar sections below the window.
Chromium
prints the page's DOM after the script ran (``--dump-dom``), and the findings and the page's height are read from it.
A second launch, in a window as wide and as tall as the page, writes a full-height screenshot of every page at both
sizes to OUT_DIR (``--screenshot``; the findings' element is hidden), a build artifact, never committed. A page taller
than Chromium's screenshot cap (MAX_SHOT_HEIGHT) is shot in overlapping parts (PAGE-SIZE-part1.png, ...), the page moved
up by each part's top; OUT_DIR/shots.json gives every page's height and each shot's file and top, so that a test can
check the shots cover each page whole.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from html import unescape as html_unescape
from pathlib import Path

SIZES = {"desktop": (1280, 900), "phone": (390, 844)}
MAX_SHOT_HEIGHT = 16384  # Chromium's cap on a screenshot's height: a longer page is shot in parts of this height
# consecutive parts overlap by this much
SHOT_OVERLAP = 200
# every page of the site, and of the generated gallery its overview and one entry (a page outside the navigation: the
# sidebar must still show every section); the other entries are built from the same template
GALLERY_ENTRY = "gallery/atan"


def pages(site: Path) -> tuple[str, ...]:
    """Every built page of ``site`` ("index", "qat", "recipes/activation-gradient", ...) but the gallery's entries
    other than :data:`GALLERY_ENTRY`."""
    found = ["index"]
    for html in sorted(site.rglob("index.html")):
        page = html.parent.relative_to(site).as_posix()
        if page == "." or (page.startswith("gallery/") and page != GALLERY_ENTRY):
            continue
        found.append(page)
    return tuple(found)


CHECK = r"""
<script>
window.addEventListener("load", () => {
  const problems = [];
  // the text column (the article, without the content area's padding)
  const content = document.querySelector(".md-content .md-typeset").getBoundingClientRect();
  const headings = [...document.querySelectorAll(".md-typeset :is(h1, h2, h3, h4)[id]")];
  const where = (el) => {  // the id of the last heading before the element
    const before = headings.filter((h) => h.compareDocumentPosition(el) & Node.DOCUMENT_POSITION_FOLLOWING);
    return before.length ? before[before.length - 1].id : el.tagName;
  };
  const desktop = window.innerWidth >= 1220;
  for (const table of document.querySelectorAll(".md-typeset table")) {
    const rect = table.getBoundingClientRect();
    const wrap = table.closest(".md-typeset__scrollwrap") || table.parentElement;
    const width = Math.round(Math.max(rect.width, table.scrollWidth));
    const column = Math.round(content.width);
    if (desktop && (rect.right > content.right + 1 || wrap.scrollWidth > wrap.clientWidth + 1)) {
      // on the desktop a table fits its column: one that needs a scroll bar does not count
      problems.push(`table ${width} px wide in a ${column} px column near #${where(table)}`);
      continue;
    }
    const first = table.querySelector("tr > :first-child");
    if (first) {
      const cell = first.getBoundingClientRect();
      if (cell.right > window.innerWidth + 1 || cell.width > content.width + 1) {
        const at = where(table);
        problems.push(`first column ${Math.round(cell.width)} px, out of view in a ${column} px column near #${at}`);
      }
    }
    if (rect.right <= content.right + 1) continue;
    let scroller = table.parentElement, scrolls = false;
    for (; scroller && scroller !== document.body; scroller = scroller.parentElement) {
      const style = getComputedStyle(scroller);
      if (["auto", "scroll"].includes(style.overflowX) && scroller.scrollWidth > scroller.clientWidth) {
        scrolls = scroller.getBoundingClientRect().right <= window.innerWidth + 1; break;
      }
    }
    if (!scrolls) problems.push("clipped table near #" + where(table));
  }
  // a wrapped line of code (a code block's line, or the code of a home-page card) breaks between tokens, never
  // inside an identifier (quantize_mo|del)
  const word = /[A-Za-z0-9_]/;
  const charBox = (node, i) => {  // the drawn box of the character at offset i of a text node, if any
    const range = document.createRange();
    range.setStart(node, i);
    range.setEnd(node, i + 1);
    return [...range.getClientRects()].find((q) => q.width > 0);
  };
  const brokenInside = (element) => {
    const whole = document.createRange();
    whole.selectNodeContents(element);
    const tops = new Set([...whole.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top)));
    if (tops.size < 2) return null;
    let previous = null;
    const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (let i = 0; i < node.textContent.length; i++) {
        const ch = node.textContent[i];
        if (/\s/.test(ch)) { previous = null; continue; }
        const r = charBox(node, i);
        if (!r) continue;
        if (previous && r.top > previous.top + 2 && word.test(previous.ch) && word.test(ch)) {
          return element.textContent.trim().slice(0, 60);
        }
        previous = { top: r.top, ch };
      }
    }
    return null;
  };
  const lineSpans = [...document.querySelectorAll(".highlight pre > code > span[id^='__span']")];
  const cardCode = [...document.querySelectorAll(".md-typeset .grid.cards code, .md-typeset .grid .card code")];
  for (const element of [...lineSpans, ...cardCode.filter((c) => !c.closest("pre"))]) {
    const broken = brokenInside(element);
    if (broken) problems.push("code broken inside an identifier: " + broken);
  }
  // on the desktop no line of a code block wraps at all (snippets are written to the 80 columns its box holds,
  // docs/contributing.md); on the phone a line may wrap between tokens
  if (desktop) {
    for (const line of lineSpans) {
      const range = document.createRange();
      range.selectNodeContents(line);
      const tops = new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top)));
      const text = line.textContent.trim().slice(0, 60);
      if (tops.size > 1) problems.push(`wrapped code line near #${where(line)}: ${text}`);
    }
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
  }
  // every code block (text ones too): nothing cut at the right edge (a block that scrolls hides the end of its
  // lines), and the copy button over no visible character of any line
  for (const code of document.querySelectorAll(".md-typeset .highlight pre > code")) {
    const head = code.textContent.trim().slice(0, 50);
    if (code.scrollWidth > code.clientWidth + 1) {
      const size = `${code.scrollWidth} px wide in a ${code.clientWidth} px box`;
      problems.push(`code block ${size} near #${where(code)}: ${head}`);
    }
    // Material 9.6+ puts the copy button in nav.md-code__nav (.md-code__button); before, .md-clipboard
    const button = code.parentElement.querySelector(".md-code__button[data-md-type='copy'], .md-clipboard");
    if (!button) { problems.push("no copy button found (the check cannot run): " + head); continue; }
    const b = button.getBoundingClientRect();
    const box = code.getBoundingClientRect();
    // visible characters only: the blanks that align a comment may run under the button
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    let over = null;
    for (let node = walker.nextNode(); node && !over; node = walker.nextNode()) {
      for (const word of node.textContent.matchAll(/\S+/g)) {
        const range = document.createRange();
        range.setStart(node, word.index);
        range.setEnd(node, word.index + word[0].length);
        const hit = [...range.getClientRects()].some((r) => {
          const left = Math.max(r.left, box.left), right = Math.min(r.right, box.right);
          return r.width > 0 && right > b.left + 1 && left < b.right && r.bottom > b.top && r.top < b.bottom;
        });
        if (hit) { over = word[0]; break; }
      }
    }
    if (over) problems.push(`copy button over "${over}" near #${where(code)}: ${head}`);
  }
  // a table cell's text breaks at a space or after a hyphen, and code in it also after the punctuation that
  // docs/hooks.py marks (. ( [ { , = /): never inside a word or a number (kera|s_int|8, 530,9|33)
  const codeBreak = /[.(\[{,=\/]/;
  const splitInCell = (cell) => {
    let previous = null;
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT | NodeFilter.SHOW_ELEMENT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (node.nodeType === Node.ELEMENT_NODE) {
        if (["BR", "P", "LI", "DIV", "IMG"].includes(node.tagName)) previous = null;
        continue;
      }
      const code = !!node.parentElement.closest("code");
      const text = node.textContent;
      for (let i = 0; i < text.length; i++) {
        const ch = text[i];
        if (/\s/.test(ch)) { previous = null; continue; }
        const r = charBox(node, i);
        if (!r) continue;
        if (previous && r.top > previous.top + 2) {
          const allowed = "-\u2010\u2013\u2014".includes(previous.ch) || (previous.code && codeBreak.test(previous.ch));
          const before = previous.text.slice(Math.max(0, previous.i - 12), previous.i + 1);
          if (!allowed) return before + "|" + text.slice(i, i + 12);
        }
        previous = { top: r.top, ch, code, text, i };
      }
    }
    return null;
  };
  for (const cell of document.querySelectorAll(".md-typeset table :is(td, th)")) {
    const split = splitInCell(cell);
    if (split) problems.push(`word split in a table cell near #${where(cell)}: ${split}`);
    // prose set one word per line (a column squeezed to its longest word): of the pairs of neighbouring words
    // outside code, none shares a line
    let pairs = 0, together = 0;
    const texts = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = texts.nextNode(); node; node = texts.nextNode()) {
      if (node.parentElement.closest("code")) continue;
      let top = null;
      for (const w of node.textContent.matchAll(/\S+/g)) {
        const range = document.createRange();
        range.setStart(node, w.index);
        range.setEnd(node, w.index + w[0].length);
        const r = [...range.getClientRects()].find((q) => q.width > 0);
        if (!r) { top = null; continue; }
        if (top !== null) { pairs++; if (Math.abs(r.top - top) < 2) together++; }
        top = r.top;
      }
    }
    if (pairs >= 3 && together === 0) {
      problems.push(`one word per line in a table cell near #${where(cell)}: ${cell.textContent.trim().slice(0, 50)}`);
    }
  }
  if (desktop) {
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
  // the page's full height: the screenshot is taken in a window that tall
  out.textContent = JSON.stringify({ problems, height: document.documentElement.scrollHeight });
  document.body.appendChild(out);
  if (window.parent !== window) window.parent.postMessage(out.textContent, "*");  // the phone's frame
  // a part of a tall page's screenshot: the page moved up by the part's top (the headless screenshot shows the top of
  // the window, whatever the scroll position)
  const part = location.hash.match(/^#ste-shot-(\d+)$/);
  if (part) document.documentElement.style.transform = `translateY(-${part[1]}px)`;
});
</script>
"""


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


# Chromium's headless window is at least 500 px wide whatever --window-size asks: the phone size is a frame of that
# size in a page of its own, which the probe inside it reports to (postMessage); for the full-height screenshot the
# frame is as tall as its page
FRAME = """<!doctype html><html><body style="margin:0">
<iframe src="_layout_probe.html{part}" style="border:0;width:{width}px;height:{height}px"></iframe>
<pre id="layout-problems" hidden></pre>
<script>window.addEventListener("message", (e) => {{
  document.getElementById("layout-problems").textContent = e.data;
}});</script></body></html>
"""


def _run(browser: str, url: str, size: tuple[int, int], extra: list[str]) -> subprocess.CompletedProcess[str]:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--window-size={size[0]},{size[1]}"]
    return subprocess.run(
        [browser, *flags, "--virtual-time-budget=3000", *extra, url], capture_output=True, text=True, timeout=120
    )


def check(site: Path, out: Path, only: tuple[str, ...] | None = None) -> dict[str, list[str]]:
    """{"PAGE at SIZE": [problems]} for every page (or ``only`` those) and size; screenshots into ``out``."""
    browser = chromium()
    assert browser is not None, "no Chromium found"
    site, out = site.resolve(), out.resolve()  # file:// URIs need absolute paths ("site" is the usual argument)
    out.mkdir(parents=True, exist_ok=True)
    found: dict[str, list[str]] = {}
    shots: dict[str, dict[str, object]] = {}
    for page in only or pages(site):
        html = site / page / "index.html" if page != "index" else site / "index.html"
        probe = html.with_name("_layout_probe.html")  # beside the page: its relative links and styles resolve
        probe.write_text(html.read_text().replace("</body>", CHECK + "</body>"))
        frame = html.with_name("_layout_frame.html")
        try:
            for label, size in SIZES.items():
                shot = out / f"{page.replace('/', '_')}-{label}.png"
                url = probe.as_uri()
                if size[0] < 500:
                    frame.write_text(FRAME.format(width=size[0], height=size[1], part=""))
                    url = frame.as_uri()
                # the DOM after the probe ran, in a window of the size checked
                dom = _run(browser, url, size, ["--dump-dom"]).stdout
                match = re.search(r'<pre id="layout-problems"[^>]*>(.*?)</pre>', dom, re.S)
                report = json.loads(html_unescape(match.group(1))) if match and match.group(1) else None
                if report is None:
                    found[f"{page} at {label}"] = ["the probe did not run"]
                    continue
                found[f"{page} at {label}"] = report["problems"]
                # then full-height screenshots: the same width, a window (or frame) as tall as the page, or parts of
                # it (the probe's output is hidden: the screenshot shows the page as built)
                page_height = int(report["height"])
                taken = []
                for index, top in enumerate(shot_tops(page_height)):
                    height = min(page_height, MAX_SHOT_HEIGHT)
                    name = shot.name if page_height <= MAX_SHOT_HEIGHT else f"{shot.stem}-part{index + 1}.png"
                    part = f"#ste-shot-{top}" if top else ""
                    target = probe.as_uri() + part
                    if size[0] < 500:
                        frame.write_text(FRAME.format(width=size[0], height=height, part=part))
                        target = frame.as_uri()
                    _run(browser, target, (size[0], height), [f"--screenshot={out / name}"])
                    taken.append({"file": name, "top": top})
                shots[f"{page} at {label}"] = {"height": page_height, "shots": taken}
        finally:
            probe.unlink()
            frame.unlink(missing_ok=True)
    (out / "shots.json").write_text(json.dumps(shots, indent=1) + "\n")
    return found


def shot_tops(height: int) -> list[int]:
    """The top of each screenshot of a page ``height`` px tall: 0 alone when it fits in one, else parts of
    MAX_SHOT_HEIGHT that overlap by SHOT_OVERLAP, the last one ending at the page's foot."""
    if height <= MAX_SHOT_HEIGHT:
        return [0]
    step = MAX_SHOT_HEIGHT - SHOT_OVERLAP
    tops = list(range(0, height - MAX_SHOT_HEIGHT, step))
    return [*tops, height - MAX_SHOT_HEIGHT]


if __name__ == "__main__":
    site_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("site")
    out_dir = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(tempfile.mkdtemp(prefix="ste-layout-"))
    results = check(site_dir, out_dir, tuple(sys.argv[3:]) or None)
    for key, problems in results.items():
        print(f"{key}: {'ok' if not problems else '; '.join(problems)}")
    print(f"screenshots: {out_dir}")
    sys.exit(1 if any(results.values()) else 0)
