"""Tests for grainpack.verify: verify_corpus (deep checks) and describe_corpus (statistics)."""

from __future__ import annotations

import hashlib
import json
import struct

import pytest

from grainpack.corpus.errors import CorpusError
from grainpack.corpus.formats import open_corpus
from grainpack.corpus.verify import VerifyReport, describe_corpus, verify_corpus
from grainpack.ingest.writer import write_corpus

DOCS = [[1, 2, 3], [], [4, 5, 6, 7, 8], [9], [], [10, 11]]  # shards at shard_tokens=4: 3 | 5 | 3


def test_verify_corpus_reports_a_good_corpus(tmp_path):
    src = write_corpus(tmp_path, DOCS, vocab_size=12, shard_tokens=4)
    report = verify_corpus(tmp_path, chunk_tokens=2, progress=True)
    assert isinstance(report, VerifyReport)
    assert (report.kind, report.num_documents, report.num_tokens, report.num_shards) == (
        "grainpack",
        6,
        11,
        3,
    )
    assert (report.dtype, report.vocab_size, report.max_token_id) == ("uint16", 12, 11)
    assert report.fingerprint == src.fingerprint
    assert "sha256 checksums" in report.checks and "token ids < vocab_size=12" in report.checks


def test_verify_corpus_catches_truncated_shard(tmp_path):
    write_corpus(tmp_path, DOCS, shard_tokens=4)
    shard = tmp_path / "tokens-00001.bin"
    shard.write_bytes(shard.read_bytes()[:-2])
    with pytest.raises(CorpusError, match=r"tokens-00001\.bin: has 8 bytes, expected 10"):
        verify_corpus(tmp_path)


@pytest.mark.parametrize("name", ["tokens-00002.bin", "offsets-00000.bin", "summary-00001.bin"])
def test_verify_corpus_catches_flipped_byte(tmp_path, name):
    write_corpus(tmp_path, DOCS, shard_tokens=4)
    data = bytearray((tmp_path / name).read_bytes())
    data[1] ^= 0x01
    (tmp_path / name).write_bytes(bytes(data))
    with pytest.raises(CorpusError, match=rf"{name}: sha256 mismatch"):
        verify_corpus(tmp_path)


def _rewrite_shard(tmp_path, tokens: list[int], offsets: list[int]) -> None:
    """Rewrites shard 0 with consistent checksums: only the content checks can object."""
    tok = struct.pack(f"<{len(tokens)}H", *tokens)
    off = struct.pack(f"<{len(offsets)}q", *offsets)
    (tmp_path / "tokens-00000.bin").write_bytes(tok)
    (tmp_path / "offsets-00000.bin").write_bytes(off)
    m = json.loads((tmp_path / "manifest.json").read_text())
    m["shards"][0].update(
        tokens_sha256=hashlib.sha256(tok).hexdigest(),
        offsets_sha256=hashlib.sha256(off).hexdigest(),
    )
    (tmp_path / "manifest.json").write_text(json.dumps(m))


def test_verify_corpus_catches_decreasing_offsets(tmp_path):
    write_corpus(tmp_path, [[1, 2], [3]], vocab_size=8)
    _rewrite_shard(tmp_path, [1, 2, 3], [0, 2, 1, 3])
    m = json.loads((tmp_path / "manifest.json").read_text())
    m["shards"][0]["num_documents"] = m["num_documents"] = 3
    (tmp_path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(CorpusError, match=r"offsets decrease at document 1 \(2 -> 1\)"):
        verify_corpus(tmp_path)


def test_verify_corpus_catches_ids_beyond_vocab(tmp_path):
    write_corpus(tmp_path, [[1, 2], [3]], vocab_size=8)
    _rewrite_shard(tmp_path, [1, 9, 3], [0, 2, 3])
    with pytest.raises(CorpusError, match="token id 9 at stream position 1 is >= vocab_size=8"):
        verify_corpus(tmp_path)
    assert open_corpus(tmp_path)[0].tolist() == [1, 9]  # only verify scans the ids


def test_verify_corpus_not_a_corpus(tmp_path):
    with pytest.raises(CorpusError, match="not a corpus"):
        verify_corpus(tmp_path)
    with pytest.raises(ValueError, match="chunk_tokens must be a positive int"):
        verify_corpus(tmp_path, chunk_tokens=0)


def test_verify_corpus_flat_layout_and_megatron(tmp_path):
    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "a.bin").write_bytes(struct.pack("<3H", 7, 0, 300))
    (seed / "index.json").write_text('{"a.bin": 3}')
    report = verify_corpus(seed, eos_id=0)
    assert (report.kind, report.num_documents, report.max_token_id) == ("flat-shard", 2, 300)
    assert not any(check.startswith("note:") for check in report.checks)
    (seed / "a.bin").write_bytes(struct.pack("<4H", 7, 0, 300, 9) + b"\x01")  # 4.5 tokens
    (note,) = [c for c in verify_corpus(seed).checks if c.startswith("note:")]
    assert note.endswith("a.bin: 9 bytes for 3 tokens); the rest is not read")
    (tmp_path / "m.bin").write_bytes(struct.pack("<2i", 5, -1))
    idx = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 4, 1, 2)
    idx += struct.pack("<i", 2) + struct.pack("<q", 0) + struct.pack("<2q", 0, 1)
    (tmp_path / "m.idx").write_bytes(idx)
    with pytest.raises(
        CorpusError, match=r"m.bin: token id -1 at token 1 \(stream position 1\) is neg"
    ):
        verify_corpus(tmp_path / "m")


def test_describe_corpus_statistics(tmp_path):
    src = write_corpus(tmp_path, DOCS, eos_id=11, shard_tokens=4)
    stats = describe_corpus(src, chunk_tokens=3)
    # lengths [3, 0, 5, 1, 0, 2] -> sorted [0, 0, 1, 2, 3, 5]; linear percentile at rank q*5:
    # p50 -> rank 2.5 -> 1.5; p90 -> rank 4.5 -> 4.0; p99 -> rank 4.95 -> 4.9.
    assert stats["length"] == pytest.approx(
        {"p0": 0.0, "p50": 1.5, "p90": 4.0, "p99": 4.9, "p100": 5.0, "mean": 11 / 6}
    )
    assert {k: v for k, v in stats.items() if k not in ("length", "fingerprint")} == {
        "documents": 6,
        "tokens": 11,
        "dtype": "uint16",
        "vocab_size": None,
        "eos_id": 11,
        "shards": 3,
        "empty_documents": 2,
        "max_token_id": 11,
        "tokenizer": None,  # written from ids: no tokenizer recorded
    }
    json.dumps(stats)  # plain types only


def test_describe_corpus_empty(tmp_path):
    stats = describe_corpus(write_corpus(tmp_path / "a", []))
    assert (stats["documents"], stats["length"], stats["max_token_id"]) == (0, None, None)
    stats = describe_corpus(write_corpus(tmp_path / "b", [[], []]))
    assert (stats["empty_documents"], stats["max_token_id"]) == (2, None)
    assert stats["length"]["p100"] == 0.0


def test_describe_corpus_does_not_raise_on_out_of_vocab_ids(tmp_path):
    write_corpus(tmp_path, [[1, 2], [3]], vocab_size=8)
    _rewrite_shard(tmp_path, [1, 9, 3], [0, 2, 3])
    assert describe_corpus(open_corpus(tmp_path))["max_token_id"] == 9


def _edit(path, **values) -> None:
    manifest = json.loads((path / "manifest.json").read_text())
    manifest.update(values)
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_verify_corpus_checks_the_stream_digest_and_max_token_id(tmp_path):
    path = tmp_path / "c"
    write_corpus(path, DOCS, shard_tokens=4)
    report = verify_corpus(path)
    assert "content_sha256" in report.checks and "max_token_id=11" in report.checks
    manifest = json.loads((path / "manifest.json").read_text())
    # the digest of a copy in one shard is the same: it is computed over the whole stream
    write_corpus(tmp_path / "one", DOCS)
    one = json.loads((tmp_path / "one" / "manifest.json").read_text())
    assert one["content_sha256"] == manifest["content_sha256"]
    _edit(path, content_sha256="0" * 64)
    with pytest.raises(CorpusError, match=r"content_sha256 \(of the whole stream\) mismatch"):
        verify_corpus(path)
    _edit(path, content_sha256=manifest["content_sha256"], max_token_id=10)
    with pytest.raises(CorpusError, match="max_token_id=10 but the largest token id is 11"):
        verify_corpus(path)
    _edit(path, max_token_id=None)
    with pytest.raises(CorpusError, match="max_token_id=None but the largest token id is 11"):
        verify_corpus(path)


def test_verify_corpus_checks_the_block_totals_against_the_offsets(tmp_path):
    path = tmp_path / "c"
    write_corpus(path, [[1] * (n % 7) for n in range(600)])  # blocks of 256: 256, 256, 88
    assert "shard offsets" in verify_corpus(path).checks
    _edit(path, summary_block_docs=257)  # as many blocks, other totals
    with pytest.raises(CorpusError, match=r"summary-00000.bin: its block totals .*=257"):
        verify_corpus(path)
