"""The package's layers: what each subpackage may import, the front door (without JAX) and the
namespaces behind it, and the names that moved out of the front door."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
import warnings
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
    own = ("grainpack.index", "grainpack.lazy")
    bad = sorted(m for m in imports_of(path) if not allowed(m, own))
    assert bad == [], f"{path.name} imports {bad}: the index layer is pure index math"


@pytest.mark.parametrize("layer", ["index", "corpus", "curriculum", "reference"])
def test_lower_layers_never_import_the_pipeline_jax_or_orbax(layer):
    for path in (PACKAGE / layer).glob("*.py"):
        for module in imports_of(path):
            top = module.split(".")[0]
            assert top not in ("grain", "jax", "orbax"), f"{path} imports {module}"
            assert not module.startswith(("grainpack.pipeline", "grainpack.jax", "grainpack.orbax"))


# the README's layer table: the grainpack layers each lower layer may import (and every layer
# grainpack/lazy.py, the standard-library helper of the namespaces' lazy exports)
BELOW = {"corpus": ("index",), "curriculum": ("index",), "reference": ("index", "corpus")}


@pytest.mark.parametrize("layer", sorted(BELOW))
def test_lower_layers_import_only_the_layers_the_readme_names(layer):
    own = tuple(f"grainpack.{name}" for name in (layer, *BELOW[layer], "lazy"))
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


HEAVY = ("grain", "jax", "orbax", "tokenizers", "pyarrow", "ray", "obstore")


def test_import_grainpack_loads_neither_grain_jax_nor_orbax():
    code = (
        "import sys, grainpack\n"
        f"loaded = [m for m in {HEAVY} if m in sys.modules]\n"
        "print(loaded)\n"
        "grainpack.make_dataset  # the lazy names still resolve\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# ---- the front door and its namespaces -------------------------------------------------------

# Every name release 0.1.0 exported from `grainpack`: each still resolves there.
RELEASE_0_1_0 = """
    BlockedOrder BucketReport Chain CheckpointRestore CheckpointSave ConfigMismatchError
    CorpusError CorpusExistsError CorpusNotFoundError CorpusWriter LengthBandit LengthBuckets
    LinearRamp MixedStream MixtureBandit MixtureMonitor MixtureWarning PackedCorpus PackedStream
    PerSource PipelineConfig PipelineIterator RateSchedule RepeatCapExceeded Selector
    SequenceSelector SourceAccount Stage StreamArgumentError StreamTooSmall StreamingCorpus
    TokenShardSource UndecidedEpochError VerifyReport build_corpus content_probabilities
    convert_corpus convert_jsonl convert_npy describe_corpus expand global_document_order
    make_data_loader make_dataset make_eval_dataset make_global_batch merge_corpora
    mixture_accounting open_corpus pack_documents prefetch_to_device read_manifest
    selector_report shard_documents_for_rank slot_order splitmix64 target_shares token_premiums
    verify_corpus window_permutation window_shares write_corpus
""".split()  # noqa: SIM905

# Names the front door gained after release 0.1.0.
NEW_IN_THE_FRONT_DOOR = {"ExactOrder", "ProcessesDisagreeError"}

# The names the two specifications give their API (grainpack.<name>, never a warning).
SPECIFICATION_NAMES = {
    "global_document_order",
    "shard_documents_for_rank",
    "pack_documents",
    "PackedCorpus",
    "StreamingCorpus",
    "PackedStream",
    "MixedStream",
    "splitmix64",
}

FRONT_DOOR = set(importlib.import_module("grainpack").__all__)

# name -> module (`grainpack.mixing` is a module, the others packages)
NAMESPACES = {
    name: PACKAGE / name / "__init__.py" if (PACKAGE / name).is_dir() else PACKAGE / f"{name}.py"
    for name in ("corpus", "curriculum", "index", "ingest", "mixing", "pipeline", "reference")
}


def type_checking_imports(path: Path) -> dict[str, str]:
    """name -> module of the ``from M import N as N`` lines under ``if TYPE_CHECKING:``."""
    found: dict[str, str] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.module, ast.unparse(stmt)
                for alias in stmt.names:
                    assert alias.asname == alias.name, f"{ast.unparse(stmt)}: re-export as itself"
                    found[alias.name] = stmt.module
    return found


def test_the_front_door_is_small_and_release_0_1_0_names_all_resolve():
    import grainpack

    assert len(grainpack.__all__) <= 25
    assert list(grainpack.__all__) == sorted(grainpack._FRONT_DOOR)
    tables = [set(grainpack._FRONT_DOOR), set(grainpack._REFERENCE), set(grainpack._MOVED)]
    assert sum(map(len, tables)) == len(set().union(*tables)), "a name in two tables"
    assert set(grainpack._REFERENCE) == SPECIFICATION_NAMES
    assert set().union(*tables) == set(RELEASE_0_1_0) | NEW_IN_THE_FRONT_DOOR
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert [n for n in RELEASE_0_1_0 if getattr(grainpack, n, None) is None] == []


def test_the_type_checkers_see_what_the_tables_export():
    import grainpack

    front = type_checking_imports(PACKAGE / "__init__.py")
    want = {**grainpack._FRONT_DOOR, **dict.fromkeys(grainpack._REFERENCE, "grainpack.reference")}
    assert front == {**want, **dict.fromkeys(grainpack._NAMESPACES, "grainpack")}
    for name, path in NAMESPACES.items():
        namespace = importlib.import_module(f"grainpack.{name}")
        assert type_checking_imports(path) == namespace._EXPORTS, path


@pytest.mark.parametrize("name", sorted(NAMESPACES))
def test_every_namespace_name_resolves_and_is_documented(name):
    import grainpack

    namespace = getattr(grainpack, name)
    assert namespace is importlib.import_module(f"grainpack.{name}")
    assert namespace.__doc__
    assert list(namespace.__all__) == sorted(namespace.__all__)
    for export in namespace.__all__:
        value = getattr(namespace, export)
        assert value is getattr(importlib.import_module(namespace._EXPORTS[export]), export)
        assert inspect.getdoc(value), f"grainpack.{name}.{export} has no docstring"
    assert set(namespace.__all__) <= set(dir(namespace))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        namespace.nope  # noqa: B018


def test_the_front_door_resolves_to_the_namespaces_objects():
    import grainpack

    for name, home in grainpack._FRONT_DOOR.items():
        assert getattr(grainpack, name) is getattr(importlib.import_module(home), name), name
        if home not in ("grainpack.jax", "grainpack.orbax"):  # modules, not namespaces
            assert name in importlib.import_module(home).__all__, name


@pytest.mark.parametrize("name", sorted(set(RELEASE_0_1_0) - SPECIFICATION_NAMES - FRONT_DOOR))
def test_a_moved_name_warns_with_its_new_home_and_is_the_same_object(name):
    import grainpack

    home = grainpack._MOVED[name]
    assert name in importlib.import_module(home).__all__
    message = rf"grainpack\.{name} moved to {home}\.{name}; the old name goes in the next release"
    with pytest.warns(DeprecationWarning, match=message) as caught:
        value = getattr(grainpack, name)
    assert caught[0].filename == __file__  # the warning points at the caller
    assert value is getattr(importlib.import_module(home), name)
    with pytest.warns(DeprecationWarning, match=message):  # every use warns, not only the first
        exec(f"from grainpack import {name}", {})
    assert name not in grainpack.__all__ and name not in dir(grainpack)


@pytest.mark.parametrize("name", sorted(SPECIFICATION_NAMES))
def test_the_specifications_names_resolve_without_a_warning(name):
    import grainpack

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = getattr(grainpack, name)
        exec(f"from grainpack import {name}", {})
    assert value is getattr(grainpack.reference, name)
    assert name in dir(grainpack)


def test_dir_lists_the_front_door_the_specifications_names_and_the_namespaces():
    import grainpack

    names = set(dir(grainpack))
    assert set(grainpack.__all__) | SPECIFICATION_NAMES | set(NAMESPACES) <= names
    assert {"jax", "orbax", "__version__"} <= names
    assert names.isdisjoint(grainpack._MOVED)
    with pytest.raises(AttributeError, match="module 'grainpack' has no attribute 'nope'"):
        grainpack.nope  # noqa: B018


def test_the_namespaces_below_the_pipeline_load_nothing_heavy():
    code = (
        "import sys, grainpack\n"
        "for ns in ('corpus', 'curriculum', 'index', 'ingest', 'reference'):\n"
        "    module = getattr(grainpack, ns)\n"
        "    [getattr(module, name) for name in module.__all__]\n"
        f"print([m for m in {HEAVY} if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
