"""The files a visitor reads first: the license the metadata claims, the changelog, the README's two commands."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_license_is_the_apache_text_the_metadata_claims():
    pyproject = (ROOT / "pyproject.toml").read_text()  # tomllib is Python 3.11+; the project supports 3.10
    assert re.search(r'^license = \{ text = "Apache-2.0" \}$', pyproject, flags=re.MULTILINE)
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
