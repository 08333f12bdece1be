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


def test_another_missing_module_is_not_taken_for_numba(monkeypatch):
    monkeypatch.setitem(sys.modules, "grainpack.pipeline.compiled", None)
    with pytest.raises(ModuleNotFoundError):
        fast.kernels()
