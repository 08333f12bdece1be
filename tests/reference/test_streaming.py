"""Tests for grainpack.reference.streaming: per-rank shuffled, packed micro-batches."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grainpack.index.orders import global_document_order
from grainpack.ingest.writer import write_corpus
from grainpack.reference.packing import pack_documents
from grainpack.reference.streaming import StreamingCorpus

DOCS = [np.array(d) for d in ([10, 11], [20], [30, 31, 32], [40], [50, 51])]


class SpyDocuments:
    """A document list that records which documents were read."""

    def __init__(self, docs):
        self.docs, self.read = docs, set()

    def __len__(self):
        return len(self.docs)

    def __getitem__(self, i):
        self.read.add(int(i))
        return self.docs[i]


def _corpus(rank, world_size=2, **kw):
    return StreamingCorpus(
        DOCS, rank=rank, world_size=world_size, block=2, batch_size=2, boundary_id=9, **kw
    )


def test_streaming_corpus_golden_rank_indices():
    # Epoch-0 order for seed 0 over 5 documents (default_rng([0, 0, 0xD0C5]).permutation(5))
    # is [2, 4, 0, 3, 1]; round-robin over 2 ranks takes positions 0, 2, 4 and 1, 3.
    assert global_document_order(5, seed=0, epoch=0).tolist() == [2, 4, 0, 3, 1]
    assert _corpus(0).rank_document_indices(0).tolist() == [2, 0, 1]
    assert _corpus(1).rank_document_indices(0).tolist() == [4, 3]


def test_streaming_corpus_golden_batches_rank0():
    # Rank 0 packs docs 2, 0, 1 with boundary 9: 30 31 32 9 10 11 9 20 -> rows of 3:
    # [30 31 32] [9 10 11] [9 20 pad]; batches of 2 rows, then 1.
    sc = _corpus(0, pad_id=-1)
    batches = list(sc.epoch_batches(0))
    assert [x.tolist() for x, _ in batches] == [[[30, 31], [9, 10]], [[9, 20]]]
    assert [y.tolist() for _, y in batches] == [[[31, 32], [10, 11]], [[20, -1]]]
    assert batches[0][0].dtype == np.float32
    assert batches[0][1].dtype == np.int64
    assert sc.last_packing_efficiency == 8 / 9


def test_streaming_corpus_golden_batches_rank1():
    # Rank 1 packs docs 4, 3: 50 51 9 40 -> [50 51 9] [40 0 0].
    sc = _corpus(1)
    ((x, y),) = list(sc.epoch_batches(0))
    assert x.tolist() == [[50, 51], [40, 0]]
    assert y.tolist() == [[51, 9], [0, 0]]
    assert sc.last_packing_efficiency == 4 / 6


def test_streaming_corpus_is_deterministic_and_epochs_differ():
    a = [(x.tolist(), y.tolist()) for x, y in _corpus(0).epoch_batches(3)]
    b = [(x.tolist(), y.tolist()) for x, y in _corpus(0).epoch_batches(3)]
    assert a == b
    assert not np.array_equal(
        _corpus(0).rank_document_indices(0), _corpus(0).rank_document_indices(1)
    )


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 9), min_size=0, max_size=25),
    st.integers(1, 4),
    st.integers(1, 6),
    st.integers(1, 3),
    st.integers(0, 5),
    st.booleans(),
)
def test_streaming_corpus_batches_concatenate_to_packed_rows(
    lengths, world, block, batch_size, epoch, boundary
):
    docs = [np.arange(100 * i, 100 * i + n) for i, n in enumerate(lengths)]
    covered = []
    for rank in range(world):
        sc = StreamingCorpus(
            docs,
            rank=rank,
            world_size=world,
            block=block,
            batch_size=batch_size,
            seed=3,
            boundary_id=-5 if boundary else None,
        )
        indices = sc.rank_document_indices(epoch)
        covered += indices.tolist()
        rows = pack_documents(docs, indices, block, boundary_id=-5 if boundary else None).rows
        batches = list(sc.epoch_batches(epoch))
        assert all(x.shape[0] <= batch_size for x, _ in batches)
        assert all(x.shape[0] == batch_size for x, _ in batches[:-1])
        x = np.concatenate([b[0] for b in batches]) if batches else np.zeros((0, block))
        y = np.concatenate([b[1] for b in batches]) if batches else np.zeros((0, block))
        assert np.array_equal(x, rows[:, :-1].astype(np.float32))
        assert np.array_equal(y, rows[:, 1:])
    assert sorted(covered) == list(range(len(docs)))  # ranks disjoint and complete


def test_streaming_corpus_reads_only_its_own_documents():
    spy = SpyDocuments(DOCS)
    sc = StreamingCorpus(spy, rank=1, world_size=2, block=2, batch_size=4)
    list(sc.epoch_batches(0))
    assert spy.read == {4, 3}


def test_streaming_corpus_over_source_equals_list(tmp_path):
    source = write_corpus(tmp_path / "c", [d.tolist() for d in DOCS])
    for rank in range(2):
        a = _corpus(rank)
        b = StreamingCorpus(source, rank=rank, world_size=2, block=2, batch_size=2, boundary_id=9)
        for (xa, ya), (xb, yb) in zip(a.epoch_batches(1), b.epoch_batches(1), strict=True):
            assert np.array_equal(xa, xb)
            assert np.array_equal(ya, yb)


def test_streaming_corpus_selector_is_applied():
    def only_even(order, seed, epoch):
        return order[order % 2 == 0]

    sc = StreamingCorpus(
        DOCS, rank=0, world_size=1, block=2, batch_size=2, sequence_selector=only_even
    )
    assert sorted(sc.rank_document_indices(0).tolist()) == [0, 2, 4]


def test_streaming_corpus_empty_rank_yields_nothing():
    sc = StreamingCorpus(DOCS[:1], rank=1, world_size=2, block=2, batch_size=2)
    assert list(sc.epoch_batches(0)) == []
    assert sc.last_packing_efficiency == 0.0


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"rank": 2, "world_size": 2}, ValueError, r"rank must be in \[0, world_size\)"),
        ({"rank": 0, "world_size": 0}, ValueError, "world_size must be >= 1"),
        ({"rank": 0, "world_size": 1, "block": 0}, ValueError, "block must be >= 1"),
        ({"rank": 0, "world_size": 1, "batch_size": 0}, ValueError, "batch_size must be >= 1"),
        ({"rank": 0, "world_size": 1, "seed": -1}, ValueError, "seed must be >= 0"),
        ({"rank": 0, "world_size": 1, "pad_id": 0.5}, TypeError, "pad_id must be an int"),
        ({"rank": 0, "world_size": 1, "sequence_selector": 3}, TypeError, "callable"),
    ],
)
def test_streaming_corpus_validates(kwargs, error, match):
    options = {"block": 2, "batch_size": 2, **kwargs}
    with pytest.raises(error, match=match):
        StreamingCorpus(DOCS, **options)
