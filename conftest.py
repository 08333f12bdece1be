"""Test setup for the whole tree: tests, docstring examples and notebooks.

Temporary files of every test and docstring example (``tempfile.mkdtemp()`` in examples
included) go under pytest's own temporary directory, which pytest prunes, not ``/tmp``.

The suite runs on ``-n auto`` xdist workers (``--dist loadgroup``): tests that start
several processes of their own (multi-process JAX jobs, killed writers and trainers, a Ray
cluster) share the ``processes`` group, so one worker runs them one after another and they
never compete with each other for the cores; notebooks are marked ``slow``.

Tests that send a Ctrl-C (SIGINT) to programs they start expect what a terminal gives a
program: SIGINT not ignored. A shell that starts the suite in the background without job
control (``pytest &`` in a script) ignores SIGINT in it, and every child would inherit that
(Python then installs no KeyboardInterrupt handler): the suite undoes it at start.
"""

import signal
import tempfile

import pytest

if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

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
