"""Which kernels run: numba's compiled ones when it imports, else numpy's (None)."""

from __future__ import annotations

import sys
import types

import pytest

from grainpack.pipeline import fast


@pytest.fixture(autouse=True)
def _fresh_lookup():
    fast.kernels.cache_clear()
    yield
    fast.kernels.cache_clear()


def test_with_numba_the_compiled_kernels_are_used():
    pytest.importorskip("numba")
    kernels = fast.kernels()
    assert kernels is not None and callable(kernels.gather) and callable(kernels.expand)


def test_without_numba_numpy_is_used(monkeypatch):
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba: ModuleNotFoundError
    monkeypatch.delitem(sys.modules, "grainpack.pipeline.compiled", raising=False)
    assert fast.kernels() is None


def test_a_numba_that_does_not_import_warns_and_is_not_used(monkeypatch):
    # numba's own check, for example: "Numba needs NumPy 2.3 or less. Got NumPy 2.4."
    broken = types.ModuleType("numba")
    monkeypatch.setitem(sys.modules, "numba", broken)  # from numba import types: ImportError
    monkeypatch.delitem(sys.modules, "grainpack.pipeline.compiled", raising=False)
    with pytest.warns(UserWarning, match="numba is installed but does not import"):
        assert fast.kernels() is None


class _Raising:
    """A module finder whose numba import raises ``error`` (a broken install)."""

    def __init__(self, error):
        self.error = error

    def find_spec(self, name, path=None, target=None):
        if name == "numba" or name.startswith("numba."):
            raise self.error
        return None


@pytest.mark.parametrize(
    "error",
    [
        OSError("Could not find/load shared object file 'libllvmlite.so'"),
        ModuleNotFoundError("No module named 'numba.core'", name="numba.core"),
        AttributeError("module 'numpy' has no attribute 'long'"),
    ],
)
def test_a_broken_numba_install_warns_and_is_not_used(monkeypatch, error):
    for name in [n for n in sys.modules if n == "numba" or n.startswith("numba.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delitem(sys.modules, "grainpack.pipeline.compiled", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_Raising(error), *sys.meta_path])
    with pytest.warns(UserWarning, match=f"does not import \\({type(error).__name__}"):
        assert fast.kernels() is None


def test_another_missing_module_is_not_taken_for_numba(monkeypatch):
    monkeypatch.setitem(sys.modules, "grainpack.pipeline.compiled", None)
    with pytest.raises(ModuleNotFoundError):
        fast.kernels()
