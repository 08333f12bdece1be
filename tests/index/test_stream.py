"""Row plans: spans of rows, epochs of occurrences (pure, golden values by hand)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grainpack as gp
from grainpack.index.stream import SourceRows, row_spans, stream_plan


def test_row_spans_golden():
    # documents 0..2 of lengths 2, 0, 4 in order [2, 1, 0] with boundaries:
    # stream = d2 d2 d2 d2 B | B | d0 d0  (empty document 1 keeps its boundary) -> 8 tokens,
    # rows of 3: [d2 d2 d2] [d2 B B] [d0 d0]
    plan = stream_plan(np.array([2, 0, 4]), np.array([2, 1, 0]), boundary=True)
    assert plan.total == 8 and plan.num_rows(2) == 3
    s = row_spans(plan, np.array([0, 1, 2]), block=2)
    assert s.row.tolist() == [0, 1, 1, 2]
    assert s.document.tolist() == [2, 2, 1, 0]
    assert s.start.tolist() == [0, 3, 0, 0]
    assert s.length.tolist() == [3, 1, 0, 2]
    assert s.boundary.tolist() == [False, True, True, False]
    assert s.offset.tolist() == [0, 0, 2, 0]
    assert s.filled.tolist() == [3, 3, 2]


def test_row_spans_rejects_rows_outside_the_epoch():
    plan = stream_plan(np.array([5]), None, boundary=False)
    with pytest.raises(IndexError, match=r"rows must lie in \[0, 2\)"):
        row_spans(plan, np.array([2]), block=2)


def keep_even(order, seed, epoch):
    return order[order % 2 == 0] if epoch % 2 else order


def test_source_rows_locate_with_a_selector_that_changes_epoch_sizes():
    rows = SourceRows(np.full(6, 3), unit="documents", block=2, seed=0, selector=keep_even)
    # epoch 0: 18 tokens -> 6 rows; epoch 1: documents 0, 2, 4 -> 9 tokens -> 3 rows
    assert [rows.rows_in_epoch(e) for e in range(3)] == [6, 3, 6]
    epochs, within = rows.locate(np.array([0, 5, 6, 8, 9, 15]))
    assert epochs.tolist() == [0, 0, 1, 1, 2, 3]
    assert within.tolist() == [0, 5, 0, 2, 0, 0]
    assert rows.real_tokens_before(9) == 18 + 9
    assert rows.real_tokens_before(7) == 18 + 3


def test_windows_rows_follow_the_window_permutation():
    rows = SourceRows(np.array([7, 10]), unit="windows", block=3, seed=4)
    assert rows.rows_per_epoch == 4
    perm = gp.index.window_permutation(4, 4, 1)
    spans = rows.spans(1, np.arange(4))
    starts = np.array([0, 7])[spans.document] + spans.start
    first = starts[np.r_[True, spans.row[1:] != spans.row[:-1]]]
    assert first.tolist() == (perm * 4).tolist()


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 20), min_size=1, max_size=30),
    block=st.integers(1, 16),
    boundary=st.booleans(),
    seed=st.integers(0, 2**32),
)
def test_every_token_of_an_epoch_appears_once_in_order(lengths, block, boundary, seed):
    lengths = np.array(lengths)
    order = gp.global_document_order(len(lengths), seed=seed, epoch=0)
    plan = stream_plan(lengths, order, boundary=boundary)
    n = plan.num_rows(block)
    s = row_spans(plan, np.arange(n), block=block)
    # spans cover the stream exactly once, in order, without overlap
    covered = s.length + s.boundary
    assert covered.sum() == plan.total
    assert (s.filled[:-1] == block + 1).all() if n else plan.total == 0
    tokens = [
        (int(d), int(t)) for d, a, m in zip(s.document, s.start, s.length) for t in range(a, a + m)
    ]
    expected = [(int(d), t) for d in order for t in range(lengths[d])]
    assert tokens == expected
