"""The documentation site (mkdocs.yml, docs/): it builds with warnings as errors (a broken
link, anchor or cross-reference fails), its API reference documents every public name, every
Python block of the README and the site is run by a test."""

from __future__ import annotations

import ast
import doctest
import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from doc_pages import DOCS, README, ROOT, blocks

import grainpack as gp

API = DOCS / "api"
NAMESPACES = (
    "corpus",
    "ingest",
    "curriculum",
    "mixing",
    "reference",
    "index",
    "pipeline",
    "jax",
    "orbax",
)


def public_names(namespace: str) -> dict[str, str]:
    """name -> the identifier of the object (its defining module's path), for ``namespace``'s
    ``__all__``; for a module without one (gp.jax, gp.orbax), its own public functions and
    classes."""
    module = importlib.import_module(f"grainpack.{namespace}")
    table = getattr(module, "_EXPORTS", None)
    if table is not None:
        return {name: f"{table[name]}.{name}" for name in module.__all__}
    tree = ast.parse(Path(module.__file__).read_text())
    return {
        node.name: f"{module.__name__}.{node.name}"
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith("_")
    }


def directives(page: Path) -> set[str]:
    """The identifiers that ``page`` renders (mkdocstrings' ``::: identifier``)."""
    return set(re.findall(r"^::: (\S+)$", page.read_text(), flags=re.M))


@pytest.mark.slow
def test_the_site_builds_with_warnings_as_errors(tmp_path):
    site = tmp_path / "site"
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # Material's banner about MkDocs 2
    )
    assert build.returncode == 0, build.stdout + build.stderr
    assert "WARNING" not in build.stderr, build.stderr
    assert (site / "api" / "grainpack" / "index.html").is_file()


def test_every_name_of_the_front_door_is_rendered_on_its_page():
    rendered = directives(API / "grainpack.md")
    home = {name: namespace.rpartition(".")[2] for name, namespace in gp._FRONT_DOOR.items()}
    missing = [n for n in gp.__all__ if public_names(home[n])[n] not in rendered]
    assert missing == [], f"not on docs/api/grainpack.md: {missing}"


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_every_public_name_of_a_namespace_is_documented_on_its_page(namespace):
    # rendered there, or linked there to where the front door's page renders it
    page = (API / f"grainpack.{namespace}.md").read_text()
    rendered = set().union(*(directives(p) for p in API.glob("*.md")))
    missing = [
        name
        for name, identifier in public_names(namespace).items()
        if identifier not in rendered
        or (f"::: {identifier}\n" not in page and f"[`{name}`][{identifier}]" not in page)
    ]
    assert missing == [], f"grainpack.{namespace}: not documented on its page: {missing}"


def test_every_python_block_of_the_pages_is_run_by_a_test():
    # tests/e2e/test_readme*.py run each block they find by block("what it contains");
    # tests/test_orbax.py runs examples/train_loop.py, which test_readme.py compares.
    calls = [
        node
        for test in sorted((ROOT / "tests" / "e2e").glob("test_readme*.py"))
        for node in ast.walk(ast.parse(test.read_text()))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "block"
    ]
    markers = {
        call.args[0].value
        for call in calls
        if isinstance(call.args[0], ast.Constant) and len(call.args) == 1
    }
    example = (ROOT / "examples" / "train_loop.py").read_text()
    unrun = [
        f"{page.relative_to(ROOT)}: {code.splitlines()[0]}"
        for page, code in blocks()
        if code != example and not any(marker in code for marker in markers)
    ]
    assert unrun == [], (
        f"Python blocks no test runs (run them in tests/e2e/test_readme.py): {unrun}"
    )


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docstring_extension_reads_examples_and_roles():
    module = _module(DOCS / "griffe_docstrings.py")
    assert doctest.testmod(module).failed == 0
    link = {"grainpack.make_dataset": "grainpack.pipeline.dataset.make_dataset"}.get
    assert module.markdown("See :func:`~grainpack.make_dataset`.", link) == (
        "See [`make_dataset`][grainpack.pipeline.dataset.make_dataset]."
    )
    assert module.markdown(":class:`grainpack.Unknown`", link) == "`grainpack.Unknown`"


@pytest.mark.parametrize(
    ("page", "target", "path"),
    [
        ("index.md", "../notebooks/quickstart.ipynb", "notebooks/quickstart.ipynb"),
        ("concepts/packing.md", "../../examples/train_loop.py", "examples/train_loop.py"),
        ("index.md", "api/grainpack.md", None),  # inside docs/: MkDocs checks it
        ("index.md", "https://github.com/google/grain", None),
    ],
)
def test_the_hooks_find_links_that_leave_the_docs_folder(page, target, path):
    assert _module(DOCS / "hooks.py")._outside(page, target) == path


def github_anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the headings of ``page`` (MkDocs' toc gives the same here)."""
    prose = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    headings = re.findall(r"^#+ (.*)$", prose, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def test_the_readme_is_a_five_minute_page_that_links_into_the_site():
    # issue 38: what it is, the two commands, a training loop, the table against the peers,
    # and links into the site, in at most 300 lines
    text = README.read_text()
    assert len(text.splitlines()) <= 300
    headings = re.findall(r"^## (.*)$", text, flags=re.M)
    assert headings == ["Quickstart", "A training loop", "How it compares", "Documentation"]
    assert 'pip install -e ".[test]" && python -m pytest' in text
    links = re.findall(r"\]\(((?!https?:)[^)#\s]+)(?:#([^)\s]+))?\)", text)
    site = {target for target, _ in links if target.startswith("docs/")}
    pages = {f"docs/{p.relative_to(DOCS).as_posix()}" for p in DOCS.glob("*.md")}
    assert pages - {"docs/index.md"} <= site
    broken = [
        f"{target}#{anchor}" if anchor else target
        for target, anchor in links
        if not (ROOT / target).exists() or (anchor and anchor not in github_anchors(ROOT / target))
    ]
    assert broken == [], f"README links to nothing: {broken}"
