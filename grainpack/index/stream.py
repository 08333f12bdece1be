"""Row plans: which token spans make up row ``r`` of a source's endless row stream (pure).

A source's rows are ``block + 1`` tokens cut from a *stream*:

* ``unit="documents"``: epoch ``e`` concatenates the documents of
  ``global_document_order(n, seed=seed, epoch=e, sequence_selector=...)`` with an optional
  boundary token between consecutive documents, exactly like ``pack_documents``; the last
  row of an epoch is padded.
* ``unit="windows"``: the stored token stream is cut into ``n_windows = tokens // (block+1)``
  windows and epoch ``e`` visits them in ``default_rng([seed, e, 0xDA7A]).permutation``
  order, exactly like the window loader's ``PackedStream``.

Only document lengths are touched here; tokens are read elsewhere.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import numpy as np

from grainpack.index.orders import (
    SequenceSelector,
    check_selected_order,
    global_document_order,
    window_permutation,
)

logger = logging.getLogger(__name__)

WINDOW_ROWS = 256  # rows of spans computed at once for sequential requests
# Planning an epoch costs at least about this many documents' shuffle (a fixed ~0.5 ms):
# bounds on replayed work count every epoch as at least this many documents.
MIN_EPOCH_COST = 1 << 14


@dataclasses.dataclass(frozen=True)
class StreamPlan:
    """Documents laid end to end, each followed by ``extra`` boundary tokens (0 or 1).

    Attributes:
      documents: document ids in stream order (uint32 when the ids fit, else int64), or
        ``None`` for the identity order.
      bounds: ``len(documents) + 1`` stream positions: document ``k`` (and its boundary
        token) occupies ``[bounds[k], bounds[k + 1])``.
      boundary: whether a boundary token follows each document but the last.
      total: stream length in tokens.
    """

    documents: np.ndarray | None
    bounds: np.ndarray
    boundary: bool
    total: int

    def num_rows(self, block: int) -> int:
        """Rows of ``block + 1`` tokens needed for the stream (the last one padded)."""
        return -(-self.total // (block + 1))


def stream_plan(lengths: np.ndarray, order: np.ndarray | None, *, boundary: bool) -> StreamPlan:
    """Plans the stream of ``lengths[order]`` with a boundary token between documents.

    Holds 12 bytes per document (uint32 ids, int64 bounds) when the ids fit 32 bits.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    n = len(lengths) if order is None else len(order)
    bounds = np.zeros(n + 1, dtype=np.int64)
    if order is None:
        bounds[1:] = lengths
    else:
        np.take(lengths, order, out=bounds[1:])
    if boundary and n > 1:
        bounds[1:n] += 1  # one boundary after each document but the last
    np.cumsum(bounds[1:], out=bounds[1:])
    documents = None
    if order is not None:
        documents = order.astype(np.uint32 if len(lengths) <= 1 << 32 else np.int64)
    return StreamPlan(documents, bounds, boundary, int(bounds[-1]))


@dataclasses.dataclass(frozen=True)
class Spans:
    """A flat table of spans for a set of requested rows, sorted by (row, offset).

    Span ``k`` places ``length[k]`` tokens of ``document[k]`` starting at token ``start[k]``
    at position ``offset[k]`` of requested row ``row[k]``, followed by one boundary token
    when ``boundary[k]``. ``filled[i]`` is the number of real tokens in requested row ``i``;
    the rest of that row is padding.
    """

    row: np.ndarray
    offset: np.ndarray
    document: np.ndarray
    start: np.ndarray
    length: np.ndarray
    boundary: np.ndarray
    filled: np.ndarray


def row_spans(plan: StreamPlan, rows: np.ndarray, *, block: int) -> Spans:
    """Spans of the given rows of ``plan`` (vectorized over rows and spans).

    Example:
        >>> plan = stream_plan(np.array([3, 4]), None, boundary=True)
        >>> s = row_spans(plan, np.array([0, 1]), block=4)
        >>> s.document.tolist(), s.start.tolist(), s.length.tolist(), s.boundary.tolist()
        ([0, 1, 1], [0, 0, 1], [3, 1, 3], [True, False, False])
        >>> s.offset.tolist(), s.filled.tolist()
        ([0, 4, 0], [5, 3])
    """
    rows = np.asarray(rows, dtype=np.int64)
    width = block + 1
    n_rows = plan.num_rows(block)
    if len(rows) and (rows.min() < 0 or rows.max() >= n_rows):
        raise IndexError(f"rows must lie in [0, {n_rows}); got {rows.min()}..{rows.max()}")
    a = rows * width
    b = np.minimum(a + width, plan.total)
    first = np.searchsorted(plan.bounds, a, side="right") - 1  # document holding token a
    counts = np.searchsorted(plan.bounds, b - 1, side="right") - first
    span_row = np.repeat(np.arange(len(rows)), counts)
    i = np.arange(len(span_row)) + np.repeat(first - np.cumsum(counts) + counts, counts)
    starts, ends, a_row = plan.bounds[i], plan.bounds[i + 1], a[span_row]
    lo = np.maximum(starts, a_row)
    hi = np.minimum(ends, b[span_row])
    keep = hi > lo  # drops empty documents (no tokens, no boundary)
    if not keep.all():
        span_row, i, starts, ends, a_row, lo, hi = (
            x[keep] for x in (span_row, i, starts, ends, a_row, lo, hi)
        )
    local_lo, local_hi = lo - starts, hi - starts
    lengths = ends - starts  # the documents' tokens, without the boundary that follows
    if plan.boundary:
        lengths -= i < len(plan.bounds) - 2
    return Spans(
        row=span_row,
        offset=lo - a_row,
        document=i if plan.documents is None else plan.documents[i].astype(np.int64, copy=False),
        start=local_lo,
        length=np.minimum(local_hi, lengths) - local_lo,
        boundary=local_hi > lengths,
        filled=b - a,
    )


class EpochRows:
    """Occurrence -> (epoch, row) for a row stream of epochs one after another: subclasses
    set ``rows_per_epoch`` (``None`` when epochs differ) and ``_epoch_starts`` (starting
    ``[0]``, extended on demand) and define ``rows_in_epoch``."""

    rows_per_epoch: int | None
    _epoch_starts: np.ndarray
    block: int
    unselected_tokens: int  # documents unit: the stream of an epoch that keeps every document
    replay_limit: int | None = None  # most documents (or blocks) one locate may plan
    name: str | None = None  # the source's, for messages

    def _kept_nothing(self, epoch: int, seed: int) -> ValueError:
        source = "" if self.name is None else f" of source {self.name!r}"
        return ValueError(
            f"sequence_selector kept no tokens in epoch {epoch}{source} (seed={seed}); a "
            "selector must keep at least one non-empty document per epoch"
        )

    def rows_in_epoch(self, epoch: int) -> int:
        raise NotImplementedError

    @property
    def epoch_cost(self) -> int:
        """Planning one epoch, in documents shuffled: its items, at least ``MIN_EPOCH_COST``."""
        return max(self.epoch_items, MIN_EPOCH_COST)

    @property
    def planned_epochs(self) -> int:
        """Epochs whose rows are counted: locating past them plans more epochs."""
        return len(self._epoch_starts) - 1

    @property
    def most_rows_per_epoch(self) -> int:
        """Rows of an epoch that keeps every document: a selector only drops some."""
        if self.rows_per_epoch is not None:
            return self.rows_per_epoch
        return -(-self.unselected_tokens // (self.block + 1))

    @property
    def epoch_items(self) -> int:
        """What one epoch's plan shuffles: documents (blocks, in the blocked order); with a
        selector, reaching epoch ``e`` replays ``e`` such shuffles."""
        raise NotImplementedError

    def epoch_position(self, occurrence: int) -> tuple[int, float]:
        """The epoch of row ``occurrence`` of the stream and the fraction of that epoch's
        rows before it."""
        epochs, rows = self.locate(np.array([occurrence]))
        epoch = int(epochs[0])
        return epoch, int(rows[0]) / self.rows_in_epoch(epoch)

    def locate(self, occurrences: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Maps occurrence indices to (epoch, row inside the epoch)."""
        occurrences = np.asarray(occurrences, dtype=np.int64)
        if self.rows_per_epoch is not None:
            return np.divmod(occurrences, self.rows_per_epoch)
        top = int(occurrences.max(initial=0))
        first, limit = self.planned_epochs, self.replay_limit
        starts = [int(self._epoch_starts[-1])]  # of the epochs planned now
        try:
            while starts[-1] <= top:
                e = first + len(starts) - 1
                if limit is not None and (e + 1 - first) * self.epoch_cost > limit:
                    raise ValueError(
                        f"row {top:,} of this stream lies past epoch {e:,}: reaching it plans "
                        f"epochs {first:,}..{e:,} and more at once, over {limit:,} document "
                        "shuffles (each epoch counts at least "
                        f"{MIN_EPOCH_COST:,}; hours), which grainpack refuses. Check the step "
                        "(a corrupt checkpoint state?)"
                    )
                starts.append(starts[-1] + self.rows_in_epoch(e))
        finally:  # keep what was planned, once (appending per epoch copied every start)
            self._epoch_starts = np.concatenate([self._epoch_starts, starts[1:]]).astype(np.int64)
        epochs = np.searchsorted(self._epoch_starts, occurrences, side="right") - 1
        return epochs, occurrences - self._epoch_starts[epochs]


class SourceRows(EpochRows):
    """The endless row stream of one source: occurrence ``o`` -> (epoch, row) -> spans.

    Args:
      lengths: document lengths of the source (int64).
      unit: ``"documents"`` or ``"windows"``.
      block: model sequence length; rows hold ``block + 1`` tokens.
      seed: this source's seed (the pipeline passes ``seed + j`` for source ``j``).
      boundary: documents unit only: a boundary token between consecutive documents.
      selector: documents unit only: the curriculum hook of ``global_document_order``.
      cache_epochs: how many epoch plans to keep. An epoch's plan is dropped before the
        next one is built (one plan per source alive at a time with the default 1).
    """

    def __init__(
        self,
        lengths: np.ndarray,
        *,
        unit: str,
        block: int,
        seed: int,
        boundary: bool = False,
        selector: SequenceSelector | None = None,
        cache_epochs: int = 1,
    ) -> None:
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.unit, self.block, self.seed = unit, block, seed
        self.boundary, self.selector = boundary, selector
        self._cache_epochs = cache_epochs
        self._epochs: dict[int, _Epoch] = {}  # the last few epochs used, oldest first
        self._epoch_rows: list[int] = []
        self._epoch_totals: list[int] = []
        self._epoch_starts = np.zeros(1, dtype=np.int64)
        if unit == "windows":
            self._identity = stream_plan(self.lengths, None, boundary=False)
            self.rows_per_epoch: int | None = self._identity.total // (block + 1)
        else:
            n = len(self.lengths)
            self.unselected_tokens = int(self.lengths.sum()) + (n - 1 if boundary and n else 0)
            rows = -(-self.unselected_tokens // (block + 1))
            self.rows_per_epoch = rows if selector is None else None

    def _epoch(self, epoch: int) -> _Epoch:
        """The cache entry of ``epoch``; the oldest epoch is evicted beyond ``cache_epochs``."""
        entry = self._epochs.get(epoch)
        if entry is None:
            while len(self._epochs) >= self._cache_epochs:
                self._epochs.pop(next(iter(self._epochs)))
            entry = self._epochs[epoch] = _Epoch()
        return entry

    def epoch_plan(self, epoch: int) -> StreamPlan:
        """The documents-unit stream of ``epoch`` (cached)."""
        entry = self._epoch(epoch)
        if entry.plan is None:
            started = time.perf_counter()
            n = len(self.lengths)
            order = global_document_order(n, seed=self.seed, epoch=epoch)
            if self.selector is not None:  # each document at most once an epoch
                order = check_selected_order(self.selector(order.copy(), self.seed, epoch), n)
            entry.plan = stream_plan(self.lengths, order, boundary=self.boundary)
            logger.info(
                "planned epoch %d (seed %d): %d of %d documents, %d rows, %.3f s",
                epoch,
                self.seed,
                len(order),
                len(self.lengths),
                entry.plan.num_rows(self.block),
                time.perf_counter() - started,
            )
        return entry.plan

    @property
    def epoch_items(self) -> int:
        return len(self.lengths)

    def rows_in_epoch(self, epoch: int) -> int:
        """Rows in ``epoch`` (constant unless a selector changes the epoch's documents)."""
        if self.rows_per_epoch is not None:
            return self.rows_per_epoch
        while len(self._epoch_rows) <= epoch:
            e = len(self._epoch_rows)
            plan = self.epoch_plan(e)
            rows = plan.num_rows(self.block)
            if rows == 0:
                raise self._kept_nothing(e, self.seed)
            self._epoch_rows.append(rows)
            self._epoch_totals.append(plan.total)
        return self._epoch_rows[epoch]

    def epoch_tokens(self, epoch: int) -> int:
        """Real (non-padding) tokens in ``epoch``: the length of its stream."""
        if self.unit == "windows":
            return (self.rows_per_epoch or 0) * (self.block + 1)
        if self.selector is None:
            return self.unselected_tokens
        self.rows_in_epoch(epoch)
        return self._epoch_totals[epoch]

    def real_tokens_before(self, occurrence: int) -> int:
        """Real tokens in the first ``occurrence`` rows of the stream."""
        epochs, rows = self.locate(np.array([occurrence]))
        epoch, row = int(epochs[0]), int(rows[0])
        if self.selector is None:
            done = epoch * self.epoch_tokens(0)
        else:
            done = sum(self.epoch_tokens(e) for e in range(epoch))
        return done + min(row * (self.block + 1), self.epoch_tokens(epoch))

    def spans(self, epoch: int, rows: np.ndarray) -> Spans:
        """Spans of rows ``rows`` of ``epoch``.

        A short run of consecutive rows (what sequential batches ask for) is cut from a
        cached table of the next ``WINDOW_ROWS`` rows, so the span math runs once per window;
        longer requests (a Grain element plans many steps) are computed directly.
        """
        rows = np.asarray(rows, dtype=np.int64)
        n = len(rows)
        r0 = int(rows[0]) if n else 0
        run = n and r0 >= 0 and int(rows[-1]) - r0 == n - 1 and bool((np.diff(rows) == 1).all())
        if not run or n >= WINDOW_ROWS:  # a large request is its own window
            return self._compute_spans(epoch, rows)
        window = self._epoch(epoch).window
        if window is None or not window[0] <= r0 <= r0 + n <= window[1]:
            stop = max(min(r0 + WINDOW_ROWS, self.rows_in_epoch(epoch)), r0 + n)
            table = self._compute_spans(epoch, np.arange(r0, stop))
            for field in dataclasses.fields(table):
                getattr(table, field.name).flags.writeable = False
            first = np.searchsorted(table.row, np.arange(stop - r0 + 1))  # each row's spans
            window = self._epoch(epoch).window = (r0, stop, table, first)
        k = r0 - window[0]
        table, first = window[2], window[3]
        cut = slice(first[k], first[k + n])
        return Spans(
            row=table.row[cut] - k,
            offset=table.offset[cut],
            document=table.document[cut],
            start=table.start[cut],
            length=table.length[cut],
            boundary=table.boundary[cut],
            filled=table.filled[k : k + n],
        )

    def _compute_spans(self, epoch: int, rows: np.ndarray) -> Spans:
        if self.unit == "windows":
            entry = self._epoch(epoch)
            if entry.permutation is None:
                entry.permutation = window_permutation(self.rows_per_epoch or 0, self.seed, epoch)
            return row_spans(self._identity, entry.permutation[rows], block=self.block)
        return row_spans(self.epoch_plan(epoch), rows, block=self.block)


@dataclasses.dataclass
class _Epoch:
    """What :class:`SourceRows` keeps of one epoch: its documents plan or window
    permutation, and the span table of the last run of sequential rows asked for."""

    plan: StreamPlan | None = None
    permutation: np.ndarray | None = None
    window: tuple[int, int, Spans, np.ndarray] | None = None
