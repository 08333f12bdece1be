"""Row assembly: model arrays from spans, and provenance that rebuilds every row."""

from __future__ import annotations

import numpy as np
import pytest

import grainpack as gp
from grainpack.index.packed import Part, pack_rows, segment_bits
from grainpack.index.stream import row_spans, stream_plan
from grainpack.pipeline.batches import PipelineBatches
from grainpack.pipeline.expand import expand_rows
from grainpack.pipeline.gather import RowReader


class ListReader:
    """A stream reader over a list of documents (what row assembly needs)."""

    def __init__(self, docs, dtype=np.int64):
        self.stream = np.concatenate(docs).astype(dtype)
        self.offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])])
        self.dtype = np.dtype(dtype)
        self.num_tokens = len(self.stream)

    def document_offsets(self, documents):
        return self.offsets[documents]

    @property
    def shard_starts(self):
        return np.array([0, len(self.stream)])

    def shard_view(self, shard):
        return memoryview(self.stream)


def assemble_rows(parts, *, num_rows, block, pad_id, boundary_id, provenance=False):
    packed = pack_rows(
        parts, num_rows=num_rows, block=block, boundary=boundary_id is not None,
        provenance=provenance,
    )  # fmt: skip
    readers = [p.stream for p in parts]
    reader = RowReader(packed, readers, block=block, pad_id=pad_id, boundary_id=boundary_id)
    return expand_rows(packed, reader.read(0, num_rows))


def test_assemble_rows_golden_with_boundaries_and_padding_row():
    docs = [np.array([10, 11, 12]), np.array([20]), np.array([30, 31, 32, 33, 34])]
    plan = stream_plan(np.array([3, 1, 5]), np.array([2, 0, 1]), boundary=True)
    # stream: 30 31 32 33 34 B | 10 11 12 B | 20  (B = 7) -> rows of 4: [30 31 32 33]
    # [34 B 10 11] [12 B 20 pad]
    spans = row_spans(plan, np.array([1, 2]), block=3)
    part = Part(0, 0, ListReader(docs), spans, np.array([0, 2]))
    out = assemble_rows([part], num_rows=3, block=3, pad_id=0, boundary_id=7, provenance=True)
    assert out["inputs"].tolist() == [[34, 7, 10], [0, 0, 0], [12, 7, 20]]
    assert out["targets"].tolist() == [[7, 10, 11], [0, 0, 0], [7, 20, 0]]
    assert out["segment_ids"].tolist() == [[1, 1, 2], [0, 0, 0], [1, 1, 2]]
    assert out["positions"].tolist() == [[0, 1, 0], [0, 0, 0], [0, 1, 0]]
    assert out["loss_mask"].tolist() == [[1, 1, 1], [0, 0, 0], [1, 1, 0]]
    assert out["source"].tolist() == [0, -1, 0]
    # block + 1 columns: the most segments a row can hold, so every batch has one shape
    assert out["segment_document"].tolist() == [[2, 0, -1, -1], [-1] * 4, [0, 1, -1, -1]]
    assert out["segment_offset"].tolist() == [[4, 0, -1, -1], [-1] * 4, [2, 0, -1, -1]]


def test_boundary_spans_need_a_boundary_id():
    plan = stream_plan(np.array([2, 2]), None, boundary=True)
    part = Part(
        0,
        0,
        ListReader([np.array([1, 2]), np.array([3, 4])]),
        row_spans(plan, np.array([0]), block=4),
        np.array([0]),
    )
    with pytest.raises(ValueError, match="boundary_id is None"):
        assemble_rows([part], num_rows=1, block=4, pad_id=0, boundary_id=None)


@pytest.mark.parametrize("unit", ["documents", "windows"])
def test_provenance_rebuilds_every_row_from_the_corpus(tmp_path, unit):
    rng = np.random.default_rng(0)
    paths = {}
    for name, n in (("a", 30), ("b", 8)):
        docs = [rng.integers(1, 300, size=rng.integers(1, 25)) for _ in range(n)]
        gp.write_corpus(tmp_path / name, docs, shard_tokens=64)
        paths[name] = str(tmp_path / name)
    boundary = 999 if unit == "documents" else None
    cfg = gp.PipelineConfig(
        sources=paths,
        block=12,
        global_batch_size=6,
        seed=4,
        unit=unit,
        boundary_id=boundary,
        provenance=True,
    )
    corpora = [gp.open_corpus(p) for p in paths.values()]
    it = iter(gp.make_dataset(cfg, process_index=1, process_count=2))
    for _ in range(12):
        batch = next(it)
        for r in range(3):
            source = corpora[batch["source"][r]]
            segments = batch["segment_ids"][r]
            documents = batch["segment_document"][r]
            n_segments = int((documents >= 0).sum())
            real = int((segments > 0).sum() + batch["loss_mask"][r, -1])
            sizes = [int((segments == k + 1).sum()) for k in range(n_segments)]
            sizes[-1] = real - sum(sizes[:-1])  # the row's last token may open a segment
            rebuilt = []
            for k, size in enumerate(sizes):
                start = int(batch["segment_offset"][r, k])
                tokens = list(source[int(documents[k])][start : start + size])
                if len(tokens) < size:  # the segment runs past its document: boundary token
                    tokens.append(boundary)
                rebuilt += tokens
            row = [*list(batch["inputs"][r]), batch["targets"][r, -1]]
            assert rebuilt == row[: len(rebuilt)]
            assert all(t == cfg.pad_id for t in row[len(rebuilt) :])


@pytest.mark.parametrize("dtypes", [("uint16", "uint16"), ("uint16", "uint32"), ("uint32",) * 2])
@pytest.mark.parametrize("boundary_id", [None, 7])
@pytest.mark.parametrize("compiled", [True, False])  # True: numba's gather where installed
def test_row_reader_equals_naive_rows_across_shards_and_dtypes(
    tmp_path, dtypes, boundary_id, compiled
):
    rng = np.random.default_rng(3)
    block, pad_id, num_rows = 9, 0, 30
    width = block + 1
    parts, expected = [], np.full((num_rows, width), pad_id, dtype=np.int64)
    free = rng.permutation(num_rows)[: num_rows - 4]  # 4 rows stay padding
    for j, dtype in enumerate(dtypes):
        high = 60_000 if dtype == "uint16" else 100_000
        docs = [rng.integers(1, high, size=rng.integers(0, 25)) for _ in range(40)]
        src = gp.write_corpus(tmp_path / f"s{j}", docs, dtype=dtype, shard_tokens=40)
        assert len(src.shards) > 5  # pieces cross shard ends
        order = rng.permutation(len(docs))
        with_boundary = [[*docs[d], boundary_id] for d in order] if boundary_id else None
        stream = np.concatenate(
            [np.concatenate(with_boundary)[:-1]] if with_boundary else [docs[d] for d in order]
        )
        plan = stream_plan(src.lengths, order, boundary=boundary_id is not None)
        rows = rng.choice(plan.num_rows(block), size=13, replace=False)
        destination = free[13 * j : 13 * (j + 1)]
        for r, d in zip(rows, destination):
            row = stream[r * width : (r + 1) * width]
            expected[d, : len(row)] = row
        spans = row_spans(plan, np.sort(rows), block=block)
        parts.append(Part(j, 0, src, spans, destination[np.argsort(rows)]))
    packed = pack_rows(parts, num_rows=num_rows, block=block, boundary=boundary_id is not None)
    readers = [p.stream for p in parts]
    reader = RowReader(
        packed, readers, block=block, pad_id=pad_id, boundary_id=boundary_id, compiled=compiled
    )
    assert reader.dtype == np.dtype(dtypes[1])  # uint16 with uint32: uint32
    got = np.concatenate([reader.read(a, b) for a, b in ((0, 7), (7, 8), (8, 30))])
    np.testing.assert_array_equal(got, expected)


def test_row_reader_converts_shards_stored_in_another_byte_order():
    # A little-endian file on a big-endian host, mirrored: the reader's dtype is native
    # uint16 while its shard's bytes are big-endian.
    class SwappedReader(ListReader):
        def shard_view(self, shard):
            return memoryview(self.stream.astype(">u2"))

    docs = [np.array([1, 2, 300]), np.array([40_000, 5])]
    reader = SwappedReader(docs, dtype=np.uint16)
    plan = stream_plan(np.array([3, 2]), None, boundary=True)
    part = Part(0, 0, reader, row_spans(plan, np.array([0, 1]), block=2), np.array([0, 1]))
    out = assemble_rows([part], num_rows=2, block=2, pad_id=0, boundary_id=7)
    assert out["inputs"].tolist() == [[1, 2], [7, 40_000]]
    assert out["targets"].tolist() == [[2, 300], [40_000, 5]]


def test_provenance_of_a_segment_that_is_only_the_last_target():
    # stream 10 B 20 21 22 (B = 7), rows of 3: [10 B 20] [21 22 pad]; row 0's last input is
    # the boundary, so its last token (a target only) starts document 1.
    docs = [np.array([10]), np.array([20, 21, 22])]
    plan = stream_plan(np.array([1, 3]), None, boundary=True)
    part = Part(0, 0, ListReader(docs), row_spans(plan, np.array([0, 1]), block=2), np.arange(2))
    out = assemble_rows([part], num_rows=2, block=2, pad_id=0, boundary_id=7, provenance=True)
    assert out["inputs"].tolist() == [[10, 7], [21, 22]]
    assert out["targets"].tolist() == [[7, 20], [22, 0]]
    assert out["segment_ids"].tolist() == [[1, 1], [1, 1]]  # segment 2 of row 0: no input
    assert out["segment_document"].tolist() == [[0, 1, -1], [1, -1, -1]]
    assert out["segment_offset"].tolist() == [[0, 0, -1], [1, -1, -1]]


def test_segment_bits_equal_packbits_of_the_dense_starts_even_when_bytes_are_shared():
    rng = np.random.default_rng(5)
    for num_rows, block in [(1, 8), (3, 10), (4, 17), (2, 64)]:
        for _ in range(50):
            n = int(rng.integers(0, 3 * block))  # dense: many starts share a byte
            row, offset = rng.integers(0, num_rows, n), rng.integers(0, block, n)
            dense = np.zeros((num_rows, block), dtype=bool)
            dense[row, offset] = True  # duplicates set one bit once
            got = segment_bits(row, offset, num_rows=num_rows, block=block)
            np.testing.assert_array_equal(got, np.packbits(dense, axis=1))
    # golden: starts at 0, 1 and 7 share byte 0; 8 is byte 1's first bit
    got = segment_bits(np.zeros(4, int), np.array([7, 0, 8, 1]), num_rows=1, block=9)
    assert got.tolist() == [[0b11000001, 0b10000000]]


def test_a_provenance_plan_holds_its_segments_not_block_wide_tables(tmp_path):
    rng = np.random.default_rng(3)
    gp.write_corpus(
        tmp_path / "c", [rng.integers(1, 900, size=rng.integers(20, 300)) for _ in range(400)]
    )
    cfg = gp.PipelineConfig(
        sources={"c": str(tmp_path / "c")}, block=1024, global_batch_size=4, provenance=True
    )
    plan = PipelineBatches(cfg).packed_steps(0, 0, steps=16)
    provenance = plan.provenance
    segments = len(provenance.segment_slot)
    assert segments < plan.num_rows * 10  # a few per row: ~160 tokens a document
    held = sum(a.nbytes for a in vars(provenance).values())
    assert held == 24 * segments + 12 * plan.num_rows  # not 16 * 1025 bytes a row
    rows = provenance.rows(8, 12, width=1025)  # a batch's tables, laid out on demand
    assert rows["segment_document"].shape == (4, 1025)
    slot = provenance.segment_slot
    want = slot[(slot >= 8 * 1025) & (slot < 12 * 1025)] - 8 * 1025
    assert np.flatnonzero(rows["segment_document"].reshape(-1) >= 0).tolist() == want.tolist()
