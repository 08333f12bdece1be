"""Test setup for the whole tree: tests, docstring examples and notebooks.

Temporary files of every test and docstring example (``tempfile.mkdtemp()`` in examples
included) go under pytest's own temporary directory, which pytest prunes, not ``/tmp``.
"""

import tempfile

import pytest


@pytest.fixture(autouse=True)
def _temporary_files_under_pytest(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
