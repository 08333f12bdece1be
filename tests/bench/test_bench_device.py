"""``grainpack bench --device`` (issue 36): the run's JSON and printed checks, on the CPU
here (the figures are an accelerator host's to judge, not these tests').

Run: ``python -m pytest -q -n 0 tests/bench/test_bench_device.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from grainpack.bench import device
from grainpack.cli.main import main

SECTIONS = {"date", "machine", "settings", "corpus", "identity", "expand_us", "device_feed"}
SECTIONS |= {"host_only", "checks", "complete"}


@pytest.mark.parametrize(
    ("cores", "quick", "counts"),
    [
        (16, False, [0, 2, 4, 8, 16]),  # the H200 host
        (12, False, [0, 2, 4, 8]),  # doubling stops below the cores
        (2, False, [0, 2]),  # this machine kind
        (1, False, [0]),  # no worker beside the consumer
        (16, True, [0, 2]),  # --quick: 2 at most
    ],
)
def test_worker_counts_double_up_to_the_cores(cores, quick, counts):
    assert device.worker_counts(cores, quick=quick) == counts


def _results(*, cores=16, platform="gpu", quick=False, host=None, prefetch=None):
    """A results dict as the run builds it, with the figures given."""
    results = {
        "machine": {"cpu_count": 64, "cores": cores, "jax_platform": platform},
        "settings": {"quick": quick, "worker_counts": [0, 2, 4, 8], "feed_workers": 8},
        "identity": {"8": True, "64": True, "256": True},
    }
    if host is not None:
        results["host_only"] = {
            layout: {w: {"tokens_per_s": r} for w, r in rates.items()}
            for layout, rates in host.items()
        }
    if prefetch is not None:
        results["device_feed"] = {
            w: {"prefetch": {"tokens_per_s": r, "x_nanogpt": r / 1e8}} for w, r in prefetch.items()
        }
    return results


def test_checks_pass_fail_and_say_why_they_do_not_apply():
    host = {"full": {"0": 1e8, "8": 3e8}, "compact": {"0": 1e9, "8": 2e9}}  # 3x and 2x
    statuses = [c["status"] for c in device.checks(_results(host=host, prefetch={"0": 1.6e9}))]
    assert statuses == ["PASS", "PASS", "FAIL", "PASS", "PASS"]
    # the better of in-process and workers; 1.2e9 is 12x the 1e8 baseline
    checks = device.checks(_results(host=host, prefetch={"0": 1.2e9, "8": 1.0e9}))
    assert [c["status"] for c in checks[3:]] == ["FAIL", "PASS"] and checks[3]["value"] == 1.2e9
    cpu = device.checks(_results(cores=2, platform="cpu", host=host, prefetch={"0": 1e9}))
    assert [c["status"] for c in cpu] == ["PASS"] + ["n/a"] * 4
    assert "2 cores" in cpu[1]["why"] and "2 cores" in cpu[3]["why"]
    no_device = device.checks(_results(platform="cpu", host=host, prefetch={"0": 1e9}))
    assert "no accelerator" in no_device[3]["why"] and no_device[1]["status"] == "PASS"
    quick = device.checks(_results(quick=True, host=host, prefetch={"0": 2e9}))
    assert all(c["why"].startswith("--quick") for c in quick[1:])


def test_a_run_cut_short_formats_and_checks_what_it_measured():
    results = _results(cores=16, platform="gpu")  # stopped after the identity check
    checks = device.checks(results)
    assert checks[0]["status"] == "PASS"
    assert all(c["why"].startswith("not measured") for c in checks[1:])
    results.update(date="d", corpus={"tokens": 1}, checks=checks)
    results["machine"].update(cpu="c", device_count=1, device_kind="H200", jax="0", grain="0")
    results["machine"]["numba"] = True
    results["settings"].update(block=2048, batch=256, passes=5, pass_seconds=1.0)
    table = device.format_table(results)
    assert "full layout" in table and table.count(" - ") >= 1
    assert "n/a   host only, full layout: 8 workers / in-process >= 2.5: -" in table


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--device", "--build"], "--device is a benchmark of its own"),
        (["--device", "--megabytes", "5"], "--megabytes applies to bench --build only"),
        (["--device", "--keep"], "--keep applies to bench --scale only"),
    ],
)
def test_bench_device_refuses_other_benchmarks_options(capsys, args, message):
    assert main(["bench", *args]) == 1 and message in capsys.readouterr().err


@pytest.mark.slow
def test_bench_device_quick_writes_its_json_and_the_identity_holds(tmp_path):
    out = tmp_path / "device.json"
    command = [sys.executable, "-m", "grainpack", "bench", "--device", "--quick"]
    command += ["--directory", str(tmp_path / "corpus"), "--json", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr  # no progress bar in a log
    results = json.loads(out.read_text())
    assert set(results) >= SECTIONS and results["complete"] is True
    m = results["machine"]
    assert set(m) >= {"cores", "cpu_count", "device_kind", "jax", "jax_platform", "numba"}
    assert results["identity"] == {"8": True, "64": True, "256": True}
    assert set(results["expand_us"]) == {"8", "64", "256"}
    assert results["settings"]["worker_counts"] == [0, 2] and results["settings"]["quick"]
    feed = results["device_feed"]
    assert set(feed["0"]) == set(device.FEEDS) and set(feed["2"]) == set(device.FEEDS) - {"nanogpt"}
    assert feed["0"]["nanogpt"]["x_nanogpt"] == pytest.approx(1.0)
    assert all(e["tokens_per_s"] > 0 for w in feed.values() for e in w.values())
    for layout in device.LAYOUTS:
        assert set(results["host_only"][layout]) == {"0", "2"}
    statuses = [c["status"] for c in results["checks"]]
    assert statuses == ["PASS", "n/a", "n/a", "n/a", "n/a"]  # --quick shows no speed check
    assert "PASS  gp.expand on the device == the full layout" in done.stdout
    measured = [line for line in done.stdout.splitlines() if line.startswith("device feed, ")]
    assert len(measured) == 7  # printed as measured, before the table
