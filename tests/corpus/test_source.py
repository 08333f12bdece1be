"""Tests for grainpack.source.TokenShardSource: reads, bounds, pickling, Grain integration."""

from __future__ import annotations

import itertools
import os
import pickle
import re
import threading

import grain
import numpy as np
import pytest

import grainpack as gp
from grainpack.corpus.errors import CorpusError
from grainpack.corpus.formats import open_corpus
from grainpack.corpus.shards import OffsetsFile, ShardRecord, SplitAfter
from grainpack.corpus.source import TokenShardSource
from grainpack.ingest.writer import write_corpus

DOCS = [[1, 2, 3], [], [4, 5, 6, 7, 8], [9], [], [10, 11]]  # shards at shard_tokens=4: 3 | 5 | 3


@pytest.fixture
def src(tmp_path) -> TokenShardSource:
    return write_corpus(tmp_path / "c", DOCS, shard_tokens=4)


def test_source_metadata(src):
    assert (len(src), src.num_documents, src.num_tokens) == (6, 6, 11)
    assert src.offsets.tolist() == [0, 3, 3, 8, 9, 9, 11]
    assert src.lengths.tolist() == [3, 0, 5, 1, 0, 2]
    assert src.lengths.dtype == np.int64 and src.offsets.dtype == np.int64
    assert src.shard_starts.tolist() == [0, 3, 8, 11]
    assert (src.vocab_size, src.eos_id, src.dtype) == (None, None, np.dtype("uint16"))


def test_source_lengths_and_offsets_are_read_only(src):
    with pytest.raises(ValueError, match="read-only"):
        src.lengths[0] = 1
    with pytest.raises(ValueError, match="read-only"):
        src.offsets[0] = 1


def test_offsets_and_positions_outside_the_corpus_are_refused(tmp_path):
    src = gp.write_corpus(tmp_path / "c", [[1, 2], [3], [4, 5]], shard_tokens=2)
    for bad in ([-1], [4]):
        with pytest.raises(IndexError, match=r"document ids .* are outside \[0, 3\]"):
            src.document_offsets(np.array(bad))
    for bad in ([-1], [5]):
        with pytest.raises(IndexError, match=r"stream positions .* are outside \[0, 5\)"):
            src.documents_at(np.array(bad))
    assert src.document_offsets(np.array([3])).tolist() == [5]
    empty = gp.write_corpus(tmp_path / "e", [])
    assert empty.offsets_between(0, 0).tolist() == [0]


def test_source_getitem_returns_copies(src):
    doc = src[np.int64(2)]
    assert doc.tolist() == [4, 5, 6, 7, 8] and doc.dtype == np.uint16
    doc[0] = 99
    assert src[2].tolist() == [4, 5, 6, 7, 8]
    assert [d.tolist() for d in src._getitems([5, 0, 1])] == [[10, 11], [1, 2, 3], []]


@pytest.mark.parametrize("index", [6, -1, 2**40])
def test_source_getitem_out_of_range(src, index):
    with pytest.raises(IndexError, match=rf"document index {index} is outside \[0, 6\)"):
        src[index]


@pytest.mark.parametrize("index", [1.0, "1", slice(0, 2), True, None])
def test_source_getitem_rejects_non_integers(src, index):
    with pytest.raises(TypeError, match="document index must be an int"):
        src[index]


def test_source_read_span(src):
    assert src.read_span(2, 1, 4).tolist() == [5, 6, 7]
    assert src.read_span(1, 0, 0).tolist() == []
    with pytest.raises(IndexError, match=r"span \[2, 6\) is outside document 2 of length 5"):
        src.read_span(2, 2, 6)
    with pytest.raises(IndexError, match="outside document"):
        src.read_span(2, 3, 2)
    with pytest.raises(IndexError, match="document index 9"):
        src.read_span(9, 0, 1)


def test_source_read_tokens_crosses_shards(src):
    assert src.read_tokens(2, 10).tolist() == [3, 4, 5, 6, 7, 8, 9, 10]
    assert src.read_tokens(11, 11).tolist() == []
    with pytest.raises(IndexError, match=r"stream range \[5, 12\)"):
        src.read_tokens(5, 12)
    with pytest.raises(IndexError, match="reversed"):
        src.read_tokens(5, 4)


def test_source_read_into_any_int_dtype(src):
    out = np.full(9, -1, np.int32)
    src.read_into(out, 1)
    assert out.tolist() == [2, 3, 4, 5, 6, 7, 8, 9, 10]
    view = np.zeros((2, 4), np.int64)
    src.read_into(view[1, 1:], 7)  # a strided row slice of a batch
    assert view.tolist() == [[0, 0, 0, 0], [0, 8, 9, 10]]
    with pytest.raises(IndexError, match=r"stream range \[3, 12\)"):
        src.read_into(out, 3)
    with pytest.raises(TypeError, match="1-D integer numpy array"):
        src.read_into(np.zeros(2, np.float32), 0)
    with pytest.raises(TypeError, match="1-D integer numpy array"):
        src.read_into([0, 0], 0)


def test_source_shard_view_is_the_mapped_shard(src):
    # stream: 1 2 3 | 4 5 6 7 8 | 9 10 11  (shards of 3, 5, 3 tokens)
    views = [src.shard_view(k) for k in range(3)]
    assert [np.frombuffer(v, src.dtype).tolist() for v in views] == [
        [1, 2, 3],
        [4, 5, 6, 7, 8],
        [9, 10, 11],
    ]
    assert src.shard_view(1) is views[1]  # cached
    assert views[1].readonly and not views[1].obj.flags.owndata  # no copy: the file's map


def test_source_read_into_uint32_corpus(tmp_path):
    src = write_corpus(tmp_path, [[70000, 1], [2, 80000]], dtype="uint32", shard_tokens=2)
    out = np.zeros(3, np.int64)
    src.read_into(out, 1)
    assert out.tolist() == [1, 2, 80000]


def test_source_repr_is_stable_and_content_derived(tmp_path, src):
    text = repr(src)
    assert re.fullmatch(
        r"TokenShardSource\(fingerprint=[0-9a-f]{16}, documents=6, tokens=11\)", text
    )
    assert text == f"TokenShardSource(fingerprint={src.fingerprint[:16]}, documents=6, tokens=11)"
    assert repr(write_corpus(tmp_path / "other", DOCS, shard_tokens=4)) == text
    assert repr(pickle.loads(pickle.dumps(src))) == text


def test_source_pickle_drops_memmaps(src):
    src[0]
    _ = src.lengths
    copy = pickle.loads(pickle.dumps(src))
    assert copy._maps == [None, None, None] and copy._offsets is None
    assert [copy[i].tolist() for i in range(6)] == DOCS


@pytest.mark.slow
def test_source_pickle_of_100mb_corpus_is_small(tmp_path):
    doc = (np.arange(1 << 20) & 0xFFFF).astype(np.uint16)  # 2 MB per document
    src = write_corpus(tmp_path, (doc for _ in range(50)), shard_tokens=1 << 24)  # 100 MB, 4 shards
    assert src.num_tokens * 2 == 104_857_600
    src.read_tokens(0, src.num_tokens)  # maps every shard
    blob = pickle.dumps(src)
    assert len(blob) < 10_000
    copy = pickle.loads(blob)
    assert len(copy) == 50 and copy.num_tokens == 52_428_800
    assert copy[49][65534:65538].tolist() == [65534, 65535, 0, 1]
    assert copy.read_tokens((1 << 24) - 1, (1 << 24) + 1).tolist() == [65535, 0]  # shard boundary


def test_source_threads_read_consistently(src):
    results = []

    def work() -> None:
        copy = pickle.loads(pickle.dumps(src))
        results.append([copy[i].tolist() for i in range(6)])

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [DOCS] * 4


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["uint16", "uint32"])
def test_source_round_trip_through_grain(tmp_path, dtype):
    base = 60000 if dtype == "uint16" else 2_000_000_000  # ids < 2**31 (int32 batches)
    docs = [[i] * (i % 5) + [base + i] for i in range(40)]  # lengths 1..5 repeated: 120 tokens
    src = write_corpus(tmp_path, docs, dtype=dtype, shard_tokens=16)
    # Greedy shards: 1+2+3+4+5+1 = 16, then six of 2+3+4+5+1 = 15, then 2+3+4+5 = 14.
    assert [s.num_tokens for s in src.shards] == [16, 15, 15, 15, 15, 15, 15, 14]
    assert isinstance(src, grain.sources.RandomAccessDataSource)
    ds = grain.MapDataset.source(src)
    assert [ds[i].tolist() for i in range(len(ds))] == docs
    assert [x.tolist() for x in ds.to_iter_dataset()] == docs
    loader = grain.DataLoader(
        data_source=src,
        sampler=grain.samplers.IndexSampler(len(src), shuffle=False, num_epochs=1),
        worker_count=2,
        read_options=grain.ReadOptions(num_threads=0, prefetch_buffer_size=0),
    )
    out = list(loader)
    assert [x.tolist() for x in out] == docs
    assert {x.dtype for x in out} == {np.dtype(dtype)}


def test_shard_record_validation():
    assert ShardRecord("t.bin", 3).num_documents == 1  # a whole shard is one document
    assert ShardRecord("t.bin", 3, OffsetsFile("o.bin", 5)).num_documents == 5
    assert ShardRecord("t.bin", 3, SplitAfter(7)).num_documents is None  # known after a scan
    with pytest.raises(ValueError, match="must be >= 0"):
        ShardRecord("t.bin", -1)


def test_source_constructor_validation(tmp_path):
    with pytest.raises(TypeError, match="integer dtype"):
        TokenShardSource([], dtype="float32", fingerprint="0")
    with pytest.raises(TypeError, match="ShardRecord"):
        TokenShardSource(["t.bin"], dtype="uint16", fingerprint="0")  # type: ignore[list-item]


def test_source_reads_records_from_any_byte_offset(tmp_path):
    path = tmp_path / "raw.bin"
    path.write_bytes(b"\xff" * 3 + np.array([5, 6, 7, 8], "<u2").tobytes())  # unaligned start
    record = ShardRecord(str(path), 4, byte_offset=3)
    src = TokenShardSource([record], dtype="uint16", fingerprint="ab" * 32)
    assert [src[0].tolist(), len(src)] == [[5, 6, 7, 8], 1]
    eos = TokenShardSource(
        [ShardRecord(str(path), 4, SplitAfter(6), byte_offset=3)],
        dtype="uint16",
        fingerprint="cd" * 32,
        eos_id=6,
    )
    assert [d.tolist() for d in eos] == [[5, 6], [7, 8]]


def test_source_open_corpus_equals_written(src):
    path = src.shards[0].tokens_path.rsplit("/", 1)[0]
    assert [d.tolist() for d in open_corpus(path)] == DOCS


def test_document_offsets_and_runs_are_read_from_the_maps(src):
    # Offsets [0, 3, 3, 8, 9, 9, 11]; shards hold documents 0-1 | 2 | 3-5.
    assert src.document_offsets(np.array([5, 0, 2, 6, 3])).tolist() == [9, 0, 3, 11, 8]
    assert src.offsets_between(0, 6).tolist() == [0, 3, 3, 8, 9, 9, 11]
    assert src.offsets_between(1, 4).tolist() == [3, 3, 8, 9]
    assert src.offsets_between(2, 2).tolist() == [3]
    assert src.documents_at(np.arange(11)).tolist() == [0, 0, 0, 2, 2, 2, 2, 2, 3, 5, 5]
    assert src._offsets is None and src._lengths is None  # no O(documents) array was built
    with pytest.raises(IndexError, match=r"documents \[4, 7\) are outside \[0, 6\)"):
        src.offsets_between(4, 7)


def test_offsets_runs_are_checked_where_they_are_read(tmp_path):
    write_corpus(tmp_path / "c", DOCS, shard_tokens=4)
    np.array([0, 2, 1, 3], "<i8").tofile(tmp_path / "c" / "offsets-00002.bin")  # same size
    src = open_corpus(tmp_path / "c")
    with pytest.raises(CorpusError, match=r"offsets-00002\.bin: document offsets decrease at"):
        src.offsets_between(3, 6)
    assert src.offsets_between(0, 2).tolist() == [0, 3, 3]  # the other shards still read


@pytest.mark.parametrize(
    ("shard_tokens", "name", "offsets", "read", "match"),
    [
        (
            4,
            "offsets-00002",
            [0, 1, 2, 2],
            "at",
            "last document offset is 2, expected the shard's 3",
        ),
        (4, "offsets-00002", [0, 1, 99, 3], 5, r"decrease at document 2 \(99 -> 3\)"),
        (99, "offsets-00000", [0, 3, 3, 99, 9, 9, 11], 3, r"at document 3 \(99 -> 9\)"),
    ],
)
def test_single_offsets_are_checked_where_they_are_read(
    tmp_path, shard_tokens, name, offsets, read, match
):
    # documents_at and document_offsets read a few offsets, not the shard's run: an answer
    # outside the shard, or a position no document found holds, runs the full check
    write_corpus(tmp_path / "c", DOCS, shard_tokens=shard_tokens)
    np.array(offsets, "<i8").tofile(tmp_path / "c" / f"{name}.bin")  # same size
    src = open_corpus(tmp_path / "c")
    with pytest.raises(CorpusError, match=rf"{name}\.bin: .*{match}"):
        src.documents_at(np.array([10])) if read == "at" else src.document_offsets([read])


def test_mapped_shards_are_bounded_and_mapped_again_when_read(tmp_path, monkeypatch):
    # Each mapped shard holds two descriptors (tokens and offsets maps): past the bound the
    # least recently used maps are dropped, so a corpus of any number of shards is readable.
    rng = np.random.default_rng(2)
    docs = [rng.integers(1, 500, size=rng.integers(1, 30)) for _ in range(300)]
    path = tmp_path / "c"
    write_corpus(path, docs, shard_tokens=100)
    config = gp.PipelineConfig(sources={"c": str(path)}, block=32, global_batch_size=4)
    want = list(itertools.islice(gp.make_dataset(config, process_index=0, process_count=1), 60))
    monkeypatch.setattr("grainpack.corpus.source.MAX_MAPPED_SHARDS", 4)
    src = open_corpus(path)
    assert len(src.shards) > 40
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(2):  # every shard mapped, dropped, and mapped again
        assert all(np.array_equal(src[i], d) for i, d in enumerate(docs))
        assert len(os.listdir("/proc/self/fd")) <= before + 2 * 4
        assert sum(m is not None for m in src._maps) <= 4
    got = itertools.islice(gp.make_dataset(config, process_index=0, process_count=1), 60)
    for step, (a, b) in enumerate(zip(got, want, strict=True)):
        assert all(np.array_equal(a[k], b[k]) for k in b), step
