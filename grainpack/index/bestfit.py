"""Best-fit packing as a randomly addressable row stream: no document that fits a row is ever
cut (pure).

``PipelineConfig(packing="best_fit")`` packs the documents of each *window* (a window of
:class:`~grainpack.index.blocked.BlockedOrder`, or the whole epoch of the exact order) by
best-fit decreasing (:func:`~grainpack.index.placement.pack_window`), its rows in the order
of the key ``mix_key(seed, epoch, window, BEST_FIT_ROWS_STREAM)``. Epoch ``e`` is the rows of
its windows ``0, 1, ...`` one after another; epochs follow each other.

A window's row count depends on the sizes of its documents, known only by reading them and
placing them, so rows are located from **anchors** (:mod:`grainpack.index.anchors`: where a
window's first row lies), the start of the stream always one. Walking forward from an anchor
counts one window (``O(K*C log(K*C))``) and gives the next window's anchor; after an epoch's
last window, the next epoch's first. So a run going forward counts each window once, as it
packs it for its rows (cached; the next one packed ahead on the background thread once the
rows asked for pass the middle of a window), and never counts an epoch at once. A checkpoint
state carries each source's anchor (:meth:`BestFitRows.anchor_of` the source's first row of
the batch before the step), so a restore counts one window. Without one (an older state, a
far step asked for the first time) the walk starts from the nearest anchor known and is
refused past ``replay_limit`` documents, as replaying epochs is.

In the exact order without a selector every epoch has the same rows (the same sizes): rows
are located by a division, as the concatenating stream's are.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np

from grainpack.index.anchors import Anchor, Anchors
from grainpack.index.blocked import BlockedRows, _prefetcher, mix_key
from grainpack.index.placement import Kernel, PackedWindow, best_fit_rows, count_rows, pack_window
from grainpack.index.plancache import PlanCache
from grainpack.index.stream import EpochRows, SourceRows, Spans

__all__ = [
    "BEST_FIT_ROWS_STREAM",
    "Anchor",
    "BestFitRows",
    "PackedWindow",
    "best_fit_rows",
    "count_rows",
    "pack_window",
]

BEST_FIT_ROWS_STREAM = 0xBF17  # the last word of the key of a window's row order
_CACHED = 3  # packed windows: the one before, the current one, the next one


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
        self._queued: set[tuple[int, int]] = set()  # windows handed to the background thread
        self._anchors = Anchors()  # every window walked to or restored

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

    @property
    def planned_epochs(self) -> int:
        """Epochs before the furthest anchor known: locating past it counts windows."""
        if self.rows_per_epoch is not None:
            return super().planned_epochs
        return self._anchors.last.epoch

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_queued": set()}  # a copy plans on threads of its own

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
        self._queued.discard((epoch, window))  # the background thread's packing is moot

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

    def _after(self, epoch: int, window: int) -> tuple[int, int]:
        """The window after ``(epoch, window)``: the next one, or the next epoch's first."""
        if window + 1 < self.num_windows:
            return epoch, window + 1
        return epoch + 1, 0

    def _count(self, anchor: Anchor, *, pack: bool) -> tuple[int, int]:
        """``(rows, real tokens)`` of the anchor's window: from the next window's anchor when
        it is known, from its packing when it is cached or ``pack``, else counted
        (:func:`count_rows`: the same rows, no spans built)."""
        after = self._anchors.after(anchor)
        if after is not None and after.place == self._after(*anchor.place):
            return after.occurrence - anchor.occurrence, after.tokens - anchor.tokens
        epoch, window = anchor.epoch, anchor.window
        # a window handed to the background thread is packed here if that has not started
        # yet (rather than counted here and packed there)
        if pack or ("window", epoch, window) in self._plans or anchor.place in self._queued:
            packed = self.window(epoch, window)
            return packed.num_rows, int(packed.tokens_before[-1])
        return count_rows(
            self._documents(epoch, window)[1],
            width=self.block + 1,
            boundary=self.boundary,
            max_segments=self.max_segments,
            kernel=self.kernel,
        )

    def _plan_ahead(self, epoch: int, window: int) -> None:
        """Packs the window after ``(epoch, window)`` on the background thread (blocked
        order; after an epoch's last window, the next epoch's first)."""
        if not (self.blocked and self.inner.plan_ahead):  # type: ignore[union-attr]
            return
        nxt = self._after(epoch, window)
        if ("window", *nxt) in self._plans or nxt in self._queued:
            return
        self._queued.add(nxt)
        _prefetcher().submit(self._ahead, *nxt)

    def _ahead(self, epoch: int, window: int) -> None:
        with contextlib.suppress(Exception):  # raised again where the window is used
            if (epoch, window) in self._queued:  # not packed (and maybe evicted) meanwhile
                self.window(epoch, window)
            self.inner.announce_after(epoch, window)  # type: ignore[union-attr]

    # -- anchors -------------------------------------------------------------------------

    def add_anchor(self, anchor: Anchor | tuple[int, ...]) -> None:
        """Records where a window starts (an anchor a checkpoint state carried), so that
        locating rows from it counts no earlier window.

        Raises:
          ValueError: the anchor is not five ints of a window of this stream, or disagrees
            with one already known for its window.
        """
        values = tuple(anchor)
        fine = len(values) == len(Anchor._fields) and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values
        )
        if fine:
            anchor = Anchor(*values)
            fine = anchor.window < self.num_windows and anchor.row <= anchor.occurrence
        if not fine:
            raise ValueError(
                f"an anchor of source {self.name!r} must be {list(Anchor._fields)}: ints >= 0 "
                f"with window < {self.num_windows} and row <= occurrence; got {list(values)}"
            )
        known = self._anchors.add(anchor)
        if known != anchor:
            raise ValueError(
                f"an anchor of source {self.name!r}, {list(anchor)}, disagrees with the one "
                f"counted for its window, {list(known)}"
            )

    def anchor_of(self, occurrence: int) -> Anchor:
        """The anchor of the window that holds row ``occurrence`` of the stream (counting
        the windows from the nearest anchor known before it)."""
        return self._window_of(occurrence)[0]

    def _walk(
        self, start: Anchor, past: Callable[[Anchor, int], bool], target: str
    ) -> tuple[Anchor, int]:
        """From ``start``, the first window (its anchor and rows) that ``past`` is false for,
        counting each window once and recording the anchors on the way. The first two
        windows are packed (the one wanted when running forward or restoring), the others
        counted only.

        Raises:
          ValueError: the walk passes ``replay_limit`` documents (``target`` says where to).
        """
        anchor, steps = start, 0
        per_window = -(-self.num_documents // self.num_windows)
        rows, tokens = self._count(anchor, pack=True)
        while past(anchor, rows):
            steps += 1
            walked = steps * per_window
            if self.replay_limit is not None and walked > self.replay_limit:
                source = "" if self.name is None else f" of source {self.name!r}"
                raise ValueError(
                    f"{target} of this stream{source} lies past window {anchor.window:,} of "
                    f"epoch {anchor.epoch:,}: reaching it from the nearest position known "
                    f"(window {start.window:,} of epoch {start.epoch:,}) packs every window in "
                    f"between, over {self.replay_limit:,} documents, which grainpack "
                    "refuses. Restore from a state that carries the anchors (best_fit "
                    "states written by this release do), or check the step (a corrupt "
                    "checkpoint state?)"
                )
            epoch, window = self._after(*anchor.place)
            if epoch > anchor.epoch and anchor.row + rows == 0:
                raise self._kept_nothing(anchor.epoch, self.seed)
            row = anchor.row + rows if epoch == anchor.epoch else 0
            anchor = self._anchors.add(
                Anchor(epoch, window, anchor.occurrence + rows, row, anchor.tokens + tokens)
            )
            rows, tokens = self._count(anchor, pack=steps == 1)
        return anchor, rows

    def _window_of(self, occurrence: int) -> tuple[Anchor, int]:
        """The anchor and rows of the window holding row ``occurrence`` of the stream."""
        start = self._anchors.at_occurrence(occurrence)
        return self._walk(
            start, lambda a, rows: occurrence >= a.occurrence + rows, f"row {occurrence:,}"
        )

    def window_anchor(self, epoch: int, window: int) -> Anchor:
        """The anchor of window ``window`` of ``epoch`` (counting the windows from the
        nearest anchor known before it)."""
        start = self._anchors.at_place(epoch, window)
        return self._walk(
            start, lambda a, rows: a.place < (epoch, window), f"window {window} of epoch {epoch}"
        )[0]

    def _origin(self, epoch: int) -> int:
        """The occurrence of the first row of ``epoch``, from any anchor known in it."""
        known = self._anchors.first_in(epoch)
        if known is None:
            known = self.window_anchor(epoch, 0)
        return known.occurrence - known.row

    # -- the EpochRows interface ---------------------------------------------------------

    def locate(self, occurrences: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Maps occurrence indices to (epoch, row inside the epoch): a division when every
        epoch has the same rows, else from the anchors, one window at a time."""
        occurrences = np.asarray(occurrences, dtype=np.int64)
        if self.rows_per_epoch is not None:
            return super().locate(occurrences)
        order = np.argsort(occurrences, kind="stable")
        ordered = occurrences[order]
        epochs, rows = np.empty_like(occurrences), np.empty_like(occurrences)
        i = 0
        while i < len(ordered):
            anchor, count = self._window_of(int(ordered[i]))
            j = int(np.searchsorted(ordered, anchor.occurrence + count))
            epochs[order[i:j]] = anchor.epoch
            rows[order[i:j]] = ordered[i:j] - (anchor.occurrence - anchor.row)
            i = j
        return epochs, rows

    def rows_in_epoch(self, epoch: int) -> int:
        """Rows in ``epoch`` (counting every window of it not counted yet)."""
        if self.rows_per_epoch is not None:
            return self.rows_per_epoch
        if self.num_windows == 1:
            rows = self.window(epoch, 0).num_rows
            if rows == 0:
                raise self._kept_nothing(epoch, self.seed)
            return rows
        return self.window_anchor(epoch + 1, 0).occurrence - self._origin(epoch)

    def epoch_position(self, occurrence: int) -> tuple[int, float]:
        """The epoch of row ``occurrence`` and how much of it lies before that row: with
        windows of their own row counts (the blocked order), by windows,
        ``(window + rows of the window before it / its rows) / windows``, which counts no
        other window; else rows before it over the epoch's rows."""
        if self.rows_per_epoch is not None or self.num_windows == 1:
            return super().epoch_position(occurrence)
        anchor, rows = self._window_of(occurrence)
        within = (occurrence - anchor.occurrence) / rows
        return anchor.epoch, (anchor.window + within) / self.num_windows

    def epoch_tokens(self, epoch: int) -> int:
        """Real (non-padding) tokens in ``epoch``: its documents and boundary tokens."""
        if self.inner.selector is None:
            return self.unselected_tokens
        if self.num_windows == 1:
            return int(self.window(epoch, 0).tokens_before[-1])
        return self.window_anchor(epoch + 1, 0).tokens - self.window_anchor(epoch, 0).tokens

    def real_tokens_before(self, occurrence: int) -> int:
        """Real tokens in the first ``occurrence`` rows of the stream."""
        if self.rows_per_epoch is not None:
            epoch, row = divmod(occurrence, self.rows_per_epoch)
            before = int(self.window(epoch, 0).tokens_before[row])
            return epoch * self.unselected_tokens + before
        anchor, _ = self._window_of(occurrence)
        packed = self.window(anchor.epoch, anchor.window)
        return anchor.tokens + int(packed.tokens_before[occurrence - anchor.occurrence])

    def spans(self, epoch: int, rows: np.ndarray) -> Spans:
        """Spans of rows ``rows`` of ``epoch``, sorted by (requested row, offset)."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.num_windows == 1:
            packed = self.window(epoch, 0)
            if len(rows) and (rows.min() < 0 or rows.max() >= packed.num_rows):
                raise IndexError(
                    f"rows must lie in [0, {packed.num_rows}); got {rows.min()}..{rows.max()}"
                )
            return Spans(**packed.spans(rows, np.arange(len(rows))), filled=packed.filled[rows])
        if len(rows) and rows.min() < 0:
            raise IndexError(f"rows must be >= 0; got {rows.min()}")
        occurrences = self._origin(epoch) + rows if len(rows) else rows
        order = np.argsort(occurrences, kind="stable")
        ordered = occurrences[order]
        filled = np.zeros(len(rows), dtype=np.int64)
        parts = []
        i = 0
        while i < len(ordered):
            anchor, count = self._window_of(int(ordered[i]))
            if anchor.epoch != epoch:
                raise IndexError(f"row {int(rows[order[i]]):,} is past the end of epoch {epoch}")
            j = int(np.searchsorted(ordered, anchor.occurrence + count))
            mine, local = order[i:j], ordered[i:j] - anchor.occurrence
            packed = self.window(epoch, anchor.window)
            filled[mine] = packed.filled[local]
            parts.append(packed.spans(local, mine))
            if 2 * int(local.max()) >= packed.num_rows:  # past the middle: pack the next one
                self._plan_ahead(epoch, anchor.window)
            i = j
        if not parts:
            empty = np.zeros(0, dtype=np.int64)
            merged = dict.fromkeys(("row", "offset", "document", "start", "length"), empty)
            merged["boundary"] = np.zeros(0, dtype=bool)
        else:
            merged = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
            by_row = np.argsort(merged["row"], kind="stable")  # a row's pieces stay in order
            merged = {k: v[by_row] for k, v in merged.items()}
        return Spans(**merged, filled=filled)
