"""``grainpack bench --quick`` in a log (issue 38): no progress bar when stderr is not a
terminal, and targets marked not applicable instead of ``NO`` at sizes that cannot show them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grainpack.bench import throughput

RESULTS = Path(__file__).parents[2] / "benchmarks" / "results" / "bench-200000000-2026-12-02.json"


def _table(quick: bool) -> list[str]:
    results = json.loads(RESULTS.read_text())  # a full run's measurements
    results["settings"]["quick"] = quick
    results["targets"] = throughput._targets(results)
    return throughput.format_table(results).splitlines()


def test_quick_marks_the_targets_not_applicable_and_says_why():
    # Before: "2 workers / in-process (worst unit) >= 1.0  0.967  NO", unexplained.
    table = _table(quick=True)
    rows = table[table.index(next(r for r in table if r.startswith("target "))) + 1 :]
    targets = rows[: rows.index("")]
    assert len(targets) == 13 and all(row.endswith("  n/a") for row in targets)
    assert rows[-1] == throughput.QUICK_NOTE and "cannot show them" in rows[-1]
    full = _table(quick=False)
    assert throughput.QUICK_NOTE not in full and not any(r.endswith("n/a") for r in full)
    assert any(r.endswith("  yes") for r in full)


def test_stored_results_without_the_quick_setting_still_format():
    results = json.loads(RESULTS.read_text())
    assert "quick" not in results["settings"] and "applies" not in results["targets"][0]
    assert "n/a" not in throughput.format_table(results)


@pytest.mark.slow
def test_bench_quick_piped_to_a_file_writes_no_progress_bar(tmp_path):
    # Before: ~3 KB of carriage returns from the progress bar in the log.
    done = subprocess.run(
        [sys.executable, "-m", "grainpack", "bench", "--quick", "--directory", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr and "\r" not in done.stdout
    assert done.stdout.rstrip().endswith(throughput.QUICK_NOTE)
    assert " NO\n" not in done.stdout
