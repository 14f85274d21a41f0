"""The documentation builds with ``mkdocs build --strict`` (offline), and its gallery covers the whole registry."""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path

import pytest

import ste
from tests.helpers import extra_requirements, run_python

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """One build (about 15 s) for the module's tests: pytest-xdist runs a file's tests in one worker."""
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        pytest.importorskip(module)
    directory = tmp_path_factory.mktemp("mkdocs")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "TF_CPP_MIN_LOG_LEVEL": "3", "MPLBACKEND": "Agg"}
    args = ["-m", "mkdocs", "build", "--strict", "--site-dir", directory / "site"]
    done = run_python(args, directory, env=env, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return directory / "site"


def test_every_registry_entry_has_a_generated_page_and_plot(site):
    assert not (ROOT / "docs" / "gallery").exists(), "the gallery is generated at build time, never committed"
    index = (site / "gallery" / "index.html").read_text()
    for name in ste.registry.names():
        png = site / "gallery" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        page = (site / "gallery" / name / "index.html").read_text().replace("<wbr>", "")  # break opportunities
        assert f"{name}.png" in page and name in index
        formula = ste.registry.lookup(name).formula
        assert formula and html.escape(formula, quote=False) in page


def test_gallery_peaks_are_the_computed_ones(site):
    # Independent: sigmoid'(0) = 1/4 at beta = 1; the clipped straight-through is 1 on [-1, 1].
    sigmoid = (site / "gallery" / "sigmoid_surrogate" / "index.html").read_text()
    assert "0.25 at x = 0" in sigmoid
    clipped = (site / "gallery" / "straight_through" / "index.html").read_text()
    assert "1 for x in [-1, 1]" in clipped


def test_layout_in_headless_chromium(site):
    """At 1280×900 and 390×844: no clipped table, no word or number split inside a table cell, no cell of prose set
    one word per line, no code block wider than its box, no wrapped code line at 1280 px (at 390 px none at column 0),
    no copy button over any line of code, the sidebar's sections in view (tests/docs_layout.py). Full-height
    screenshots of every page at both sizes go to STE_LAYOUT_SCREENSHOTS, else beside the built site: build
    artifacts, never committed."""
    from tests.docs_layout import check, chromium, pages

    if chromium() is None:
        pytest.skip("no Chromium to check the layout with (apt-get install chromium)")
    out = Path(os.environ.get("STE_LAYOUT_SCREENSHOTS") or site.parent / "layout")
    problems = {page: found for page, found in check(site, out).items() if found}
    assert not problems, problems
    assert_shots_cover_every_page(out, expected=2 * len(pages(site)))
    # full height: the shot of a long page is taller than the window (900 px; the phone's 844 px)
    shots = json.loads((out / "shots.json").read_text())
    guide = {size: png_height(out / shots[f"guide at {size}"]["shots"][0]["file"]) for size in ("desktop", "phone")}
    assert guide["desktop"] > 3 * 900 and guide["phone"] > 3 * 844, guide


def png_height(path: Path) -> int:
    return int.from_bytes(path.read_bytes()[20:24], "big")  # the IHDR chunk: width, then height


def assert_shots_cover_every_page(out: Path, expected: int) -> None:
    """Every page at every size: its screenshots (one, or parts of a tall page), placed at their tops, cover the page's
    measured height from 0 to its foot with no gap, each PNG as tall as the window it was taken in; where two parts
    overlap they show the same rows of the page (so each part is the page moved up by its top, not its first
    screen again)."""
    import numpy as np

    image = pytest.importorskip("PIL.Image")  # matplotlib's dependency (the docs extra)
    from tests.docs_layout import MAX_SHOT_HEIGHT

    shots = json.loads((out / "shots.json").read_text())
    assert len(shots) == expected, sorted(shots)
    for key, entry in shots.items():
        covered, previous = 0, None
        for shot in sorted(entry["shots"], key=lambda s: s["top"]):
            height = png_height(out / shot["file"])
            assert height == min(entry["height"], MAX_SHOT_HEIGHT), (key, shot, height)
            assert shot["top"] <= covered, f"{key}: a gap above {shot['file']} (covered to {covered} px)"
            covered = max(covered, shot["top"] + height)
            pixels = np.asarray(image.open(out / shot["file"]).convert("L"))
            if previous is not None:
                top, above = previous
                shift = shot["top"] - top
                same = (above[shift:] == pixels[: len(above) - shift]).all(axis=1).mean()
                assert same > 0.9, f"{key}: {shot['file']} matches its overlap with the part above in {same:.0%} rows"
            previous = (shot["top"], pixels)
        assert covered >= entry["height"], f"{key}: shots cover {covered} of {entry['height']} px"


def test_the_nav_links_to_sections_land_on_headings(site):
    """A nav entry that links a section of a page (page/#anchor, not a file: MkDocs does not check it) names a built
    page and one of its headings' ids."""
    links = re.findall(r":\s+([\w-]+)/#([\w-]+)\s*$", (ROOT / "mkdocs.yml").read_text(), flags=re.MULTILINE)
    assert len(links) >= 3, links
    for page, anchor in links:
        built = site / page / "index.html"
        assert built.is_file(), page
        assert re.search(rf'<h[1-6] id="{anchor}"', built.read_text()), (page, anchor)


def test_pages_and_api_reference_are_built(site):
    for page in ("guide", "recipes/activation-gradient", "quantizers", "larq", "tools", "performance", "api"):
        assert (site / page / "index.html").exists(), page
    api = (site / "api" / "index.html").read_text()
    for anchor in (
        "ste.quantizers.Sign",
        "ste.layers.QuantDense",
        "ste.summary",
        "ste.forward",
        "ste.STEFunction",
        "ste.registry.Surrogate",
        "ste.plot",
        "ste.testing.check_gradient",
    ):
        assert f'id="{anchor}"' in api, anchor
    assert ":class:" not in api and ":meth:" not in api  # Sphinx roles are dropped by the hook
    signatures = re.findall(r'doc-signature highlight"><pre>(.*?)</pre>', api, flags=re.S)
    assert any(s.count('<span id="__span') >= 3 for s in signatures), "signatures unformatted: is ruff installed?"
    recipe = (site / "recipes" / "differentiable-mask" / "index.html").read_text()
    assert re.search(r"def.*learn_mask", recipe), "the recipe page includes its script"


def test_readme_docs_command_installs_everything_the_build_imports():
    """A fresh venv with only the docs extra must build: mkdocs, its plugins, and matplotlib for the gallery."""
    readme = (ROOT / "README.md").read_text()
    # The README keeps exactly two command blocks (main example, tests); the docs command is inline prose.
    assert readme.count("```bash") == 2
    command = re.search(r"`([^`]*mkdocs build[^`]*)`", readme).group(1)
    assert '.venv/bin/pip install -e ".[docs]"' in command and ".venv/bin/mkdocs build --strict" in command
    assert {"mkdocs-material", "mkdocstrings", "matplotlib"} <= extra_requirements("docs")


def test_gallery_is_readable(site):
    """Thumbnails at least 240 px wide, each entry over its own width, plateaus as intervals."""
    index = (site / "gallery" / "index.html").read_text()
    widths = [int(w) for w in re.findall(r'<img alt="[^"]*" src="[^"]*\.png" width="(\d+)"', index)]
    assert len(widths) == len(ste.registry.names()) and min(widths) >= 240
    fast = (site / "gallery" / "fast_sigmoid" / "index.html").read_text()
    # 1/(1+25|x|)² falls to half at |x| = (√2 − 1)/25 ≈ 0.0166: 4 half-widths is 0.066, rounded up to 0.08
    assert "over x in [-0.08, 0.08]" in fast
    assert "1 for x in [-0.5, 0.5]" in (site / "gallery" / "boxcar" / "index.html").read_text()
    assert "0 everywhere" in (site / "gallery" / "zero" / "index.html").read_text()
    png = (site / "gallery" / "fast_sigmoid.png").read_bytes()
    assert int.from_bytes(png[16:20], "big") >= 2 * 240  # the image itself is wider than its thumbnail


def test_gallery_overview_gives_the_plots_room(site):
    """Two columns (the entry's facts, its plot) and no table of contents: at a 1280 px window the plots are about
    390 px wide (a six-column table squeezed them to about 110 px and broke names mid-word)."""
    index = (site / "gallery" / "index.html").read_text()
    table = index[index.index("<table>") : index.index("</table>")]
    assert table.count("<th>") == 2
    assert re.search(r'<div class="md-sidebar md-sidebar--secondary"[^>]*data-md-type="toc" hidden>', index)
    widths = [int(w) for w in re.findall(r'<img alt="[^"]*" src="[^"]*\.png" width="(\d+)"', index)]
    assert min(widths) >= 400


def test_no_restructuredtext_markup_on_the_gallery_pages(site):
    for page in (site / "gallery").glob("*/index.html"):
        text = page.read_text()
        assert "``" not in text and ":class:" not in text and ":func:" not in text, page


def test_code_and_text_blocks_wrap(site):
    css = (site / "stylesheets" / "ste.css").read_text()
    assert ".md-typeset .highlight pre > code {" in css and "pre-wrap" in css
    page = (site / "quantizers" / "index.html").read_text()
    assert "stylesheets/ste.css" in page
    assert 'class="language-python highlight"' in page and 'class="language-text highlight"' in page
    assert '<span id="__span-0-1">' in page  # one span per line: a wrapped line hangs under its start
    text = re.search(r'<div class="language-text highlight">.*?</pre>', page, flags=re.S).group(0)
    assert "<wbr>" in text  # a text block's line breaks after `.`, `(`, `,` ... as code does


# A page that breaks each rule of tests/docs_layout.py once, in Material's markup: a table cell squeezed by
# overflow-wrap: anywhere (words split mid-token), a code block that scrolls, a copy button over its second line, a
# table wider than the column, a line of code that wraps, and a table (in a scroll box) whose first column alone is
# wider than the column
BROKEN_PAGE = """<!doctype html><html><head><style>
.md-typeset {{ width: 300px; font: 16px/1.4 sans-serif; }} .md-typeset td {{ overflow-wrap: anywhere; }}
.highlight {{ position: relative; }} pre > code {{ display: block; overflow: auto; white-space: pre; }}
.wrapping pre > code {{ overflow: visible; white-space: pre-wrap; }} .scroll {{ overflow-x: auto; }}
.md-code__nav {{ position: absolute; top: 0; right: 0; }}
.md-code__button {{ display: block; width: 2em; height: 3em; }}
</style></head><body><div class="md-content"><article class="md-typeset"><h2 id="table">t</h2>
<div><table><tr><th>a</th><th>b</th></tr><tr><td>{long}</td><td>{long}</td></tr></table></div>
<h2 id="code">c</h2><div class="language-text highlight"><pre><nav class="md-code__nav">
<button class="md-code__button" data-md-type="copy"></button></nav><code>short
{wide}</code></pre></div>
<h2 id="wide">w</h2><table style="width: 900px"><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>2</td></tr></table>
<h2 id="wrapped">l</h2><div class="language-python highlight wrapping"><pre><code><span id="__span-1-1">{wide}</span>
</code></pre></div>
<h2 id="hidden">h</h2><div class="scroll"><table><tr><th style="white-space: nowrap">{wide}</th><th>b</th></tr>
<tr><td>1</td><td>2</td></tr></table></div></article></div></body></html>
"""


def test_layout_check_fails_on_every_rule_it_has(tmp_path):
    """The check itself, on a page made to break it: it must name each problem (a check that cannot fail would pass
    every page): split words, cut code and a covered line at both sizes; a too-wide table and a wrapped code line on
    the desktop; a first column out of view on the phone."""
    from tests.docs_layout import check, chromium

    if chromium() is None:
        pytest.skip("no Chromium to check the layout with (apt-get install chromium)")
    (tmp_path / "site" / "bad").mkdir(parents=True)
    long, wide = "keras_int8_tensorflow_lite_530933", " ".join(["tensorflow-cpu==2.21.0"] * 6)
    (tmp_path / "site" / "bad" / "index.html").write_text(BROKEN_PAGE.format(long=long, wide=wide))
    results = check(tmp_path / "site", tmp_path / "shots", ("bad",))
    found, phone = results["bad at desktop"], results["bad at phone"]
    assert any(p.startswith("word split in a table cell near #table") for p in found), found
    assert any(p.startswith("code block") and "near #code" in p for p in found), found
    assert any(p.startswith('copy button over "tensorflow-cpu==2.21.0"') for p in found), found
    assert any(p.startswith("table 900 px wide in a 300 px column near #wide") for p in found), found
    assert any(p.startswith("wrapped code line near #wrapped") for p in found), found
    assert any(p.startswith("first column") and "out of view" in p and "near #hidden" in p for p in phone), phone


def test_sphinx_roles_become_links_to_the_api_entries(site):
    api = (site / "api" / "index.html").read_text()
    links = re.findall(r'<a href="#([^"]+)"><code>', api)
    assert len(links) >= 20
    ids = set(re.findall(r'\bid="([^"]+)"', api))
    assert set(links) <= ids  # every link lands on an entry of the page


def test_numbered_sections_are_in_order():
    for page in (ROOT / "docs").rglob("*.md"):
        numbers = [int(n) for n in re.findall(r"^#+ (\d+)\. ", page.read_text(), flags=re.MULTILINE)]
        assert numbers == sorted(numbers), f"{page.name}: sections {numbers}"


def test_cross_references_in_prose_are_links():
    """A reference to another page or section is a link, not a quoted title or a file path in parentheses."""
    for page in (ROOT / "docs").rglob("*.md"):
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)  # code blocks may name files
        assert not re.search(r"\(docs/[\w-]+\.md", text), page.name
        assert not re.search(r'see "[A-Z][^"]+"', text), page.name
        assert not re.search(r'"[A-Z][^"]+"\s+(below|above)', text), page.name


def test_every_recipe_is_in_the_recipes_section_of_the_nav():
    """docs/recipes/*.md are listed together under one "Recipes" section of mkdocs.yml's nav, and nowhere else (a
    recipe left out of the nav is built but found by no reader)."""
    yaml = pytest.importorskip("yaml")  # mkdocs's own dependency (the docs extra)
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    sections = [entry["Recipes"] for entry in nav if isinstance(entry, dict) and "Recipes" in entry]
    assert len(sections) == 1, "one Recipes section in the nav"
    listed = [
        path
        for item in sections[0]
        for value in item.values()
        for path in ([value] if isinstance(value, str) else [p for sub in value for p in sub.values()])
    ]
    on_disk = sorted(f"recipes/{page.name}" for page in (ROOT / "docs" / "recipes").glob("*.md"))
    assert sorted(path for path in listed if path.endswith(".md")) == on_disk
    # and every recipe or troubleshooting section of another page, linked as page/#anchor
    sections_listed = [path for path in listed if not path.endswith(".md")]
    headings = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        for heading in re.findall(r"^#+ ((?:Recipe|Troubleshooting): .*)$", page.read_text(), flags=re.MULTILINE):
            headings.append((page.stem, heading))
    assert len(headings) >= 3 and len(sections_listed) == len(headings), (sections_listed, headings)
    for page, heading in headings:
        words = re.sub(r"[^\w\s-]", "", heading.lower()).split()
        assert f"{page}/#{'-'.join(words)}" in sections_listed, (page, heading)
    elsewhere = [str(entry) for entry in nav if "recipes/" in str(entry) and entry != {"Recipes": sections[0]}]
    assert not elsewhere, elsewhere
