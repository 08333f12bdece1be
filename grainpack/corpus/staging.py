"""Staging a plan's pieces of remote sources: the seam between the pipeline's read table and
object storage.

The pipeline gathers rows from shard buffers (``shard_view``, the memory map of a local
shard). A remote source has no such buffer, so :func:`stage_pieces` gives the gather one:
for each remote source of a plan (:class:`~grainpack.index.packed.PackedRows`), one local
buffer holding exactly the pieces the plan reads, in read-table order, and a copy of the
read table pointing into it. The gather itself is unchanged (the compiled one included);
:class:`StagedReader` fills the buffer before the rows that need it are read, and fetches
the pieces of the rows after them in the background (the plan is the exact future: the
same table the batch reads), up to ``lookahead_bytes`` ahead. Local sources are untouched:
a plan without remote sources is not staged at all.

A chunk first waits for the background reads of the source (:meth:`~grainpack.corpus.
remote.RemoteShardSource.read_ahead`: the blocked order's next window, whole) that hold its
pieces, so that nothing is fetched twice.

Each remote source stages on threads of its own (:func:`stager`): reads ahead that retry
against a store that went away hold that source's threads only, never another source's.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from grainpack.corpus.daemon_pool import DaemonPool
from grainpack.index.packed import PackedRows

__all__ = ["StagedPieces", "StagedReader", "stage_pieces", "stager"]

# Chunks of rows of one source staged at once (each fetches with the source's in-flight budget).
STAGING_THREADS = 4
# Bytes of pieces a chunk holds (whole reads): each chunk costs the staging threads some
# interpreter work, which they share with the training loop; one batch a chunk made that
# work per step (batches of 64 rows of 2048: 256 KiB).
CHUNK_BYTES = 4 << 20
_LOCK = threading.Lock()


def stager(source: Any) -> DaemonPool:
    """``source``'s staging threads in this process (created on first use; a pickled or
    forked copy makes its own)."""
    with _LOCK:
        pool = source.__dict__.get("_stager")
        if pool is None:
            pool = DaemonPool(STAGING_THREADS, name="grainpack-stage")
            source.__dict__["_stager"] = pool
        return pool


class _Buffer:
    """A staged source as the gather sees it: one shard, the plan's pieces back to back."""

    def __init__(self, tokens: np.ndarray, dtype: np.dtype) -> None:
        self.tokens, self.dtype = tokens, dtype
        self.shard_starts = np.array([0, len(tokens)], dtype=np.int64)

    def shard_view(self, shard: int) -> memoryview:
        return memoryview(self.tokens)


@dataclasses.dataclass
class StagedPieces:
    """The staged form of a plan: ``packed`` (its read table pointing into the buffers),
    ``readers`` (the local sources as they were, a buffer for each remote one) and what to
    fetch for each remote source: ``pieces[j]``, the table indices of its pieces with their
    original shard ranges."""

    packed: PackedRows
    readers: list[Any]
    sources: list[Any]
    buffers: dict[int, np.ndarray]
    pieces: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
    row_pieces: np.ndarray
    piece_bytes: np.ndarray


def stage_pieces(packed: PackedRows, sources: Sequence[Any]) -> StagedPieces | None:
    """The staged form of ``packed`` (see the module docstring), or ``None`` when none of
    ``sources`` is remote (the plan is read as it is)."""
    remote = [j for j, s in enumerate(sources) if getattr(s, "remote", False)]
    if not remote:
        return None
    source, shard = packed.read_source, packed.read_shard
    start, stop = packed.read_start, packed.read_stop
    new_shard, new_start, new_stop = shard.copy(), start.copy(), stop.copy()
    readers: list[Any] = list(sources)
    buffers, pieces = {}, {}
    piece_bytes = np.zeros(len(source), dtype=np.int64)
    for j in remote:
        index = np.flatnonzero(source == j)
        lengths = (stop[index] - start[index]).astype(np.int64)
        at = np.cumsum(lengths) - lengths
        dtype = sources[j]._file_dtype
        buffers[j] = sources[j].buffer(int(lengths.sum()))
        readers[j] = _Buffer(buffers[j], dtype)
        pieces[j] = (index, shard[index].copy(), start[index].copy(), stop[index].copy(), at)
        new_shard[index], new_start[index], new_stop[index] = 0, at, at + lengths
        piece_bytes[index] = lengths * dtype.itemsize
    staged = dataclasses.replace(
        packed, read_shard=new_shard, read_start=new_start, read_stop=new_stop
    )
    lengths = stop - start
    width = _width(packed)
    positions = np.cumsum(lengths) - lengths  # pieces tile the rows, in order
    row_pieces = np.zeros(packed.num_rows + 1, dtype=np.int64)
    np.cumsum(
        np.bincount(positions // width, minlength=packed.num_rows)[: packed.num_rows],
        out=row_pieces[1:],
    )
    return StagedPieces(staged, readers, list(sources), buffers, pieces, row_pieces, piece_bytes)


def _width(packed: PackedRows) -> int:
    lengths = packed.read_stop - packed.read_start
    total = int(lengths.sum())
    return total // packed.num_rows if packed.num_rows else 1


class StagedReader:
    """A reader (``read(first, stop, **options)``; other attributes pass through) whose
    reads first wait for the staged pieces of their rows, and which fetches the pieces of
    the rows after them in the background, up to the sources' ``lookahead_bytes``. ``copy``:
    the compiled copy of pieces held in memory (see ``RemoteShardSource.read_pieces``)."""

    def __init__(
        self, reader: Any, staged: StagedPieces, *, copy: Callable[..., int] | None = None
    ) -> None:
        self.reader, self.staged, self.copy = reader, staged, copy
        self.chunk_rows = 0
        self.futures: dict[tuple[int, int], concurrent.futures.Future[None]] = {}
        self.lookahead = max(s.options.lookahead_bytes for s in self._remote())
        self.submitted = 0  # chunks [0, submitted) were started
        self.piece_ends = np.r_[0, np.cumsum(staged.piece_bytes)]  # bytes before each piece

    def bytes_after(self, row: int) -> int:
        """Bytes of the staged pieces of the rows from ``row`` on."""
        ends = self.piece_ends
        return int(ends[-1] - ends[self.staged.row_pieces.item(row)])

    def start(self, read_rows: int) -> None:
        """Reads go by ``read_rows`` rows (the first read's size, unless set before); the
        pieces are fetched by chunks of whole reads of about ``CHUNK_BYTES``."""
        if self.chunk_rows:
            return
        rows = self.staged.packed.num_rows
        read_bytes = max(1, int(self.piece_ends[-1]) * max(read_rows, 1) // max(rows, 1))
        self.chunk_rows = max(read_rows, 1) * max(1, CHUNK_BYTES // read_bytes)
        heads = self.staged.row_pieces[: rows : self.chunk_rows]
        ends = np.r_[heads[1:], self.staged.row_pieces[rows]]
        sizes = self.piece_ends
        self.chunk_ends = np.cumsum(sizes[ends] - sizes[heads])  # bytes up to each chunk

    def prefetch(self, budget: int) -> None:
        """Fetches the plan's pieces up to byte ``budget`` (and the chunk that reaches it) in
        the background, those not started yet; a plan read next gets its first bytes this
        way before the current plan's last rows are read. Needs :meth:`start`."""
        last = int(np.searchsorted(self.chunk_ends, budget, side="left"))
        last = min(last + 1, len(self.chunk_ends))
        if last <= self.submitted:
            return
        for c in range(self.submitted, last):
            self._submit(c)
        before = int(self.chunk_ends[self.submitted - 1]) if self.submitted else 0
        for s in self._remote():
            s._count("prefetched_bytes", int(self.chunk_ends[last - 1]) - before)
        self.submitted = last

    def __getattr__(self, name: str) -> object:  # only for names this class lacks
        return getattr(self.__dict__["reader"], name)

    def _remote(self) -> list[Any]:
        return [self.staged.sources[j] for j in self.staged.pieces]

    def _span(self, chunk: int) -> tuple[int, int]:
        """The pieces (table indices) of rows chunk ``chunk``."""
        rows, first = self.staged.packed.num_rows, chunk * self.chunk_rows
        p0 = self.staged.row_pieces.item(first)
        return p0, self.staged.row_pieces.item(min(first + self.chunk_rows, rows))

    def _fill(self, j: int, chunk: int) -> None:
        """Fetches source ``j``'s staged pieces of rows chunk ``chunk`` into its buffer."""
        staged = self.staged
        index, shards, starts, stops, at = staged.pieces[j]
        p0, p1 = self._span(chunk)
        lo, hi = np.searchsorted(index, [p0, p1]).tolist()
        if hi > lo:
            staged.sources[j].read_pieces(
                staged.buffers[j],
                shards[lo:hi],
                starts[lo:hi],
                stops[lo:hi],
                at[lo:hi],
                copy=self.copy,
            )

    def _submit(self, chunk: int) -> None:
        """Starts fetching chunk ``chunk`` of every remote source (unless it was)."""
        for j, source in zip(self.staged.pieces, self._remote()):
            if (j, chunk) not in self.futures:
                self.futures[(j, chunk)] = stager(source).submit(self._fill, j, chunk)

    def _chunks(self, first: int, stop: int) -> range:
        """The chunks of rows ``[first, stop)``."""
        self.start(stop - first)
        return range(first // self.chunk_rows, (max(stop, first + 1) - 1) // self.chunk_rows + 1)

    def ready(self, first: int, stop: int) -> bool:
        """Whether :meth:`read` of rows ``[first, stop)`` would find their pieces here
        (not wait for them)."""
        return all(
            (j, c) in self.futures and self.futures[(j, c)].done()
            for c in self._chunks(first, stop)
            for j in self.staged.pieces
        )

    def read(self, first: int, stop: int, **options: Any) -> np.ndarray:
        """The inner reader's ``read``, once the pieces of rows ``[first, stop)`` are here."""
        needed = self._chunks(first, stop)
        began, inline = time.perf_counter(), False
        for c in needed:  # not started: read here (no thread to wait for)
            for j in self.staged.pieces:
                if (j, c) not in self.futures:
                    inline = True
                    done: concurrent.futures.Future[None] = concurrent.futures.Future()
                    self.futures[(j, c)] = done
                    try:
                        self._fill(j, c)
                        done.set_result(None)
                    except BaseException as err:
                        done.set_exception(err)
                        raise
        wanted = [self.futures[(j, c)] for j in self.staged.pieces for c in needed]
        waited = inline or not all(f.done() for f in wanted)
        for future in wanted:
            future.result()  # a CorpusError naming the URL, if one failed
        if waited:
            for s in self._remote():
                s._count("wait_seconds", time.perf_counter() - began)
                s._count("inline_reads", inline)
        # then the rows after them: requests that would delay these go out once they are in
        self.submitted = max(self.submitted, needed[-1] + 1)
        self.prefetch(int(self.chunk_ends[needed[-1]]) + self.lookahead)
        return self.reader.read(first, stop, **options)

    def __del__(self) -> None:
        for future in [*getattr(self, "futures", {}).values()]:
            future.cancel()  # fetches not started of a plan no longer read
