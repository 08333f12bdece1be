"""The test run cleans up after itself: docstring examples leave nothing in the temp folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_docstring_examples_leave_no_temporary_folders(tmp_path):
    temp, base = tmp_path / "temp", tmp_path / "base"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
         f"--basetemp={base}", str(ROOT / "grainpack")],
        capture_output=True, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:]
    assert sorted(p.name for p in temp.iterdir()) == []
