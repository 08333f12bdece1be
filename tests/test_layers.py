"""The package's layers: what each subpackage may import, and a front door without JAX."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "grainpack"
STDLIB = set(sys.stdlib_module_names)


def imports_of(path: Path) -> set[str]:
    """Top-level names of every module a file imports (absolute imports)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def allowed(module: str, own: tuple[str, ...]) -> bool:
    top = module.split(".")[0]
    return top in STDLIB or top == "numpy" or module.startswith(own)


@pytest.mark.parametrize("path", sorted((PACKAGE / "index").glob("*.py")), ids=lambda p: p.name)
def test_index_imports_numpy_and_the_standard_library_only(path):
    bad = sorted(m for m in imports_of(path) if not allowed(m, ("grainpack.index",)))
    assert bad == [], f"{path.name} imports {bad}: the index layer is pure index math"


@pytest.mark.parametrize("layer", ["index", "corpus", "curriculum", "reference"])
def test_lower_layers_never_import_the_pipeline_jax_or_orbax(layer):
    for path in (PACKAGE / layer).glob("*.py"):
        for module in imports_of(path):
            top = module.split(".")[0]
            assert top not in ("grain", "jax", "orbax"), f"{path} imports {module}"
            assert not module.startswith(("grainpack.pipeline", "grainpack.jax", "grainpack.orbax"))


# the README's layer table: the grainpack layers each lower layer may import
BELOW = {"corpus": ("index",), "curriculum": ("index",), "reference": ("index", "corpus")}


@pytest.mark.parametrize("layer", sorted(BELOW))
def test_lower_layers_import_only_the_layers_the_readme_names(layer):
    own = tuple(f"grainpack.{name}" for name in (layer, *BELOW[layer]))
    for path in (PACKAGE / layer).glob("*.py"):
        bad = [m for m in imports_of(path) if m.startswith("grainpack") and not m.startswith(own)]
        assert bad == [], f"{path} imports {bad}"


def test_the_pipeline_never_imports_the_jax_or_orbax_glue_above_it():
    for path in (PACKAGE / "pipeline").glob("*.py"):
        bad = [m for m in imports_of(path) if m.startswith(("grainpack.jax", "grainpack.orbax"))]
        assert bad == [], f"{path} imports {bad}"


def test_every_public_name_resolves():
    import grainpack

    assert sorted(grainpack.__all__) == list(grainpack.__all__)
    missing = [name for name in grainpack.__all__ if getattr(grainpack, name, None) is None]
    assert missing == []


def test_import_grainpack_loads_neither_grain_jax_nor_orbax():
    code = (
        "import sys, grainpack\n"
        "loaded = [m for m in ('grain', 'jax', 'orbax') if m in sys.modules]\n"
        "print(loaded)\n"
        "grainpack.make_dataset  # the lazy names still resolve\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
