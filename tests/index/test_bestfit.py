"""Best-fit packing (grainpack.index.bestfit): every document once per epoch, no document
that fits a row cut, max_segments, row counts from sizes only, and exact pinned values."""

from __future__ import annotations

import re

import numpy as np
import pytest

from grainpack.index.bestfit import BestFitRows, best_fit_rows, count_rows, pack_window
from grainpack.index.blocked import BlockedOrder, BlockedRows
from grainpack.index.stream import SourceRows


class Offsets:
    """Document offsets of a corpus of these lengths (what BlockedRows reads)."""

    def __init__(self, lengths: np.ndarray) -> None:
        self.offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        self.num_tokens = int(self.offsets[-1])

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def offsets_between(self, first: int, stop: int) -> np.ndarray:
        return self.offsets[first : stop + 1]

    def block_tokens(self, c: int) -> np.ndarray:
        return np.diff(self.offsets[np.minimum(np.arange(0, len(self) + c, c), len(self))])[
            : -(-len(self) // c)
        ]


def lengths_of(n: int, seed: int, high: int = 40) -> np.ndarray:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, high, size=n)
    lengths[rng.integers(0, n, size=n // 10)] = rng.integers(high, 3 * high, size=n // 10)
    return lengths


def stream(kind: str, lengths: np.ndarray, *, block: int, boundary: bool, seed: int = 3, **kw):
    if kind == "exact":
        inner = SourceRows(lengths, unit="documents", block=block, seed=seed, boundary=boundary)
    else:
        corpus = Offsets(lengths)
        order = BlockedOrder(block_docs=8, window_blocks=4)
        inner = BlockedRows(
            corpus,
            order=order,
            unit="documents",
            block=block,
            seed=seed,
            boundary=boundary,
            block_tokens=corpus.block_tokens(8),
            plan_ahead=False,
        )
    return BestFitRows(inner, **kw)


def check_epoch(rows: BestFitRows, epoch: int, lengths: np.ndarray, max_segments=None) -> None:
    """Every document once, reassembled exactly; no fitting document cut; rows full width
    at most; max_segments; filled = the pieces' tokens."""
    width, b = rows.block + 1, int(rows.boundary)
    n = rows.rows_in_epoch(epoch)
    s = rows.spans(epoch, np.arange(n))
    sizes = s.length + s.boundary
    assert (np.bincount(s.row, weights=sizes, minlength=n).astype(int) == s.filled).all()
    assert (s.filled <= width).all() and (s.filled > 0).all()
    first = np.searchsorted(s.row, s.row)  # each piece's offset follows the one before it
    expected = np.cumsum(sizes) - sizes - (np.cumsum(sizes) - sizes)[first]
    assert (s.offset == expected).all()
    if max_segments is not None:
        assert np.bincount(s.row).max() <= max_segments
    by_doc = np.lexsort((s.start, s.document))
    doc, start, length, bnd = (x[by_doc] for x in (s.document, s.start, s.length, s.boundary))
    present = np.flatnonzero(lengths + b > 0)
    assert np.array_equal(np.unique(doc), present)  # each document, none twice (below)
    for d in present.tolist():
        mine = doc == d
        ends = start[mine] + length[mine]
        assert start[mine][0] == 0 and (start[mine][1:] == ends[:-1]).all()  # tiles it
        assert ends[-1] == lengths[d]
        assert bnd[mine].tolist() == [False] * (mine.sum() - 1) + [bool(b)]
        size = lengths[d] + b
        assert mine.sum() == -(-size // width)  # cut into full rows only if longer
    assert int(s.filled.sum()) == int((lengths + b).sum()) == rows.epoch_tokens(epoch)


@pytest.mark.parametrize("kind", ["exact", "blocked"])
@pytest.mark.parametrize("boundary", [False, True])
@pytest.mark.parametrize("max_segments", [None, 1, 3])
def test_every_document_once_per_epoch_and_no_fitting_document_cut(kind, boundary, max_segments):
    lengths = lengths_of(300, seed=1)
    rows = stream(kind, lengths, block=31, boundary=boundary, max_segments=max_segments)
    for epoch in (0, 1, 2):
        check_epoch(rows, epoch, lengths, max_segments)


def test_rows_of_an_epoch_are_in_a_keyed_order_not_by_length():
    lengths = lengths_of(400, seed=2)
    rows = stream("exact", lengths, block=31, boundary=True)
    n = rows.rows_in_epoch(0)
    fills = [rows.spans(e, np.arange(n)).filled for e in (0, 1)]
    assert not (np.diff(fills[0]) <= 0).all() and not (np.diff(fills[0]) >= 0).all()
    assert not np.array_equal(fills[0], fills[1])  # another order each epoch
    again = stream("exact", lengths, block=31, boundary=True).spans(0, np.arange(n))
    assert np.array_equal(again.filled, fills[0])  # a pure function of (seed, epoch)


def test_row_count_depends_on_the_sizes_only():
    lengths = lengths_of(500, seed=4)
    rows = stream("exact", lengths, block=31, boundary=True, max_segments=2)
    assert rows.rows_per_epoch == rows.rows_in_epoch(0) == rows.window(3, 0).num_rows
    shuffled = np.random.default_rng(0).permutation(lengths)
    assert count_rows(shuffled, width=32, boundary=True, max_segments=2)[0] == rows.rows_per_epoch


def test_blocked_rows_are_located_from_per_window_row_counts():
    lengths = lengths_of(300, seed=5)
    rows = stream("blocked", lengths, block=31, boundary=True)
    anchors = [rows.window_anchor(0, w) for w in range(rows.num_windows)]
    assert rows.num_windows == 10 and [a.row for a in anchors] == [a.occurrence for a in anchors]
    n = rows.rows_in_epoch(0)
    whole = rows.spans(0, np.arange(n))
    third = anchors[3]
    picked = np.array([n - 1, 0, third.row, third.row - 1, 17])
    some = rows.spans(0, picked)  # any rows, in any order: the same spans
    for k, r in enumerate(picked.tolist()):
        a, b = whole.row == r, some.row == k
        for field in ("offset", "document", "start", "length", "boundary"):
            assert np.array_equal(getattr(whole, field)[a], getattr(some, field)[b])
    assert rows.real_tokens_before(third.row + 2) == int(
        third.tokens + whole.filled[third.row : third.row + 2].sum()
    )
    assert third.tokens == int(whole.filled[: third.row].sum())


def test_best_fit_places_pieces_exactly():
    rows, n = best_fit_rows(np.array([7, 6, 5, 4, 3, 3, 2, 1, 1]), 10)
    assert (rows.tolist(), n) == ([0, 1, 2, 1, 0, 2, 2, 3, 3], 4)
    rows, n = best_fit_rows(np.array([4, 3, 3, 2, 1, 1]), 10, max_segments=2)
    assert (rows.tolist(), n) == ([0, 0, 1, 1, 2, 2], 3)


def test_pack_window_golden():
    # sizes with the boundary: 21, 5, 9, 11, 2, 7 into rows of 10; ties keep window order
    w = pack_window(
        np.array([10, 11, 12, 13, 14, 15]),
        np.array([20, 4, 8, 10, 1, 6]),
        width=10,
        boundary=True,
        key=7,
    )
    table = list(zip(w.document.tolist(), w.start.tolist(), w.length.tolist(), w.offset.tolist()))
    # tails by size: 12 (9), 15 (7), 11 (5), 14 (2), 10 (1), 13 (1): 9 opens A, 7 opens B,
    # 5 opens C, 2 -> B (room 3), 1 -> B (room 1, got it last), 1 -> A; then the keyed order
    assert w.first.tolist() == [0, 2, 5, 6, 7, 8, 9]
    assert table == [
        (12, 0, 8, 0), (13, 10, 0, 9),
        (15, 0, 6, 0), (14, 0, 1, 7), (10, 20, 0, 9),
        (10, 0, 10, 0),
        (11, 0, 4, 0),
        (10, 10, 10, 0),
        (13, 0, 10, 0),
    ]  # fmt: skip
    assert w.filled.tolist() == [10, 10, 10, 5, 10, 10]
    assert w.boundary.tolist() == [True, True, True, True, True, False, True, False, False]


def test_best_fit_needs_the_documents_unit():
    inner = SourceRows(np.array([5, 6]), unit="windows", block=3, seed=0)
    with pytest.raises(ValueError, match="unit='documents'"):
        BestFitRows(inner)


def test_walking_forward_across_epochs_counts_one_window_at_a_time():
    lengths = lengths_of(300, seed=5)
    rows = stream("blocked", lengths, block=31, boundary=True)
    rows.replay_limit = 64  # two windows of 32 documents: a whole epoch's count is refused
    for first in range(0, 900, 6):  # into epoch 3 (epochs of 257, 257, 260 rows), 6 at a time
        epochs, within = rows.locate(np.arange(first, first + 6))
        for e in np.unique(epochs).tolist():
            rows.spans(e, within[epochs == e])
    assert rows.anchor_of(899) == (3, 4, 880, 106, 27222)
    assert rows.window_anchor(1, 0) == (1, 0, 257, 0, 7974)  # the end of epoch 0: 257 rows
    fresh = stream("blocked", lengths, block=31, boundary=True)
    fresh.replay_limit = 64
    message = (
        "window 0 of epoch 1 of this stream lies past window 2 of epoch 0: reaching it from "
        "the nearest position known (window 0 of epoch 0) packs every window in between, over "
        "64 documents, which grainpack refuses."
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        fresh.rows_in_epoch(0)
    restored = stream("blocked", lengths, block=31, boundary=True)
    restored.replay_limit = 64
    restored.add_anchor(rows.window_anchor(2, 5))  # as a checkpoint state gives it
    assert restored.anchor_of(680) == rows.anchor_of(680)  # counted from the anchor
    with pytest.raises(ValueError, match="disagrees with the one counted for its window"):
        restored.add_anchor((2, 5, 650, 136, 20033))


def test_epoch_position_goes_by_windows():
    lengths = lengths_of(300, seed=5)
    rows = stream("blocked", lengths, block=31, boundary=True)
    third = rows.window_anchor(0, 3)
    fourth = rows.window_anchor(0, 4)
    middle = (third.occurrence + fourth.occurrence) // 2
    within = (middle - third.occurrence) / (fourth.occurrence - third.occurrence)
    assert rows.epoch_position(third.occurrence) == (0, 0.3)
    assert rows.epoch_position(middle) == (0, (3 + within) / 10)
