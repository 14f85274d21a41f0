"""MkDocs hook: the surrogate gallery, generated from ``ste.registry`` on every build (never drawn by hand).

For each name in ``ste.registry.names()`` it writes ``gallery/<name>.md`` (formula, defaults, computed peak,
reference, docstring) and ``gallery/<name>.png`` (``ste.plot``: primitive above derivative), plus
``gallery/index.md`` with one row per entry. Only the overview is in the navigation: an entry's page links back
to it, so that on an entry's page the sidebar lists the sections, not sixteen entries that push them out of view.
It also turns the Sphinx roles that the docstrings carry (``:class:`ste.STEError```) into links to the API
reference's entries (or drops the role where the page has no such entry).
Everything is in memory (``File.generated``); nothing is written into ``docs/``.
"""

from __future__ import annotations

import io
import os
import re
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's ste, also without installing it

GALLERY_TITLE = "Surrogate gallery"
_ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|exc|obj):<code>([^<]+)</code>")
_ID = re.compile(r'\bid="([^"]+)"')
# a highlighted block of code (not a language-text one, which keeps its columns), and in it the punctuation tokens
# after which a long line may wrap: `.`, `(`, `[`, `{`, `,`, `=`, `:` (and runs of them, `([`)
_CODE_BLOCK = re.compile(r'(<div class="language-(?!text)[^"]*highlight">.*?</pre>)', re.S)
_BREAK_AFTER = re.compile(r'(<span class="(?:o|p)">[.(\[{,=:]+</span>)')
_TEXT_SPAN = re.compile(r'(<span class="(?:c|s)\w*">)([^<]*)(</span>)')  # a comment or a string: a break inside
# a table cell, the code spans in it, and the characters after which such a span may wrap
_CELL = re.compile(r"(<td[^>]*>.*?</td>)", re.S)
_CELL_CODE = re.compile(r"(<code>)(.*?)(</code>)", re.S)
_CODE_BREAK = re.compile(r"([(\[{,=/]|\.(?!\d))(?=[^\s<)\]}])")  # not inside a number (1.0)
_TAG = re.compile(r"(<[^>]*>)")  # a tag inside a code span (mkdocstrings' <autoref ...>): never broken into
_FIGSIZE = (5.6, 3.6)
_DPI = 100  # 560 x 360 px on the entry's page
_THUMBNAIL_WIDTH = 448  # px in the overview's plot column (at least 240, so that each curve's shape reads)


def _entries() -> list[Any]:
    import ste
    from ste._tools._catalog import describe

    return [describe(name) for name in ste.registry.names()]


def _range(name: str) -> tuple[float, float]:
    """The x range ste.plot chooses for the entry at its defaults: the peak ± 4 half-widths at half-maximum."""
    import ste
    from ste._tools._plot import auto_range

    return auto_range(ste.registry.get(name))


def _png(name: str) -> bytes:
    import ste

    figure = ste.plot(name, x=_range(name), points=801, dtype="float64", figsize=_FIGSIZE, dpi=_DPI)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=_DPI)
    return buffer.getvalue()


def _markdown(doc: str) -> str:
    """A docstring as Markdown: reStructuredText's ``code`` is Markdown's `code`."""
    return doc.replace("``", "`")


def _cell(text: str) -> str:
    return text.replace("|", "\\|") if text else "-"


def _entry_page(info: Any) -> str:
    call = ", ".join(f"{key}={value!r}" for key, value in info.parameters.items())
    spec_args = f", {call}" if call else ""
    peak = info.peak.describe() if info.peak is not None else "- (the entry needs parameters)"
    lines = [
        f"# `{info.name}`",
        "",
        f"One entry of the [{GALLERY_TITLE}](index.md), which shows every entry side by side.",
        "",
        "| | |",
        "|---|---|",
        f"| derivative d(x) | `{_cell(info.formula)}` |",
        f"| parameters (defaults) | `{_cell(info.parameter_text())}` |",
        f"| peak of d (computed at the defaults) | {peak} |",
        f"| primitive P with P' = d | {'yes' if info.has_primitive else 'no'} |",
        f"| reference | {_cell(info.reference)} |",
        "",
        f"![{info.name}: primitive and derivative]({info.name}.png)",
        "",
        "Drawn by `ste.plot` from the code at the defaults"
        + (": the primitive above, its derivative below" if info.has_primitive else ": the derivative")
        + ", over x in [{:g}, {:g}] (the peak ± 4 half-widths at half-maximum; (−3, 3) when d has no peak).".format(
            *_range(info.name)
        ),
        "",
        "## Use it",
        "",
        "```python",
        "import ste, tensorflow as tf",
        "",
        f'op = ste.forward(tf.sign).backward("{info.name}"{spec_args})',
        f'surrogate = ste.registry.get("{info.name}"{spec_args})',
        "```",
        "",
        "## Docstring",
        "",
        _markdown(info.doc) or "(none)",
        "",
    ]
    return "\n".join(lines)


def _index_page(entries: list[Any]) -> str:
    lines = [
        "---",
        "hide: [toc]  # the plots take the table of contents' column",
        "---",
        "",
        f"# {GALLERY_TITLE}",
        "",
        "Every entry of `ste.registry`, generated from the code when the documentation is built: the derivative"
        " d(x) a rule built from the entry uses (its VJP is `dy · d(x)`), the defaults, the peak of d computed on a"
        " grid, the reference, and a plot of the primitive P (where one exists, P' = d) above d, each over a range"
        " chosen from its own width (the peak ± 4 half-widths at half-maximum): mind the x axis when comparing."
        " Print the same"
        " from the shell with `python -m ste list` and `python -m ste show NAME`.",
        "",
        'The same name means different functions across libraries ("SuperSpike" is 1/(1+k|x|)² in snnTorch and'
        " Norse, α/(|x|+1)² in SpikingJelly), and defaults' peaks differ by more than an order of magnitude: pick an"
        " entry by its formula and plot, not by its name.",
        "",
        "| entry | plot: primitive above, derivative below |",
        "|---|---|",
    ]
    for info in entries:
        peak = info.peak.describe() if info.peak is not None else "-"
        entry = "<br>".join(
            [
                f"[`{info.name}`]({info.name}.md)",
                f"d(x) = `{_cell(info.formula)}`",
                f"defaults: `{_cell(info.parameter_text())}`",
                f"peak: {peak}",
                _cell(info.reference),
            ]
        )
        lines.append(f'| {entry} | ![{info.name}]({info.name}.png){{ width="{_THUMBNAIL_WIDTH}" }} |')
    lines.append("")
    return "\n".join(lines)


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File, InclusionLevel

    entries = _entries()
    files.append(File.generated(config, "gallery/index.md", content=_index_page(entries)))
    for info in entries:
        # Not in the navigation: the active page's section opens in the sidebar, and sixteen entries there pushed
        # the sections below out of view at 1280x900. The overview links every entry, and each entry links back.
        page = _entry_page(info)
        files.append(
            File.generated(config, f"gallery/{info.name}.md", content=page, inclusion=InclusionLevel.NOT_IN_NAV)
        )
        files.append(File.generated(config, f"gallery/{info.name}.png", content=_png(info.name)))
    return files


def on_page_content(html: str, **kwargs: Any) -> str:
    """Docstrings use Sphinx roles (:class:`ste.STEError`); mkdocstrings renders the code span. The role becomes a
    link to the object's entry when the page has one (the API reference), else it is dropped."""
    ids = set(_ID.findall(html))

    def link(match: re.Match[str]) -> str:
        code = f"<code>{match.group(1)}</code>"
        target = match.group(1).strip().lstrip("~.").removesuffix("()")
        anchors = [target] if target in ids else [i for i in ids if i.endswith(f".{target}")]
        if len(anchors) == 1:  # the entry itself, or the only one of that name (QuantDense: ste.layers.QuantDense)
            return f'<a href="#{anchors[0]}">{code}</a>'
        if os.environ.get("STE_DOCS_ROLES"):
            print("unresolved role:", match.group(0), file=sys.stderr)
        return code

    return _break_opportunities(_ROLE.sub(link, html))


def _break_opportunities(html: str) -> str:
    """A code line too long for the column wraps after a `.`, `(`, `,` or `=` token, or after such a character in a
    comment or a string (``<wbr>``, which copying ignores), never inside an identifier (``quantize_mo|del``):
    stylesheets/ste.css breaks a word only where it is longer than a whole line."""

    def text(match: re.Match[str]) -> str:  # a comment's or a string's text: the same punctuation, inside the token
        return match.group(1) + _text_breaks(match.group(2)) + match.group(3)

    def block(match: re.Match[str]) -> str:
        return _TEXT_SPAN.sub(text, _BREAK_AFTER.sub(r"\1<wbr>", match.group(1)))

    html = _CODE_BLOCK.sub(block, html)

    def cell(match: re.Match[str]) -> str:  # code in a table cell: the same, so that a table fits its column
        return _CELL_CODE.sub(lambda c: c.group(1) + _text_breaks(c.group(2)) + c.group(3), match.group(1))

    return _CELL.sub(cell, html)


def _text_breaks(code: str) -> str:
    """``<wbr>`` after each `.`, `(`, `,`, `=`, `/` ... of ``code``'s text that more text follows, not in its tags."""
    return "".join(part if part.startswith("<") else _CODE_BREAK.sub(r"\1<wbr>", part) for part in _TAG.split(code))
