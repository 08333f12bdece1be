"""Best-fit packing with random access: no document that fits a row is ever cut (pure).

``PipelineConfig(packing="best_fit")`` packs the documents of each *window* (a window of
:class:`~grainpack.index.blocked.BlockedOrder`, or the whole epoch of the exact order) into
rows of ``width = block + 1`` tokens:

1. A document's *size* is its length plus its boundary token, if one is configured (every
   document ends with it here: rows hold whole documents, not a stream).
2. A document of ``size > width`` is cut into ``size // width`` full rows first (its head);
   its tail of ``size % width`` tokens is a piece like any document that fits.
3. The pieces, by size decreasing (ties in the window's order), are placed by best fit: into
   the open row with the least room that holds the piece (ties: the row that got its current
   room last), or a new row. A row with ``max_segments`` pieces is closed. No piece is cut.
4. The rows (full ones, then best-fit ones in opening order) are put in the order of a keyed
   hash, ``splitmix64(mix_key(seed, epoch, window, BEST_FIT_ROWS_STREAM) + row)``, so batches
   are not sorted by length. A row's pieces lie in placement order; its end is padding.

Row ``r`` of an epoch is found from the epoch's per-window row counts (a prefix sum and a
binary search), then in its window's packing, built in ``O(K*C log(K*C))`` and cached (the
next one is packed on the background thread once the rows asked for pass the middle of a
window). A window's row count depends on the sizes of its documents only, not on their order.

Step 3 is a loop over the pieces (:func:`best_fit_rows`, bisect over a sorted list of the
rooms of open rows); the pipeline passes numba's compiled twin
(``grainpack.pipeline.compiled.best_fit``), which places the same pieces in the same rows.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable

import numpy as np

from grainpack.index.blocked import BlockedRows, _prefetcher, mix_key
from grainpack.index.hashing import splitmix64_array
from grainpack.index.plancache import PlanCache
from grainpack.index.stream import EpochRows, SourceRows, Spans

__all__ = [
    "BEST_FIT_ROWS_STREAM",
    "BestFitRows",
    "PackedWindow",
    "best_fit_rows",
    "count_rows",
    "pack_window",
]

BEST_FIT_ROWS_STREAM = 0xBF17  # the last word of the key of a window's row order
_CACHED = 3  # packed windows (the one before, the current one, the next one) and epoch tables

# (sizes in placement order, width, max_segments or 0) -> (row of each piece, rows)
Kernel = Callable[[np.ndarray, int, int], tuple[np.ndarray, int]]


def best_fit_rows(sizes: np.ndarray, width: int, max_segments: int = 0) -> tuple[np.ndarray, int]:
    """Best-fit placement of pieces, in the order given, into rows of ``width`` tokens.

    Each piece goes to the open row with the least room ``>= size``; among rows with the same
    room, the one that got it last; else to a new row. Rows left with no room, or with
    ``max_segments`` pieces (0: no limit), are closed.

    Args:
      sizes: int64 piece sizes in ``[1, width]``, in placement order (decreasing for
        best-fit decreasing).
      width: tokens per row.
      max_segments: most pieces per row, 0 for no limit.

    Returns:
      ``(row, rows)``: the row (in opening order) of each piece, and the number of rows.

    Example:
      >>> best_fit_rows(np.array([6, 5, 4, 3, 2]), 10)[0].tolist()
      [0, 1, 0, 1, 1]
    """
    row = np.empty(len(sizes), dtype=np.int64)
    stacks: dict[int, list[int]] = {}  # room -> open rows with that room, last one on top
    rooms: list[int] = []  # rooms that some open row has, sorted
    pieces: list[int] = []  # per row, when max_segments is set
    opened = 0
    for i, size in enumerate(sizes.tolist()):
        k = bisect.bisect_left(rooms, size)
        if k == len(rooms):
            r, room = opened, width - size
            opened += 1
            pieces.append(1)
        else:
            stack = stacks[rooms[k]]
            r, room = stack.pop(), rooms[k] - size
            if not stack:
                del stacks[rooms[k]], rooms[k]
            pieces[r] += 1
        row[i] = r
        if room > 0 and (max_segments == 0 or pieces[r] < max_segments):
            stack = stacks.get(room)
            if stack is None:
                stack = stacks[room] = []
                bisect.insort(rooms, room)
            stack.append(r)
    return row, opened


def _place(sizes: np.ndarray, width: int, max_segments: int, kernel: Kernel | None):
    if kernel is None:
        return best_fit_rows(sizes, width, max_segments)
    row, rows = kernel(np.ascontiguousarray(sizes, dtype=np.int64), width, max_segments)
    return row, int(rows)


def count_rows(
    lengths: np.ndarray,
    *,
    width: int,
    boundary: bool,
    max_segments: int | None = None,
    kernel: Kernel | None = None,
) -> tuple[int, int]:
    """``(rows, tokens)`` of the best-fit packing of documents of these lengths (in any
    order: the count depends on the sizes only).

    Example:
      >>> count_rows(np.array([3, 9, 4, 0]), width=5, boundary=True)  # sizes 4, 10, 5, 1
      (4, 20)
    """
    sizes = np.asarray(lengths, dtype=np.int64) + int(boundary)
    full, rest = np.divmod(sizes, width)
    rest = np.sort(rest[rest > 0])[::-1]
    return int(full.sum()) + _place(rest, width, max_segments or 0, kernel)[1], int(sizes.sum())


@dataclasses.dataclass(frozen=True)
class PackedWindow:
    """The rows of one window, in their final order: row ``q`` holds pieces
    ``[first[q], first[q + 1])``; piece ``i`` places ``length[i]`` tokens of ``document[i]``
    from token ``start[i]`` at ``offset[i]`` of its row, then a boundary token if
    ``boundary[i]``. ``filled[q]`` real tokens, then padding; ``tokens_before[q]``: real
    tokens in rows ``< q``."""

    first: np.ndarray
    document: np.ndarray
    start: np.ndarray
    length: np.ndarray
    offset: np.ndarray
    boundary: np.ndarray
    filled: np.ndarray
    tokens_before: np.ndarray

    @property
    def num_rows(self) -> int:
        return len(self.filled)

    def spans(self, rows: np.ndarray, requests: np.ndarray) -> dict[str, np.ndarray]:
        """Span fields of rows ``rows`` of the window, requested as ``requests`` (the
        :class:`~grainpack.index.stream.Spans` field ``row``), sorted by (request, offset)
        when ``requests`` increase."""
        lo, hi = self.first[rows], self.first[rows + 1]
        counts = hi - lo
        i = np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        return {
            "row": np.repeat(requests, counts),
            "offset": self.offset[i],
            "document": self.document[i],
            "start": self.start[i],
            "length": self.length[i],
            "boundary": self.boundary[i],
        }


def pack_window(
    documents: np.ndarray,
    lengths: np.ndarray,
    *,
    width: int,
    boundary: bool,
    key: int,
    max_segments: int | None = None,
    kernel: Kernel | None = None,
) -> PackedWindow:
    """Packs one window's documents (given in the window's order) by best-fit decreasing.

    Example:
      >>> w = pack_window(np.array([7, 8, 9]), np.array([2, 11, 3]), width=5, boundary=True,
      ...                 key=0)
      >>> w.num_rows, w.filled.tolist(), int(w.tokens_before[-1])  # sizes 3, 12, 4
      (4, [5, 5, 4, 5], 19)
      >>> sorted(zip(w.document.tolist(), w.start.tolist(), w.length.tolist()))
      [(7, 0, 2), (8, 0, 5), (8, 5, 5), (8, 10, 1), (9, 0, 3)]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    documents = np.asarray(documents, dtype=np.int64)
    sizes = lengths + int(boundary)
    if not (sizes > 0).all():  # an empty document without a boundary token: no tokens
        keep = sizes > 0
        documents, lengths, sizes = documents[keep], lengths[keep], sizes[keep]
    full, rest = np.divmod(sizes, width)
    # full rows: pieces [j * width, (j + 1) * width) of the document's size
    n_full = int(full.sum())
    f_doc = np.repeat(np.arange(len(sizes)), full)
    f_start = (np.arange(n_full) - np.repeat(np.cumsum(full) - full, full)) * width
    f_end = f_start + width
    # tails: what is left of each document, placed by size decreasing (ties: window order)
    tails = np.flatnonzero(rest)
    tails = tails[np.argsort(-rest[tails], kind="stable")]
    t_row, n_fit = _place(rest[tails], width, max_segments or 0, kernel)
    doc = np.concatenate([f_doc, tails])
    start = np.concatenate([f_start, full[tails] * width])
    end = np.concatenate([f_end, sizes[tails]])
    row = np.concatenate([np.arange(n_full), n_full + t_row])
    num_rows = n_full + n_fit
    rank = splitmix64_array(np.arange(num_rows, dtype=np.uint64) + np.uint64(key))
    position = np.empty(num_rows, dtype=np.int64)
    position[np.argsort(rank, kind="stable")] = np.arange(num_rows)
    final = position[row]
    by_row = np.argsort(final, kind="stable")  # placement order inside a row
    final, doc, start, end = final[by_row], doc[by_row], start[by_row], end[by_row]
    size = end - start
    first = np.searchsorted(final, np.arange(num_rows + 1))
    before = np.cumsum(size) - size  # tokens of earlier pieces of the window
    offset = before - before[first[:-1]][final]
    tokens_before = np.append(before[first[:-1]], before[-1] + size[-1] if len(size) else 0)
    ends_document = end == sizes[doc]
    length = np.minimum(end, lengths[doc]) - start
    return PackedWindow(
        first=first,
        document=documents[doc],
        start=start,
        length=length,
        offset=offset,
        boundary=ends_document if boundary else np.zeros(len(doc), dtype=bool),
        filled=np.diff(tokens_before),
        tokens_before=tokens_before,
    )


@dataclasses.dataclass(frozen=True)
class _EpochTable:
    rows: np.ndarray  # rows before each window, and in all (num_windows + 1)
    tokens: np.ndarray  # real tokens before each window, and in all


class BestFitRows(EpochRows):
    """The endless row stream of one source packed by best fit; the interface of
    :class:`~grainpack.index.stream.SourceRows` (occurrence -> (epoch, row) -> spans).

    Args:
      inner: the source's documents-unit stream in its order (a ``SourceRows`` of the exact
        order: one window per epoch; a ``BlockedRows``: its windows). Its documents, order,
        selector and boundary flag are used, not its rows.
      max_segments: most documents (pieces) per row, ``None`` for no limit.
      kernel: a compiled :func:`best_fit_rows` (the same placements), or ``None``.

    Example:
      >>> inner = SourceRows(np.array([3, 9, 4, 2]), unit="documents", block=4, seed=0,
      ...                    boundary=True)
      >>> rows = BestFitRows(inner)
      >>> rows.rows_per_epoch, rows.epoch_tokens(0)  # sizes 4, 10, 5, 3 into rows of 5
      (5, 22)
      >>> s = rows.spans(0, np.arange(5))
      >>> sorted(zip(s.document.tolist(), s.start.tolist(), s.length.tolist()))
      [(0, 0, 3), (1, 0, 5), (1, 5, 4), (2, 0, 4), (3, 0, 2)]
    """

    def __init__(
        self,
        inner: SourceRows | BlockedRows,
        *,
        max_segments: int | None = None,
        kernel: Kernel | None = None,
    ) -> None:
        if inner.unit != "documents":
            raise ValueError(
                "packing='best_fit' packs documents: it needs unit='documents', got "
                f"unit={inner.unit!r}"
            )
        self.inner, self.max_segments, self.kernel = inner, max_segments, kernel
        self.block, self.seed, self.boundary = inner.block, inner.seed, inner.boundary
        self.name = inner.name
        self.blocked = isinstance(inner, BlockedRows)
        n = inner.num_documents if self.blocked else len(inner.lengths)  # type: ignore[union-attr]
        self.num_documents = n
        self.num_windows = inner.num_windows if self.blocked else 1  # type: ignore[union-attr]
        tokens = inner.corpus.num_tokens if self.blocked else int(inner.lengths.sum())  # type: ignore[union-attr]
        self.unselected_tokens = tokens + (n if self.boundary else 0)
        self._rows_per_epoch: int | None = None
        self._epoch_starts = np.zeros(1, dtype=np.int64)
        self._plans = PlanCache()

    @property
    def rows_per_epoch(self) -> int | None:  # type: ignore[override]
        """Rows of every epoch, or ``None`` when epochs differ (the blocked order's windows
        hold other documents each epoch; a selector keeps others). In the exact order the
        count depends on the documents' sizes only: the same each epoch."""
        if self.blocked or self.inner.selector is not None:
            return None
        if self._rows_per_epoch is None:
            lengths = self.inner.lengths  # type: ignore[union-attr]
            self._rows_per_epoch = count_rows(
                lengths,
                width=self.block + 1,
                boundary=self.boundary,
                max_segments=self.max_segments,
                kernel=self.kernel,
            )[0]
        return self._rows_per_epoch

    @property
    def most_rows_per_epoch(self) -> int:
        """At most one row per document beyond the full rows of its tokens."""
        return self.unselected_tokens // (self.block + 1) + self.num_documents

    @property
    def epoch_items(self) -> int:
        return self.num_documents  # every document is packed, in either order

    # -- windows, cached -------------------------------------------------------------------

    def _documents(self, epoch: int, window: int) -> tuple[np.ndarray, np.ndarray]:
        """The window's documents in its order, and their lengths."""
        if self.blocked:
            plan = self.inner._window(epoch, window)  # type: ignore[union-attr]
            lengths = plan.lengths_at(np.arange(len(plan.documents)))
            return plan.documents.astype(np.int64), lengths
        plan = self.inner.epoch_plan(epoch)  # type: ignore[union-attr]
        documents = plan.documents
        if documents is None:
            documents = np.arange(len(self.inner.lengths))  # type: ignore[union-attr]
        documents = documents.astype(np.int64)
        return documents, self.inner.lengths[documents]  # type: ignore[union-attr]

    def window(self, epoch: int, window: int) -> PackedWindow:
        """The packed rows of window ``window`` of ``epoch`` (cached)."""

        def pack() -> PackedWindow:
            documents, lengths = self._documents(epoch, window)
            return pack_window(
                documents,
                lengths,
                width=self.block + 1,
                boundary=self.boundary,
                key=mix_key(self.seed, epoch, window, BEST_FIT_ROWS_STREAM),
                max_segments=self.max_segments,
                kernel=self.kernel,
            )

        return self._plans.get(("window", epoch, window), pack, _CACHED)

    def _table(self, epoch: int) -> _EpochTable:
        """Rows and real tokens before each window of ``epoch`` (counting packs every
        window: ``O(N log(K*C))``; cached)."""

        def count() -> _EpochTable:
            rows = np.zeros(self.num_windows + 1, dtype=np.int64)
            tokens = np.zeros(self.num_windows + 1, dtype=np.int64)
            for w in range(self.num_windows):
                if not self.blocked:
                    packed = self.window(epoch, w)
                    rows[w + 1], tokens[w + 1] = packed.num_rows, packed.tokens_before[-1]
                    continue
                rows[w + 1], tokens[w + 1] = count_rows(
                    self._documents(epoch, w)[1],
                    width=self.block + 1,
                    boundary=self.boundary,
                    max_segments=self.max_segments,
                    kernel=self.kernel,
                )
            np.cumsum(rows, out=rows)
            np.cumsum(tokens, out=tokens)
            if rows[-1] == 0:
                raise self._kept_nothing(epoch, self.seed)
            return _EpochTable(rows, tokens)

        return self._plans.get(("epoch", epoch), count, _CACHED)

    def _plan_ahead(self, epoch: int, window: int) -> None:
        """Packs the window after ``(epoch, window)`` on the background thread (blocked
        order; after an epoch's last window, the next epoch's table and first window)."""
        if not (self.blocked and self.inner.plan_ahead):  # type: ignore[union-attr]
            return
        nxt = (epoch, window + 1) if window + 1 < self.num_windows else (epoch + 1, 0)
        if ("window", *nxt) in self._plans:
            return
        _prefetcher().submit(self._ahead, *nxt)

    def _ahead(self, epoch: int, window: int) -> None:
        try:
            if window == 0:
                self._table(epoch)
            self.window(epoch, window)
        except Exception:  # raised again where the window is used, if it ever is
            pass

    # -- the EpochRows interface ---------------------------------------------------------

    def rows_in_epoch(self, epoch: int) -> int:
        """Rows in ``epoch``."""
        rows = self.rows_per_epoch
        return int(self._table(epoch).rows[-1]) if rows is None else rows

    def epoch_tokens(self, epoch: int) -> int:
        """Real (non-padding) tokens in ``epoch``: its documents and boundary tokens."""
        if self.inner.selector is None:
            return self.unselected_tokens
        return int(self._table(epoch).tokens[-1])

    def real_tokens_before(self, occurrence: int) -> int:
        """Real tokens in the first ``occurrence`` rows of the stream."""
        epochs, rows = self.locate(np.array([occurrence]))
        epoch, row = int(epochs[0]), int(rows[0])
        if self.inner.selector is None:
            done = epoch * self.unselected_tokens
        else:
            done = sum(self.epoch_tokens(e) for e in range(epoch))
        if row == 0:
            return done
        table = self._table(epoch)
        w = int(np.searchsorted(table.rows, row, side="right")) - 1
        within = row - int(table.rows[w])
        return done + int(table.tokens[w]) + int(self.window(epoch, w).tokens_before[within])

    def spans(self, epoch: int, rows: np.ndarray) -> Spans:
        """Spans of rows ``rows`` of ``epoch``, sorted by (requested row, offset)."""
        rows = np.asarray(rows, dtype=np.int64)
        n_rows = self.rows_in_epoch(epoch)
        if len(rows) and (rows.min() < 0 or rows.max() >= n_rows):
            raise IndexError(f"rows must lie in [0, {n_rows}); got {rows.min()}..{rows.max()}")
        if self.num_windows == 1:
            windows = np.zeros(len(rows), dtype=np.int64)
            starts = np.zeros(2, dtype=np.int64)
        else:
            starts = self._table(epoch).rows
            windows = np.searchsorted(starts, rows, side="right") - 1
        requests = np.arange(len(rows))
        filled = np.zeros(len(rows), dtype=np.int64)
        parts = []
        for w in np.unique(windows).tolist():
            mine = requests[windows == w] if self.num_windows > 1 else requests
            local = rows[mine] - starts[w]
            packed = self.window(epoch, w)
            filled[mine] = packed.filled[local]
            parts.append(packed.spans(local, mine))
            if 2 * int(local.max()) >= packed.num_rows:  # past the middle: pack the next one
                self._plan_ahead(epoch, w)
        if len(parts) == 1:
            merged = parts[0]
        elif parts:
            merged = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
            order = np.argsort(merged["row"], kind="stable")
            merged = {k: v[order] for k, v in merged.items()}
        else:
            empty = np.zeros(0, dtype=np.int64)
            merged = dict.fromkeys(("row", "offset", "document", "start", "length"), empty)
            merged["boundary"] = np.zeros(0, dtype=bool)
        return Spans(**merged, filled=filled)
