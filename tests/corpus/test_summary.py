"""Per-block token totals: stored with native corpora, computed and cached for the others."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

import grainpack as gp
from grainpack.corpus.summary import ShardSummary, block_tokens, shard_totals, summary_pieces
from grainpack.ingest.merge import merge_corpora


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAINPACK_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "summaries"


def documents(n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 100, rng.integers(0, 21)) for _ in range(n)]


def expected_totals(lengths, c):
    return np.add.reduceat(lengths, np.arange(0, len(lengths), c)).tolist()


def test_shard_summary_counts_the_parts_of_blocks_in_a_shard():
    summary = ShardSummary(first_document=510, block_docs=256)  # documents 510..513
    for tokens in (1, 2, 3, 4):
        summary.add(tokens)
    assert summary.totals() == [3, 7]  # block 1 ends at 511, block 2 starts at 512
    assert summary.to_bytes() == struct.pack("<2q", 3, 7)
    assert [summary_pieces(510, n, 256) for n in (0, 1, 2, 3, 300)] == [0, 1, 1, 2, 3]


def test_stored_totals_equal_a_scan_for_any_block_size(tmp_path, cache):
    src = gp.write_corpus(tmp_path / "c", documents(1500), shard_tokens=700)  # 22 shards
    assert len(src.shards) > 20 and src.summary_block_docs == 256
    for c in (256, 512, 1, 7, 300, 5000):
        assert block_tokens(src, c).tolist() == expected_totals(src.lengths, c)
    # Multiples of the stored block are read from the corpus; other sizes are cached.
    assert sorted(p.name.rsplit("-", 1)[1] for p in cache.iterdir()) == [
        "1.npy",
        "300.npy",
        "5000.npy",
        "7.npy",
    ]
    assert block_tokens(src, 7).tolist() == expected_totals(src.lengths, 7)  # from the cache


def test_shard_totals_equal_the_shard_summary_of_the_same_documents():
    rng = np.random.default_rng(2)
    for first in (0, 1, 255, 256, 511, 1000):
        for n in (0, 1, 255, 256, 257, 700):
            lengths = rng.integers(0, 50, n)
            summary = ShardSummary(first_document=first, block_docs=256)
            for tokens in lengths.tolist():
                summary.add(tokens)
            got = shard_totals(lengths, first, 256)
            assert got.dtype == np.int64 and got.tolist() == summary.totals()
            assert len(got) == summary_pieces(first, n, 256)


def test_a_merged_corpus_stores_its_block_totals(tmp_path, cache):
    # Parts of 300 and 500 documents: the second part's blocks start mid-block in the merge.
    parts = [
        gp.write_corpus(tmp_path / "a", documents(300, seed=1), shard_tokens=700),
        gp.write_corpus(tmp_path / "b", documents(500, seed=2), shard_tokens=900),
    ]
    merged = merge_corpora([tmp_path / "a", tmp_path / "b"], tmp_path / "ab")
    assert gp.corpus.read_manifest(tmp_path / "ab")["version"] == 2
    assert merged.summary_block_docs == 256 and len(merged.shards) == sum(
        len(p.shards) for p in parts
    )
    for c in (256, 512, 768):  # multiples of the stored block: read from the corpus
        assert block_tokens(merged, c).tolist() == expected_totals(merged.lengths, c)
    assert not cache.exists()  # nothing was scanned
    assert gp.verify_corpus(tmp_path / "ab").num_documents == 800


def test_version_1_corpus_opens_and_its_totals_are_cached_outside_it(tmp_path, cache):
    path = tmp_path / "c"
    gp.write_corpus(path, documents(600), shard_tokens=900)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["version"] = 1
    del manifest["summary_block_docs"]
    for shard in manifest["shards"]:
        (path / shard.pop("summary_file")).unlink()
        del shard["summary_sha256"]
    (path / "manifest.json").write_text(json.dumps(manifest))
    before = sorted(p.name for p in path.iterdir())
    src = gp.open_corpus(path)
    assert src.summary_block_docs is None
    assert block_tokens(src, 256).tolist() == expected_totals(src.lengths, 256)
    assert sorted(p.name for p in path.iterdir()) == before  # nothing written into the corpus
    assert len(list(cache.iterdir())) == 1


def test_the_blocked_order_reads_version_1_and_version_2_alike(tmp_path):
    docs = documents(700, seed=3)
    gp.write_corpus(tmp_path / "v2", docs, shard_tokens=600)
    gp.write_corpus(tmp_path / "v1", docs, shard_tokens=600)
    manifest = json.loads((tmp_path / "v1" / "manifest.json").read_text())
    manifest.update(version=1)
    del manifest["summary_block_docs"]
    (tmp_path / "v1" / "manifest.json").write_text(json.dumps(manifest))
    got = []
    for name in ("v1", "v2"):
        cfg = gp.PipelineConfig(
            sources={"c": str(tmp_path / name)}, block=8, global_batch_size=4, boundary_id=100,
            order=gp.BlockedOrder(block_docs=512, window_blocks=1),
        )  # fmt: skip
        it = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
        got.append(np.stack([next(it)["inputs"] for _ in range(80)]))
    np.testing.assert_array_equal(got[0], got[1])


def _write_megatron(prefix, docs):
    prefix.with_suffix(".bin").write_bytes(b"".join(struct.pack(f"<{len(d)}H", *d) for d in docs))
    s, lengths = len(docs), [len(d) for d in docs]
    idx = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, s, s + 1)
    idx += struct.pack(f"<{s}i", *lengths)
    idx += struct.pack(f"<{s}q", *[2 * sum(lengths[:i]) for i in range(s)])
    idx += struct.pack(f"<{s + 1}q", *range(s + 1))
    prefix.with_suffix(".idx").write_bytes(idx)


def test_megatron_and_flat_layout_totals(tmp_path):
    docs = [d.tolist() for d in documents(40)]
    _write_megatron(tmp_path / "m", docs)
    flat = tmp_path / "flat"
    flat.mkdir()
    stream = np.concatenate([np.r_[d, 999] for d in docs]).astype(np.uint16)  # eos 999
    parts = np.array_split(stream, 3)
    for k, part in enumerate(parts):
        part.tofile(flat / f"{k}.bin")
    (flat / "index.json").write_text(json.dumps({f"{k}.bin": len(p) for k, p in enumerate(parts)}))
    for src in (gp.open_corpus(tmp_path / "m"), gp.open_corpus(flat, eos_id=999)):
        for c in (1, 3, 16):
            assert block_tokens(src, c).tolist() == expected_totals(src.lengths, c)


def test_a_corrupt_summary_file_is_refused(tmp_path):
    src = gp.write_corpus(tmp_path / "c", documents(300), shard_tokens=10_000)
    summary = tmp_path / "c" / "summary-00000.bin"
    totals = np.fromfile(summary, "<i8")
    totals[0] += 1
    totals.tofile(summary)
    with pytest.raises(gp.CorpusError, match=r"summary-00000\.bin: expected 2 non-negative block"):
        block_tokens(src, 256)


def test_merge_refuses_a_part_whose_offsets_are_corrupt(tmp_path):
    gp.write_corpus(tmp_path / "a", documents(50, seed=1))
    gp.write_corpus(tmp_path / "b", documents(50, seed=2))
    offsets = tmp_path / "b" / "offsets-00000.bin"
    data = bytearray(offsets.read_bytes())
    data[8:16], data[16:24] = data[16:24], data[8:16]  # documents 0 and 1 end out of order
    offsets.write_bytes(bytes(data))
    with pytest.raises(gp.CorpusError, match=r"offsets-00000\.bin: document offsets decrease"):
        merge_corpora([tmp_path / "a", tmp_path / "b"], tmp_path / "ab")
    assert not (tmp_path / "ab").exists()
