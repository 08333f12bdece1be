"""Benchmark smoke tests: the suite and the CLI run end to end on tiny sizes (no timings)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import grainpack as gp
from grainpack.bench import build as bench_build
from grainpack.bench import throughput as bench
from grainpack.bench.throughput import document_lengths
from grainpack.cli.main import main

GRAINPACK = {"documents", "windows", "documents_compact", "windows_compact"}
THROUGHPUT = {
    "limit",
    "nanogpt",
    "packed_stream",
    "mixed_stream",
    "grain_packer",
    *GRAINPACK,
    "documents_workers",
    "windows_workers",
    "documents_compact_workers",
}


def test_document_lengths_sum_and_clip():
    lengths = document_lengths(3_000_000, seed=1)
    assert lengths.sum() == 3_000_000
    assert lengths.min() >= 1 and lengths.max() <= 32768
    assert 450 < np.median(lengths) < 750


def test_cli_bench_passes_its_options(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(bench, "run_benchmarks", lambda **kwargs: calls.append(kwargs))
    argv = ["bench", "--quick", "--tokens", "5000000", "--directory", str(tmp_path)]
    assert main([*argv, "--json", str(tmp_path / "b.json")]) == 0
    assert main(["bench"]) == 0
    default = {"tokens": 200_000_000, "directory": None, "passes": 5, "quick": False}
    assert calls == [
        {"tokens": 5_000_000, "directory": str(tmp_path), "passes": 5, "quick": True,
         "json_path": str(tmp_path / "b.json")},
        {**default, "json_path": None},
    ]  # fmt: skip
    monkeypatch.setattr(bench_build, "run_build_benchmark", lambda **kw: calls.append(kw))
    assert main(["bench", "--build", "--passes", "3"]) == main(["bench", "--build"]) == 0
    assert [call["passes"] for call in calls[2:]] == [3, 2]  # --passes was ignored


@pytest.mark.slow
def test_benchmark_scripts_run_end_to_end(tmp_path):
    root = Path(__file__).parents[2] / "benchmarks"
    corpus, out = tmp_path / "corpus", tmp_path / "out"
    run = [sys.executable, str(root / "run.py"), "--quick", "--directory", str(corpus)]
    done = subprocess.run([*run, "--output", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    (table,) = out.glob("bench-quick-*.md")
    results = json.loads(table.with_suffix(".json").read_text())
    assert set(results) == {
        "date",
        "machine",
        "settings",
        "corpus",
        "throughput",
        "bytes_per_token",
        "latency_us",
        "stages_us_per_batch",
        "index",
        "targets",
    }
    assert results["machine"]["cpu_count"] >= 1 and results["machine"]["numpy"] == np.__version__
    assert set(results["throughput"]) == THROUGHPUT
    for entry in results["throughput"].values():
        assert entry["tokens_per_s"] > 0 and len(entry["passes"]) == results["settings"]["passes"]
    assert results["throughput"]["limit"]["ratio_to_limit"] == 1.0
    # 5 int32 arrays per input token; uint16 rows of block + 1 plus 2048 / 8 + 4 bytes a row
    bytes_per_token = results["bytes_per_token"]
    assert set(bytes_per_token) == GRAINPACK
    assert bytes_per_token["documents"] == bytes_per_token["windows"] == 20.0
    compact = (2049 * 2 + 256 + 4) / 2048
    assert bytes_per_token["documents_compact"] == bytes_per_token["windows_compact"] == compact
    assert set(results["latency_us"]) == GRAINPACK
    for latency in results["latency_us"].values():
        assert latency["batches"] == 300
        assert 0 < latency["median_us"] <= latency["p99_us"] <= latency["max_us"]
        assert 0 < latency["cpu_median_us"] <= latency["cpu_p99_us"] <= latency["cpu_max_us"]
        assert 0 < latency["cold_median_us"] <= latency["cold_p99_us"]
        # each batch's fastest of 3 replays: never above the first run's median
        assert latency["replays"] == 3
        assert 0 < latency["replayed_median_us"] <= latency["replayed_p99_us"]
        assert latency["replayed_median_us"] <= latency["median_us"]
    for unit in ("documents", "windows"):
        stages = results["stages_us_per_batch"][unit]
        assert set(stages) == {"plan", "read", "expand"} and min(stages.values()) > 0
    assert results["corpus"]["tokens"] == 2_000_000
    for name in ("a", "b"):
        source = gp.open_corpus(corpus / name)
        assert source.dtype == np.uint16 and source.num_tokens == 1_000_000
    index = results["index"]
    assert index["plan"]["documents"] == 10**5 and index["plan"]["peak_extra_mib"] > 0
    assert index["restore"]["slot"] == 10**6 and index["first_batch_seconds"] > 0
    assert set(index["worker_startup_seconds"]) == {"documents", "windows", "documents_compact"}
    assert all(isinstance(t["met"], bool) for t in results["targets"])
    for text in (done.stdout, table.read_text()):
        assert "limit: memcpy of block+1 rows" in text and "x limit" in text
        assert "restore at slot 1,000,000" in text and "in-process stage, µs per batch" in text
        assert "bytes per token to the device" in text and "next() latency, µs" in text
        assert "fastest of the replays" in text
    resume = [sys.executable, str(root / "bench_resume.py"), "--slot", "100000"]
    done = subprocess.run(resume, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
