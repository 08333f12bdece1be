"""MkDocs hooks of the documentation site (mkdocs.yml ``hooks:``): links to the repository.

The pages link files of the repository outside ``docs/`` as GitHub resolves them, relative
to the page (``../notebooks/quickstart.ipynb``, ``../examples/train_loop.py``). MkDocs only
knows the files under ``docs/``, so such a link is checked here instead: a target that does
not exist, or a Markdown file (``README.md``: the site has its text), is a warning (an error
under ``strict``); a file is copied into the site under ``repository/`` and the link pointed
at the copy; a folder's link becomes its text.

A pipe inside code in a table cell is written ``\\|`` (GitHub's table syntax), which
Python-Markdown leaves as is: the cells show ``|``.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
COPIES = "repository"
log = logging.getLogger("mkdocs.hooks.repository_links")
# [text](target) and [text](target#anchor); not images, not reference definitions
_LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s#]+)(?P<anchor>#[^)\s]*)?\)")


def _outside(page_uri: str, target: str) -> str | None:
    """The repository path of a relative link that leaves ``docs/``, else ``None``."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
        return None
    path = posixpath.normpath(posixpath.join("docs", posixpath.dirname(page_uri), target))
    return None if path.startswith("docs/") or path == "docs" else path


def _links(config: Any) -> set[str]:
    docs = Path(config.docs_dir)
    return {
        path
        for page in docs.rglob("*.md")
        for match in _LINK.finditer(page.read_text())
        if (path := _outside(page.relative_to(docs).as_posix(), match["target"])) is not None
    }


def on_files(files: Files, config: Any) -> Files:
    for path in sorted(_links(config)):
        if (ROOT / path).is_file() and not path.endswith(".md"):
            uri = f"{COPIES}/{path}"
            files.append(File.generated(config, uri, abs_src_path=str(ROOT / path)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    def rewrite(match: re.Match[str]) -> str:
        path = _outside(page.file.src_uri, match["target"])
        if path is None:
            return match[0]
        if (ROOT / path).is_dir():
            return match["text"]
        if path.endswith(".md"):  # a copy would be rendered as a page of the site
            log.warning(
                "Doc file '%s' links '%s': link the site's page that holds that text instead",
                page.file.src_uri,
                match["target"],
            )
            return match[0]
        if not (ROOT / path).is_file():
            log.warning(
                "Doc file '%s' links '%s', which is not in the repository (%s)",
                page.file.src_uri,
                match["target"],
                path,
            )
            return match[0]
        copy = posixpath.relpath(f"{COPIES}/{path}", posixpath.dirname(page.file.src_uri) or ".")
        return f"[{match['text']}]({copy}{match['anchor'] or ''})"

    return _LINK.sub(rewrite, markdown)


def on_page_content(html: str, page: Any, config: Any, files: Files) -> str:
    return re.sub(r"<td>.*?</td>", lambda cell: cell[0].replace("\\|", "|"), html, flags=re.S)
