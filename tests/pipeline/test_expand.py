"""Expansion: the full layout's model arrays, and the compact layout that determines them."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

import grainpack as gp
from grainpack.index.packed import Part, pack_rows
from grainpack.index.stream import row_spans, stream_plan
from grainpack.pipeline.batches import PipelineBatches
from grainpack.pipeline.expand import compact_rows, describe_rows, expand_compact, expand_rows
from grainpack.pipeline.gather import RowReader


class ListReader:
    """A stream reader over a list of documents (what row assembly needs)."""

    def __init__(self, docs):
        self.stream = np.concatenate(docs).astype(np.uint16)
        self.offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])])
        self.dtype = np.dtype(np.uint16)
        self.shard_starts = np.array([0, len(self.stream)])
        self.num_tokens = len(self.stream)

    def document_offsets(self, documents):
        return self.offsets[documents]

    def shard_view(self, shard):
        return memoryview(self.stream)


def both_layouts(docs, order, rows, destination, *, num_rows, block, boundary_id):
    """The compact and the full batch of the given rows of ``docs`` in ``order``."""
    reader = ListReader(docs)
    plan = stream_plan(np.array([len(d) for d in docs]), order, boundary=boundary_id is not None)
    spans = row_spans(plan, np.array(rows), block=block)
    part = Part(0, 0, reader, spans, np.array(destination))
    packed = pack_rows([part], num_rows=num_rows, block=block, boundary=boundary_id is not None)
    tokens = RowReader(packed, [reader], block=block, pad_id=0, boundary_id=boundary_id).read(
        0, num_rows
    )
    return compact_rows(packed, tokens), expand_rows(packed, tokens.copy())


def test_compact_batch_golden_with_boundaries_and_a_padding_row():
    docs = [np.array([10, 11, 12]), np.array([20]), np.array([30, 31, 32, 33, 34])]
    # stream: 30 31 32 33 34 B | 10 11 12 B | 20  (B = 7) -> rows of 4: [30 31 32 33]
    # [34 B 10 11] [12 B 20 pad]; batch rows: row 1, a padding row, row 2
    compact, full = both_layouts(
        docs, np.array([2, 0, 1]), [1, 2], [0, 2], num_rows=3, block=3, boundary_id=7
    )
    assert sorted(compact) == ["filled", "segment_starts", "tokens"]
    assert compact["tokens"].dtype == np.uint16  # the corpus dtype, as gathered
    assert compact["tokens"].tolist() == [[34, 7, 10, 11], [0, 0, 0, 0], [12, 7, 20, 0]]
    # segments start at inputs 0 and 2 of rows 0 and 2: bits 1010_0000
    assert compact["segment_starts"].dtype == np.uint8
    assert compact["segment_starts"].tolist() == [[0b10100000], [0], [0b10100000]]
    assert compact["filled"].dtype == np.int32 and compact["filled"].tolist() == [4, 0, 3]
    out = expand_compact(compact)
    assert out["inputs"].tolist() == [[34, 7, 10], [0, 0, 0], [12, 7, 20]]
    assert out["targets"].tolist() == [[7, 10, 11], [0, 0, 0], [7, 20, 0]]
    assert out["segment_ids"].tolist() == [[1, 1, 2], [0, 0, 0], [1, 1, 2]]
    assert out["positions"].tolist() == [[0, 1, 0], [0, 0, 0], [0, 1, 0]]
    assert out["loss_mask"].tolist() == [[1, 1, 1], [0, 0, 0], [1, 1, 0]]
    for key, value in full.items():
        assert out[key].dtype == np.int32
        np.testing.assert_array_equal(out[key], value, err_msg=key)


def test_compact_batch_golden_over_two_bytes_and_a_document_opening_on_the_last_token():
    docs = [np.arange(1, 9), np.arange(11, 15), np.array([21]), np.arange(31, 36)]
    # no boundary, block 13 (2 bytes of bits, 3 unused). Row 0: 8 + 4 + 1 tokens, then the
    # last document opens on the row's last token (a target only, no input position); row
    # 1: the rest of that document, then padding.
    compact, full = both_layouts(docs, None, [0, 1], [0, 1], num_rows=2, block=13, boundary_id=None)
    assert compact["tokens"].tolist() == [
        [*range(1, 9), *range(11, 15), 21, 31],
        [32, 33, 34, 35] + [0] * 10,
    ]
    assert compact["filled"].tolist() == [14, 4]
    assert compact["segment_starts"].tolist() == [[0b10000000, 0b10001000], [0b10000000, 0]]
    out = expand_compact(compact)
    assert out["segment_ids"].tolist() == [[1] * 8 + [2] * 4 + [3], [1] * 4 + [0] * 9]
    assert out["positions"].tolist() == [[*range(8), *range(4), 0], [0, 1, 2, 3] + [0] * 9]
    assert out["loss_mask"].tolist() == [[1] * 13, [1] * 3 + [0] * 10]
    for key, value in full.items():
        np.testing.assert_array_equal(out[key], value, err_msg=key)


def short_documents_corpus(tmp_path, name="c", *, seed=0, n=400, high=6):
    rng = np.random.default_rng(seed)
    docs = [rng.integers(1, 1000, size=rng.integers(1, high)) for _ in range(n)]
    gp.write_corpus(tmp_path / name, docs, vocab_size=1001, shard_tokens=500)
    return str(tmp_path / name)


CONFIGS = {
    # many short documents (1-5 tokens): rows of up to block + 1 segments
    "short documents, boundary": dict(boundary_id=1000),
    "short documents, no boundary": dict(),
    "windows": dict(unit="windows"),
    "long documents, boundary": dict(boundary_id=1000, long=True),
}


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("process_count", [1, 2])
def test_compact_batches_expand_to_the_full_batches(tmp_path, name, process_count):
    kwargs = dict(CONFIGS[name])
    high = 300 if kwargs.pop("long", False) else 6
    sources = {
        "a": short_documents_corpus(tmp_path, "a", high=high),
        "b": short_documents_corpus(tmp_path, "b", seed=1, n=50, high=high),
    }
    full = gp.PipelineConfig(sources=sources, block=21, global_batch_size=4, seed=2, **kwargs)
    compact = dataclasses.replace(full, layout="compact")
    assert PipelineBatches(full).fingerprint == PipelineBatches(compact).fingerprint
    for p in range(process_count):
        want = iter(gp.make_dataset(full, process_index=p, process_count=process_count))
        got = iter(gp.make_dataset(compact, process_index=p, process_count=process_count))
        for step in range(60):
            batch = next(got)
            assert batch["tokens"].shape == (4 // process_count, 22)
            assert batch["segment_starts"].shape == (4 // process_count, 3)
            expected, out = next(want), expand_compact(batch)
            assert sorted(out) == sorted(expected)
            for key, value in expected.items():
                np.testing.assert_array_equal(out[key], value, err_msg=f"{key} step {step}")
        assert got.get_state() == want.get_state()  # the digest is the full layout's


@pytest.mark.parametrize(
    ("dtypes", "ids", "want"),
    [
        (("uint16", "uint16"), {}, np.uint16),
        (("uint32", "uint32"), {}, np.uint32),
        (("uint16", "uint32"), {}, np.uint32),  # one dtype for every batch, whatever it mixes
        (("uint16", "uint16"), {"boundary_id": 70_000}, np.uint32),  # the boundary must fit
    ],
)
def test_compact_tokens_keep_the_corpus_dtype_widened_only_to_uint32(tmp_path, dtypes, ids, want):
    rng = np.random.default_rng(4)
    sources = {}
    for name, dtype in zip("ab", dtypes):
        docs = [rng.integers(1, 1000, size=rng.integers(1, 30)) for _ in range(40)]
        vocab = 70_001 if dtype == "uint32" else None  # a boundary past uint16 needs none
        gp.write_corpus(tmp_path / name, docs, dtype=dtype, vocab_size=vocab)
        sources[name] = str(tmp_path / name)
    weights = {"a": 0.9, "b": 0.1}  # some batches read only one of the sources
    kwargs = dict(sources=sources, block=16, global_batch_size=2, weights=weights, **ids)
    full = gp.PipelineConfig(**kwargs)
    compact = dataclasses.replace(full, layout="compact")
    want_batches = iter(gp.make_dataset(full, process_index=0, process_count=1))
    for batch in itertools.islice(gp.make_dataset(compact, process_index=0, process_count=1), 40):
        assert batch["tokens"].dtype == want
        expected, out = next(want_batches), expand_compact(batch)
        for key, value in expected.items():
            np.testing.assert_array_equal(out[key], value)


def test_compact_evaluation_batches_with_padding_rows_expand_to_the_full_ones(tmp_path):
    path = short_documents_corpus(tmp_path, n=60)
    full = gp.PipelineConfig(sources={"c": path}, block=16, global_batch_size=6, boundary_id=1000)
    compact = dataclasses.replace(full, layout="compact")
    filled = []
    for process in (0, 1):
        want = list(gp.make_eval_dataset(full, process_index=process, process_count=2))
        got = list(gp.make_eval_dataset(compact, process_index=process, process_count=2))
        assert len(got) == len(want)
        for batch, expected in zip(got, want):
            filled += batch["filled"].tolist()
            out = expand_compact(batch)
            for key, value in expected.items():
                np.testing.assert_array_equal(out[key], value, err_msg=key)
    assert 0 in filled and any(0 < f < 17 for f in filled)  # padding rows, a padded row


def test_compact_batches_keep_provenance_per_segment(tmp_path):
    path = short_documents_corpus(tmp_path)
    kwargs = dict(sources={"c": path}, block=12, global_batch_size=2, provenance=True)
    full = gp.PipelineConfig(**kwargs)
    want = next(iter(gp.make_dataset(full, process_index=0, process_count=1)))
    compact = gp.PipelineConfig(**kwargs, layout="compact")
    got = next(iter(gp.make_dataset(compact, process_index=0, process_count=1)))
    for key in ("source", "epoch", "segment_document", "segment_offset"):
        np.testing.assert_array_equal(got[key], want[key])
    assert got["segment_document"].shape == (2, 13)


def test_rows_described_once_per_plan_equal_those_of_each_batch(tmp_path):
    path = short_documents_corpus(tmp_path)
    config = gp.PipelineConfig(sources={"c": path}, block=30, global_batch_size=3, layout="compact")
    batches = PipelineBatches(config)
    plan = batches.packed_steps(5, 0, steps=7)
    rows = describe_rows(plan, block=30)
    assert rows["segment_starts"].shape == (21, 4) and rows["segment_starts"].dtype == np.uint8
    assert rows["filled"].shape == (21,) and rows["filled"].dtype == np.int32
    for step in range(7):
        batch = batches.batch(5 + step, 0)
        for key, value in rows.items():
            np.testing.assert_array_equal(batch[key], value[3 * step : 3 * step + 3])
