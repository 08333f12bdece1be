"""The scale benchmark's parts on small sizes: the sparse corpus, the measurements, quality."""

from __future__ import annotations

import json

import numpy as np
import pytest

import grainpack as gp
from grainpack.bench.scale import (
    order_quality,
    sparse_lengths,
    write_sparse_corpus,
)
from grainpack.cli.main import main
from grainpack.corpus.shards import check_offsets
from grainpack.corpus.summary import block_tokens


@pytest.fixture(autouse=True)
def summary_cache(tmp_path, monkeypatch):
    """Block totals computed for a corpus are cached here, not in the user's cache."""
    monkeypatch.setenv("GRAINPACK_CACHE", str(tmp_path / "cache"))


def test_sparse_corpus_is_a_native_corpus_with_real_offsets_and_totals(tmp_path):
    manifest = write_sparse_corpus(tmp_path / "c", 30_000, shard_tokens=1 << 22)
    src = gp.open_corpus(tmp_path / "c")
    lengths = np.concatenate(list(sparse_lengths(30_000)))
    assert len(manifest["shards"]) == len(src.shards) > 3
    assert src.lengths.tolist() == lengths.tolist()
    check_offsets(src.offsets, src.num_tokens, "sparse")
    assert (
        block_tokens(src, 1024).tolist()
        == np.add.reduceat(lengths, np.arange(0, 30_000, 1024)).tolist()
    )
    assert src[123].tolist() == [0] * int(lengths[123])  # holes read as zeros
    disk = sum(f.stat().st_blocks * 512 for f in (tmp_path / "c").iterdir())
    assert disk < 2 * src.num_tokens // 10  # the token files take no disk


@pytest.mark.slow
def test_order_quality_compares_the_orders():
    rows = order_quality(num_documents=30_000, configs=((64, 4),), batch_rows=(64,))
    labels = [(r["order"], r["storage"]) for r in rows]
    assert labels == [
        ("exact", "input order"),
        ("blocked C=64 K=4", "input order"),
        ("blocked C=64 K=4", "shuffled"),
    ]
    assert all(r["visited_once"] for r in rows)
    exact, blocked, shuffled = rows
    # 4 blocks of 64 documents per window: a batch of ~130 documents reads few regions and
    # follows the clustered input; stored shuffled, it is as random as the exact order.
    assert blocked["storage_regions_per_document"] < exact["storage_regions_per_document"]
    assert blocked["design_effect"] > 5 and blocked["lag1_correlation"] > 0.5
    assert shuffled["design_effect"] < 2 and abs(shuffled["lag1_correlation"]) < 0.3


@pytest.mark.slow
def test_bench_scale_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "scale.json"
    argv = ["bench", "--scale", "--documents", "5e4", "--boundary-documents", "2e4"]
    argv += ["--quality-documents", "0", "--directory", str(tmp_path), "--json", str(out)]
    assert main(argv) == 0
    results = json.loads(out.read_text())
    assert results["large_corpus"]["documents"] == 50_000
    for cache in ("cold", "warm"):
        first, restored = results[f"first_batch_{cache}"], results[f"restore_{cache}"]
        assert first["tokens"] > 0 and first["anon_peak_bytes"] < 1 << 30
        assert restored["tokens"] == first["tokens"] and restored["wall_s"] < 30
    assert results["exact_refused"] == {"refused_s": None}  # it fits: not refused
    stall = results["boundary_stall"]
    assert stall["ratio"] > 0
    assert stall["around"]["first_step"] == stall["boundary_step"] - stall["batches"] // 2
    assert stall["away"]["first_step"] + stall["batches"] <= stall["around"]["first_step"]
    best = results["best_fit"]  # a state of 6,250 steps (two epochs): counting is cheap
    assert best["restore_step"] == 6_250
    for cache in ("cold", "warm"):
        first, restored = best[f"first_batch_{cache}"], best[f"restore_{cache}"]
        assert first["tokens"] > 0 and restored["tokens"] > 0 and restored["wall_s"] < 30
    assert best["boundary_stall"]["ratio"] > 0  # one window an epoch: away and around
    assert list(tmp_path.iterdir()) == [out]  # the corpora are deleted
