"""Test setup for the whole tree: tests, docstring examples and notebooks.

Temporary files of every test and docstring example (``tempfile.mkdtemp()`` in examples
included) go under pytest's own temporary directory, which pytest prunes, not ``/tmp``.

The suite runs on ``-n auto`` xdist workers (``--dist loadgroup``): tests that start
several processes of their own (multi-process JAX jobs, killed writers and trainers, a Ray
cluster) share the ``processes`` group, so one worker runs them one after another and they
never compete with each other for the cores; notebooks are marked ``slow``.
"""

import tempfile

import pytest

# files whose every test starts processes of its own (besides tests marked multiprocess)
PROCESS_FILES = {
    "test_crash.py",
    "test_ctrl_c_workers.py",
    "test_distributed.py",
    "test_multihost.py",
    "multihost.ipynb",
}


@pytest.fixture(autouse=True)
def _temporary_files_under_pytest(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
        if item.path.name in PROCESS_FILES or item.get_closest_marker("multiprocess"):
            item.add_marker(pytest.mark.xdist_group("processes"))
