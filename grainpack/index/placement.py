"""Best-fit decreasing placement of one window's documents into rows (pure).

The kernel of ``PipelineConfig(packing="best_fit")`` (:mod:`grainpack.index.bestfit` is the
row stream built on it): a document's *size* is its length plus its boundary token, if one
is configured; a document of ``size > width`` is cut into ``size // width`` full rows first,
its tail of ``size % width`` tokens is a piece like any document that fits; the pieces, by
size decreasing (ties in the window's order), go to the open row with the least room that
holds them (ties: the row that got its current room last), or a new row. A row with
``max_segments`` pieces is closed; no piece is cut. The rows are then put in the order of a
keyed hash (:func:`pack_window`'s ``key``). A window's row count depends on the sizes of its
documents only, not on their order (:func:`count_rows`).

:func:`best_fit_rows` is a loop over the pieces (bisect over a sorted list of the rooms of
open rows); the pipeline passes numba's compiled twin (``grainpack.pipeline.compiled.best_fit``),
which places the same pieces in the same rows.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable

import numpy as np

from grainpack.index.hashing import splitmix64_array

__all__ = ["Kernel", "PackedWindow", "best_fit_rows", "count_rows", "pack_window"]

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
    tails = tails[_stable_order(width - rest[tails], width)]
    t_row, n_fit = _place(rest[tails], width, max_segments or 0, kernel)
    doc = np.concatenate([f_doc, tails])
    start = np.concatenate([f_start, full[tails] * width])
    end = np.concatenate([f_end, sizes[tails]])
    row = np.concatenate([np.arange(n_full), n_full + t_row])
    num_rows = n_full + n_fit
    rank = splitmix64_array(np.arange(num_rows, dtype=np.uint64) + np.uint64(key))
    position = np.empty(num_rows, dtype=np.int64)
    position[np.argsort(rank)] = np.arange(num_rows)  # distinct ranks: any sort agrees
    final = position[row]
    by_row = _stable_order(final, num_rows)  # placement order inside a row
    final, doc, start, end = final[by_row], doc[by_row], start[by_row], end[by_row]
    size = end - start
    first = np.zeros(num_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(final, minlength=num_rows), out=first[1:])
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


def _stable_order(keys: np.ndarray, bound: int) -> np.ndarray:
    """``np.argsort(keys, kind="stable")`` for ints in ``[0, bound)``, faster: a radix sort
    of 16-bit keys, or an unstable sort of keys made distinct by their index (numpy's
    stable sort of int64 is a timsort, 3-4x slower on 10**6 keys).

    Example:
      >>> _stable_order(np.array([2, 0, 2, 1, 0]), 3).tolist()
      [1, 4, 3, 0, 2]
    """
    n = len(keys)
    if bound <= 1 << 16:
        return np.argsort(keys.astype(np.uint16), kind="stable")
    if n and bound > (1 << 62) // n:  # keys * n + index would overflow int64
        return np.argsort(keys, kind="stable")
    return np.argsort(keys * n + np.arange(n))
