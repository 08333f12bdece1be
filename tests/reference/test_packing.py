"""Tests for grainpack.packing: concatenate-and-chunk rows, padding, efficiency."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from grainpack.index.stream import stream_plan
from grainpack.ingest.writer import write_corpus
from grainpack.reference.packing import PackedCorpus, pack_documents

DOCS = [np.array([1, 2, 3]), np.array([4, 5]), np.array([6]), np.array([7, 8, 9, 10])]


def test_pack_documents_golden_without_boundary():
    # Stream 1..10 in rows of block + 1 = 4; only the last row is padded (two zeros).
    packed = pack_documents(DOCS, [0, 1, 2, 3], 3)
    assert packed.rows.tolist() == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 0, 0]]
    assert packed.rows.dtype == np.int64
    assert (packed.real_tokens, packed.total_tokens) == (10, 12)
    assert packed.packing_efficiency == 10 / 12
    assert len(packed) == 3


def test_pack_documents_golden_with_boundary():
    # 1 2 3 | 4 5 | 6 | 7 8 9 10 with boundary 99 between documents (not after the last):
    # 13 real tokens -> 4 rows of 4, the last holding one real token and three pads.
    packed = pack_documents(DOCS, [0, 1, 2, 3], 3, pad_id=-1, boundary_id=99)
    assert packed.rows.tolist() == [
        [1, 2, 3, 99],
        [4, 5, 99, 6],
        [99, 7, 8, 9],
        [10, -1, -1, -1],
    ]
    assert (packed.real_tokens, packed.total_tokens) == (13, 16)


def test_pack_documents_golden_order_and_exact_fill():
    # Indices are packed in the given order; 4 tokens fill two rows of 2 exactly: no padding.
    packed = pack_documents(DOCS, [2, 0], 1)
    assert packed.rows.tolist() == [[6, 1], [2, 3]]
    assert packed.packing_efficiency == 1.0


def test_pack_documents_repeats_and_empty_documents_keep_boundaries():
    docs = [np.array([], dtype=np.int64), np.array([5])]
    # [] | 5 | [] -> stream [7, 5, 7]: boundaries still separate empty documents.
    packed = pack_documents(docs, [0, 1, 0], 2, boundary_id=7)
    assert packed.rows.tolist() == [[7, 5, 7]]


def test_pack_documents_empty_stream_has_no_rows():
    packed = pack_documents(DOCS, [], 4)
    assert packed.rows.shape == (0, 5)
    assert packed.real_tokens == packed.total_tokens == 0
    assert packed.packing_efficiency == 0.0  # documented: nothing packed is not "efficient"
    assert pack_documents([np.array([], dtype=np.int64)], [0], 4).rows.shape == (0, 5)


@pytest.mark.parametrize(
    ("indices", "block", "error", "match"),
    [
        ([0, 4], 3, ValueError, r"document ids in \[0, 4\), got \[4\]"),  # past the end
        ([-1], 3, ValueError, r"got \[-1\]"),  # negative ids do not wrap
        ([0], 0, ValueError, "block must be >= 1"),  # empty rows
        ([[0]], 3, ValueError, "1-D"),  # nested indices
        ([0.0], 3, ValueError, "integer"),  # float indices
        ([0], 2.0, TypeError, "block must be an int"),  # float block
    ],
)
def test_pack_documents_validates(indices, block, error, match):
    with pytest.raises(error, match=match):
        pack_documents(DOCS, indices, block)


def test_pack_documents_rejects_2d_document():
    with pytest.raises(ValueError, match="1-D token arrays"):
        pack_documents([np.zeros((2, 2), dtype=np.int64)], [0], 3)


def test_pack_documents_from_source_equals_list(tmp_path):
    docs = [list(range(k, k + n)) for k, n in [(10, 5), (100, 0), (200, 7), (300, 1)]]
    source = write_corpus(tmp_path / "c", docs, shard_tokens=4)  # documents cross shards
    indices = [3, 0, 2, 1, 2]
    a = pack_documents(source, indices, 4, pad_id=1, boundary_id=0)
    b = pack_documents([np.array(d) for d in docs], indices, 4, pad_id=1, boundary_id=0)
    assert np.array_equal(a.rows, b.rows)
    assert (a.real_tokens, a.total_tokens) == (b.real_tokens, b.total_tokens)


@given(
    st.lists(st.lists(st.integers(1, 50), max_size=12), max_size=8),
    st.integers(1, 9),
    st.booleans(),
    st.data(),
)
def test_pack_documents_rows_are_the_joined_stream(docs, block, boundary, data):
    arrays = [np.array(d, dtype=np.int64) for d in docs]
    indices = data.draw(st.lists(st.integers(0, max(len(docs) - 1, 0)), max_size=10))
    indices = indices if docs else []
    bid = -7 if boundary else None
    packed = pack_documents(arrays, indices, block, pad_id=0, boundary_id=bid)
    stream: list[int] = []
    for k, i in enumerate(indices):
        if k and boundary:
            stream.append(-7)
        stream += docs[i]
    flat = packed.rows.reshape(-1).tolist()
    assert flat[: len(stream)] == stream
    assert flat[len(stream) :] == [0] * (len(flat) - len(stream))  # padding only at the end
    assert len(flat) - len(stream) < block + 1  # ... and within the final row
    assert packed.real_tokens == len(stream)
    assert packed.rows.shape == (-(-len(stream) // (block + 1)), block + 1)


def test_stream_length_and_row_count_golden():
    assert stream_plan([3, 2, 1, 4], None, boundary=False).total == 10
    assert stream_plan([3, 2, 1, 4], None, boundary=True).total == 13
    assert stream_plan([], None, boundary=True).total == 0
    rows = [stream_plan([n], None, boundary=False).num_rows(3) for n in (0, 1, 4, 5, 13)]
    assert rows == [0, 1, 1, 2, 4]


def test_packed_corpus_efficiency_property():
    assert PackedCorpus(np.zeros((1, 4), np.int64), 3, 4).packing_efficiency == 0.75


@pytest.mark.parametrize(
    ("doc", "options", "error", "match"),
    [
        (np.array([1, 2**64 - 1], np.uint64), {}, ValueError, "document 0 holds the id 1844"),
        (np.array([1.7, 2.0]), {}, TypeError, "document 0 has dtype float64"),
        (np.array([True]), {}, TypeError, "document 0 has dtype bool"),
        (np.array([1, 2]), {"pad_id": np.uint64(2**63)}, ValueError, "pad_id must fit"),
        (np.array([1, 2]), {"boundary_id": 2**64}, ValueError, "boundary_id must fit"),
    ],
)
def test_ids_the_int64_rows_cannot_hold_are_refused(doc, options, error, match):
    # they wrapped (2**64 - 1 -> -1) or were truncated (1.7 -> 1) silently
    with pytest.raises(error, match=match):
        pack_documents([doc], [0], 2, **options)


def test_ids_at_the_int64_limit_and_empty_float_documents_pack():
    top = np.array([2**63 - 1], np.uint64)
    rows = pack_documents([np.array([]), top], [0, 1], 1, pad_id=-(2**63), boundary_id=7).rows
    assert rows.tolist() == [[7, 2**63 - 1]]
