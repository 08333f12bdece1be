"""The package's structure: no import circle, the write side apart, a thin CLI."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "grainpack"
MODULES = {
    ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): path
    for path in PACKAGE.rglob("*.py")
}
OPTIONAL = ("tokenizers", "sentencepiece", "tiktoken", "pyarrow", "zstandard", "ray", "obstore")
# the remote extra (obstore) is the read side's: only its remote modules import it
OPTIONAL_HOMES = {"obstore": ("grainpack.corpus.remote", "grainpack.corpus.remote_client")}


def imports_of(path: Path) -> set[str]:
    """Every module a file imports at run time, at any depth (lazy imports inside functions
    included; the ``if TYPE_CHECKING:`` blocks that only type checkers read left out)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            node.body = []
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def graph() -> dict[str, set[str]]:
    """grainpack module -> the grainpack modules it imports (``from a import b`` counts as
    importing the module ``a.b`` where that is one, else ``a``)."""
    return {name: {m for m in imports_of(path) if m in MODULES} for name, path in MODULES.items()}


def test_the_module_graph_has_no_circle():
    edges = graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for target in sorted(edges[name]):
            if target == name or target.startswith(f"{name}.") or name.startswith(f"{target}."):
                continue  # a package and its own modules (lazy tables of namespaces)
            if state.get(target) == 1:
                raise AssertionError(" -> ".join([*path, name, target]))
            if target not in state:
                visit(target, [*path, name])
        state[name] = 2

    for name in sorted(edges):
        if name not in state:
            visit(name, [])


@pytest.mark.parametrize("layer", ["index", "corpus"])
def test_the_read_side_never_imports_the_write_side_the_pipeline_or_the_cli(layer):
    above = ("grainpack.ingest", "grainpack.pipeline", "grainpack.cli", "grainpack.bench")
    for name, path in MODULES.items():
        if name.startswith(f"grainpack.{layer}"):
            bad = sorted(m for m in imports_of(path) if m.startswith(above))
            assert bad == [], f"{name} imports {bad}"


def test_the_write_side_imports_only_the_read_side_below_it():
    allowed = (
        "grainpack.index",
        "grainpack.corpus",
        "grainpack.ingest",
        "grainpack.processes",
        "grainpack.lazy",
    )
    for name, path in MODULES.items():
        if name.startswith("grainpack.ingest"):
            own = [m for m in imports_of(path) if m.startswith("grainpack")]
            bad = sorted(m for m in own if not m.startswith(allowed))
            assert bad == [], f"{name} imports {bad}"


def test_optional_dependencies_are_imported_only_by_the_write_side():
    for name, path in MODULES.items():
        if not name.startswith(("grainpack.ingest", "grainpack.bench")):
            bad = sorted(
                m
                for m in imports_of(path)
                if m.split(".")[0] in OPTIONAL
                and name not in OPTIONAL_HOMES.get(m.split(".")[0], ())
            )
            assert bad == [], f"{name} imports {bad}: the text and ray extras belong to ingest/"


@pytest.mark.parametrize("path", sorted((PACKAGE / "cli").glob("*.py")), ids=lambda p: p.name)
def test_no_cli_module_is_over_400_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= 400, f"{path.name}: {lines} lines; the CLI parses, calls the library, prints"
