"""The files a visitor reads first: the license the metadata claims, the changelog, the README's two commands."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import pyproject

ROOT = Path(__file__).resolve().parents[1]


def test_license_is_the_apache_text_the_metadata_claims():
    assert pyproject()["project"]["license"] == {"text": "Apache-2.0"}
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text and len(text) > 10_000  # the whole text, not a pointer to it


def test_changelog_has_an_unreleased_section_for_this_version():
    from ste._version import __version__

    text = (ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    assert headings and headings[0].startswith("[Unreleased]") and __version__ in headings[0]
    assert "### Added" in text


def test_readme_keeps_two_commands_and_says_what_the_tests_cost():
    readme = (ROOT / "README.md").read_text()
    assert readme.count("```bash") == 2 and "<!-- main-command -->" in readme and "<!-- test-command -->" in readme
    after = readme.split("<!-- test-command -->", 1)[1].split("## ", 1)[0]
    assert re.search(r"downloads about \d+ MiB", after) and re.search(r"take about \d+ minutes", after)


#: an internal issue number as the project's own pages must not cite it ("issue 21", "(issues 13 and 18)",
#: "issue-21"); another project's issue is written with its "#" and a link ("TFMOT issue #824") and is not matched
INTERNAL_ISSUE = re.compile(r"\bissues?[\s-]+\d+", flags=re.IGNORECASE)


def _user_pages() -> list[Path]:
    """The README, the docs, the examples, and the library's and benchmarks' code: their docstrings are the API
    reference and their comments what a reader of the source or a benchmark's output sees."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "docs").rglob("*.py"))]
    for folder in ("examples", "ste", "benchmarks"):
        pages += sorted((ROOT / folder).rglob("*.py"))
    return [page for page in pages if page.is_file()]


def test_the_pattern_finds_internal_issue_numbers_only():
    for text in ("(issue 21)", "Issue 13's item 6", "the issue-21 benchmark", "issues 18\nand 19"):
        assert INTERNAL_ISSUE.search(text), text
    for text in ("TFMOT issue #824", "its issues #638, #942", "keras-team/keras#20585", "the issue's goals"):
        assert not INTERNAL_ISSUE.search(text), text


def test_no_user_page_cites_an_internal_issue_number():
    """Docs pages, the README and the examples speak to users: an internal issue number points to nothing they can
    open, and the story of the work belongs in git and CHANGELOG.md."""
    pages = _user_pages()
    assert ROOT / "docs" / "performance.md" in pages and ROOT / "examples" / "quickstart.py" in pages
    assert ROOT / "ste" / "__init__.py" in pages and ROOT / "benchmarks" / "run.py" in pages
    found = [
        f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}: {match.group(0)!r}"
        for page in pages
        for text in [page.read_text()]
        for match in INTERNAL_ISSUE.finditer(text)
    ]
    assert not found, "internal issue numbers in user-facing pages:\n" + "\n".join(found)


def test_the_home_page_install_table_lists_every_extra():
    """docs/index.md's install table has one row per extra of pyproject.toml, no more."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    section = pyproject.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    extras = set(re.findall(r"^([\w-]+) = \[", section, flags=re.MULTILINE))
    assert {"tensorflow", "deploy", "litert", "nir", "test"} <= extras
    page = (ROOT / "docs" / "index.md").read_text()
    table = page.split("## Install", 1)[1]
    rows = set(re.findall(r"^\| `([\w-]+)` \|", table, flags=re.MULTILINE))
    assert rows == extras


def test_the_performance_page_stays_a_user_page_of_at_most_450_lines():
    """docs/performance.md holds the method, how to reproduce and one current table per benchmark; earlier runs and
    notes on the work live in git and CHANGELOG.md, so the page does not grow with the project's history."""
    lines = (ROOT / "docs" / "performance.md").read_text().splitlines()
    assert len(lines) <= 450, f"docs/performance.md has {len(lines)} lines; at most 450"


def test_the_performance_page_quotes_the_larq_figures_of_its_table():
    """The larq ratios quoted in the summary, the targets and the prose of docs/performance.md are the generated
    side-by-side table's (one run), not a figure from another run."""
    page = (ROOT / "docs" / "performance.md").read_text()
    row = r"^\| (on|off) \| ({}) \| [^|]+\| [^|]+\| ([\d.]+)× \([^)]*\) \| ([\d.]+)× "
    table = {}
    for net in ("ste, ste BN", "ste, plain, ste BN"):
        for setting, _, time, peak in re.findall(row.format(re.escape(net)), page, flags=re.MULTILINE):
            table[net, setting] = time, peak
    assert len(table) == 4, table
    (t_on, p_on), (t_off, p_off) = table["ste, ste BN", "on"], table["ste, ste BN", "off"]
    (pt_on, pp_on), (pt_off, pp_off) = table["ste, plain, ste BN", "on"], table["ste, plain, ste BN", "off"]
    glance = re.search(r"^\| binarized residual net against larq.*$", page, flags=re.MULTILINE).group(0)
    assert f"time {t_on}× / {t_off}×, peak memory {p_on}× / {p_off}×" in glance, glance
    assert f"time {pt_on}× / {pt_off}×, peak {pp_on}× / {pp_off}×" in glance, glance
    prose = " ".join(page.split("**Time or memory: the bits.**", 1)[1].split("\n\n", 1)[0].split())
    assert f"{p_on}× / {p_off}× larq's" in prose and f"(step time {t_on}× / {t_off}× larq's)" in prose, prose
    assert f"step time {pt_on}× / {pt_off}× larq's, peak {pp_on}× / {pp_off}×" in prose, prose
    # a target row on the larq comparison gives the table's figure for its oneDNN setting (on where it names none)
    for what, setting, measured in re.findall(
        r"^\| `ste, ste BN` (peak memory|step time) ≤[^|]*larq's(?:, oneDNN (on|off))?[^|]*\| ([\d.]+)×", page, re.M
    ):
        time, peak = table["ste, ste BN", setting or "on"]
        assert measured == (peak if what == "peak memory" else time), (what, setting, measured)
