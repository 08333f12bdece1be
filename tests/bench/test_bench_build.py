"""Build benchmark smoke test: the three contenders run end to end on 1 MB (no timings)."""

from __future__ import annotations

import json

import pytest

from grainpack.bench.build import format_build_table, run_build_benchmark


@pytest.mark.slow
def test_build_benchmark_runs_and_agrees(tmp_path, capsys):
    path = tmp_path / "build.json"
    results = run_build_benchmark(
        megabytes=1, directory=tmp_path, vocab_size=300, workers=2, passes=1, json_path=path
    )
    assert json.loads(path.read_text()) == results
    runs = results["runs"]
    assert set(runs) == {"limit", "grainpack_build", "megatron_loop"}
    tokens = {run["tokens"] for run in runs.values()}
    assert len(tokens) == 1 and tokens.pop() > 100_000  # the same documents, the same ids
    assert runs["limit"]["ratio_to_limit"] == 1.0
    assert results["text"]["bytes"] >= 10**6
    assert "| grainpack build (read, tokenize, write, merge) |" in capsys.readouterr().out
    assert "x limit" in format_build_table(results)
