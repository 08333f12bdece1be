"""The documentation's pages (README.md and the site's docs/**/*.md) and their code blocks,
for the tests that run the code as written (tests/e2e/test_readme*.py, test_docs.py)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def pages() -> list[Path]:
    """README.md, then every page of the site, in name order."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def text() -> str:
    """Every page, one after the other."""
    return "\n".join(page.read_text() for page in pages())


def blocks(language: str = "python") -> list[tuple[Path, str]]:
    """Every ``language`` code block of every page, with its page."""
    return [
        (page, code)
        for page in pages()
        for code in re.findall(rf"^```{language}\n(.*?)^```", page.read_text(), flags=re.S | re.M)
    ]


def block(containing: str, language: str = "python") -> str:
    """The one ``language`` code block of all the pages that contains ``containing``."""
    found = [code for _, code in blocks(language) if containing in code]
    assert len(found) == 1, f"{len(found)} {language} blocks contain {containing!r}"
    return found[0]
