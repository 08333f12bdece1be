"""The compiled gather of the ``fast`` extra (numba): a batch's pieces copied in one call.

:class:`~grainpack.pipeline.gather.RowReader` joins memoryviews of the mapped shards, a C
loop, but it makes a slice object and a view per piece first: with the ~25 random pieces
of a documents batch that Python work costs about as much as the copy. :func:`gather` walks
the read table itself and copies each piece with ``memcpy`` (LLVM's), so a batch costs one
call; it first asks for the first cache line of every piece, so that the random pieces'
memory latencies overlap. About 2.5x faster reads, no Python object per piece. Imported
only when numba is installed (``pip install grainpack[fast]``); the batches are the same
bit for bit.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["best_fit", "copy_pieces", "expand", "gather"]


@intrinsic
def _copy(typingctx: Any, destination: Any, source: Any, nbytes: Any) -> tuple[Any, Any]:
    """``memcpy(destination, source, nbytes)``, addresses given as integers (numba types
    in, a signature and its LLVM code out)."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        to, of = (builder.inttoptr(a, cgutils.voidptr_t) for a in args[:2])
        cgutils.raw_memcpy(builder, to, of, args[2], 1)
        return context.get_dummy_value()

    return types.void(types.int64, types.int64, types.int64), codegen


@intrinsic
def _prefetch(typingctx: Any, address: Any) -> tuple[Any, Any]:
    """Asks for the cache line at ``address`` (an integer) to be loaded, for reading."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        i32 = ir.IntType(32)
        kind = ir.FunctionType(ir.VoidType(), [cgutils.voidptr_t, i32, i32, i32])
        prefetch = cgutils.get_or_insert_function(builder.module, kind, "llvm.prefetch.p0i8")
        where = builder.inttoptr(args[0], cgutils.voidptr_t)
        # read, high locality, data cache
        builder.call(
            prefetch, [where, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)]
        )
        return context.get_dummy_value()

    return types.void(types.int64), codegen


@numba.njit(nogil=True, cache=True)
def gather(
    out: np.ndarray,
    addresses: np.ndarray,
    sizes: np.ndarray,
    table: np.ndarray,
    first: int,
    stop: int,
    marks: np.ndarray,
    mark_first: int,
    mark_stop: int,
    offset: int,
    boundary: int,
) -> int:
    """Fills the 1-D ``out`` with pieces ``[first, stop)`` of ``table`` (rows: buffer,
    start, stop, in items of ``out``'s dtype; buffer ``g`` holds ``sizes[g]`` items at
    address ``addresses[g]``), then writes ``boundary`` at ``marks[mark_first:mark_stop] -
    offset``. Returns 0, or -1 with nothing read or written if ``out`` is not one contiguous
    axis, a range leaves its array, a piece leaves its buffer, or the pieces do not fill
    ``out`` exactly: a table that disagrees with the buffers is never followed (the buffers
    themselves, ``addresses`` and ``sizes``, are trusted: :class:`RowReader` takes them from
    the views it holds).

    Example:
      >>> a = np.arange(100, 110, dtype=np.uint16)
      >>> out = np.zeros(5, dtype=np.uint16)
      >>> table = np.array([[0, 0], [2, 8], [5, 10]])  # a[2:5], then a[8:10]
      >>> marks = np.array([1])  # a boundary token at out[1]
      >>> gather(out, np.array([a.ctypes.data]), np.array([10]), table, 0, 2, marks, 0, 1, 0, 7)
      0
      >>> out.tolist()
      [102, 7, 104, 108, 109]
    """
    itemsize = out.itemsize
    if out.ndim != 1 or (out.size > 1 and out.strides[0] != itemsize):
        return -1
    if len(addresses) != len(sizes) or table.shape[0] < 3 or not 0 <= first <= stop:
        return -1
    if stop > table.shape[1] or not 0 <= mark_first <= mark_stop <= len(marks):
        return -1
    total = 0  # checked whole first: nothing is read or written unless every piece fits
    for p in range(first, stop):
        g, lo, hi = table[0, p], table[1, p], table[2, p]
        if g < 0 or g >= len(sizes) or lo < 0 or hi < lo or hi > sizes[g]:
            return -1
        total += hi - lo
        if total > out.size:
            return -1
        if hi > lo:  # the pieces' first lines fetched at once, not one by one
            _prefetch(addresses[g] + lo * itemsize)
    if total != out.size:
        return -1
    for m in range(mark_first, mark_stop):
        if not 0 <= marks[m] - offset < out.size:
            return -1
    base, position = out.ctypes.data, 0
    for p in range(first, stop):
        g, lo, hi = table[0, p], table[1, p], table[2, p]
        _copy(base + position * itemsize, addresses[g] + lo * itemsize, (hi - lo) * itemsize)
        position += hi - lo
    for m in range(mark_first, mark_stop):
        out[marks[m] - offset] = boundary
    return 0


@numba.njit(nogil=True, cache=True)
def copy_pieces(
    out: np.ndarray, addresses: np.ndarray, sizes: np.ndarray, table: np.ndarray
) -> int:
    """Copies each piece of ``table`` (rows: buffer, start, stop, position; bytes) from its
    buffer (``sizes[g]`` bytes at address ``addresses[g]``) to ``out[position:]`` (1-D
    bytes); returns 0, or -1 with nothing written if a piece leaves its buffer or ``out``.

    Example:
      >>> a = np.arange(10, dtype=np.uint8)
      >>> out = np.zeros(5, dtype=np.uint8)
      >>> table = np.array([[0, 0], [2, 8], [5, 10], [0, 3]])  # a[2:5] to 0, a[8:10] to 3
      >>> copy_pieces(out, np.array([a.ctypes.data]), np.array([10]), table)
      0
      >>> out.tolist()
      [2, 3, 4, 8, 9]
    """
    if out.ndim != 1 or (out.size > 1 and out.strides[0] != 1) or table.shape[0] < 4:
        return -1
    for p in range(table.shape[1]):
        g, lo, hi, at = table[0, p], table[1, p], table[2, p], table[3, p]
        if g < 0 or g >= len(sizes) or lo < 0 or hi < lo or hi > sizes[g]:
            return -1
        if at < 0 or at + hi - lo > out.size:
            return -1
    base = out.ctypes.data
    for p in range(table.shape[1]):
        g, lo, hi, at = table[0, p], table[1, p], table[2, p], table[3, p]
        _copy(base + at, addresses[g] + lo, hi - lo)
    return 0


@numba.njit(nogil=True, cache=True)
def expand(
    tokens: np.ndarray,
    start: np.ndarray,
    count: np.ndarray,
    segment: np.ndarray,
    first_piece: int,
    stop_piece: int,
    filled: np.ndarray,
    first: int,
    inputs: np.ndarray,
    targets: np.ndarray,
    segment_ids: np.ndarray,
    positions: np.ndarray,
    loss_mask: np.ndarray,
) -> int:
    """The five int32 arrays of the full layout (:func:`grainpack.pipeline.expand.expand_rows`,
    the numpy statement) of rows ``[first, first + n)`` of a plan, written into the given
    C-contiguous ``(n, block)`` arrays in one pass each: ``tokens`` ``(n, block + 1)`` are
    the rows, and layout pieces ``[first_piece, stop_piece)`` (``start`` on the inputs' grid,
    ``count``, ``segment``) tile them. Returns 0, or -1 with nothing written if an array's
    shape or layout differs, a range leaves its array, the pieces do not tile the rows
    exactly, or a row's ``filled`` is out of range.

    Loops run on unsigned indices: numba then drops its negative-index wraparound, and LLVM
    vectorizes them.

    Example:
      >>> tokens = np.array([[5, 6, 7, 8], [9, 0, 0, 0]], dtype=np.uint16)
      >>> out = [np.empty((2, 3), np.int32) for _ in range(5)]
      >>> start, count = np.array([0, 2, 3, 4]), np.array([2, 1, 1, 2])
      >>> expand(tokens, start, count, np.array([1, 2, 1, 0]), 0, 4, np.array([4, 1]), 0, *out)
      0
      >>> [a.tolist() for a in out[2:]]  # segment ids, positions, loss mask
      [[[1, 1, 2], [1, 0, 0]], [[0, 1, 0], [0, 0, 0]], [[1, 1, 1], [0, 0, 0]]]
    """
    n, block = inputs.shape
    end = (first + n) * block
    if tokens.shape != (n, block + 1) or first < 0 or first + n > len(filled):
        return -1
    if not 0 <= first_piece <= stop_piece <= min(len(start), len(count), len(segment)):
        return -1
    for out in (inputs, targets, segment_ids, positions, loss_mask):
        if out.shape != (n, block) or (n * block > 0 and out.strides[1] != 4):
            return -1
        if n > 1 and out.strides[0] != 4 * block:
            return -1
    covered = first * block  # checked whole first: nothing is written unless the pieces
    for p in range(first_piece, stop_piece):  # are consecutive and tile the rows exactly
        if start[p] != covered or count[p] < 0 or count[p] > end - covered:
            return -1
        covered += count[p]
    if covered != end:
        return -1
    for r in range(n):
        if not 0 <= filled[first + r] <= block + 1:
            return -1
    one, size = np.uint64(1), np.uint64(n * block)
    flat_inputs, flat_targets = inputs.reshape(-1), targets.reshape(-1)
    flat_segments, flat_positions = segment_ids.reshape(-1), positions.reshape(-1)
    flat_mask = loss_mask.reshape(-1)
    for r in range(np.uint64(0), np.uint64(n)):
        row = r * np.uint64(block)
        for i in range(np.uint64(0), np.uint64(block)):
            flat_inputs[row + i] = tokens[r, i]
        for i in range(np.uint64(0), np.uint64(block)):
            flat_targets[row + i] = tokens[r, i + one]
    for i in range(np.uint64(0), size):
        flat_mask[i] = 1
    at = np.uint64(0)
    for p in range(first_piece, stop_piece):
        length, value = np.uint64(count[p]), np.int32(segment[p])
        for k in range(np.uint64(0), length):
            flat_segments[at + k] = value
            flat_positions[at + k] = np.int32(k)
        at += length
    for r in range(n):
        f = filled[first + r]
        if f <= block:  # a row with padding: no position past it, no loss on its targets
            for i in range(f, block):
                positions[r, i] = 0
            for i in range(max(f - 1, 0), block):
                loss_mask[r, i] = 0
    return 0


@numba.njit(nogil=True, cache=True)
def best_fit(sizes: np.ndarray, width: int, max_segments: int) -> tuple[np.ndarray, int]:
    """:func:`grainpack.index.bestfit.best_fit_rows`, compiled: the same rows for the same
    pieces. Open rows are kept in a stack per room (the row that got the room last on top);
    a segment tree over rooms finds the least room that holds a piece in ``O(log width)``."""
    n = len(sizes)
    row = np.empty(n, dtype=np.int64)
    top = np.full(width + 1, -1, dtype=np.int64)  # per room: the open row on top of its stack
    below = np.empty(max(n, 1), dtype=np.int64)  # per row: the row under it in its stack
    pieces = np.zeros(max(n, 1), dtype=np.int64)
    leaves = 1
    while leaves < width + 1:
        leaves *= 2
    tree = np.zeros(2 * leaves, dtype=np.bool_)  # a node is set if a room under it is open
    opened = 0
    for i in range(n):
        size = sizes[i]
        # the least open room >= size, or -1
        node = leaves + size
        found = -1
        if tree[node]:
            found = size
        else:
            while True:
                while node & 1:
                    node >>= 1
                if node == 0:
                    break
                node += 1
                if tree[node]:
                    while node < leaves:
                        node = 2 * node if tree[2 * node] else 2 * node + 1
                    found = node - leaves
                    break
        if found < 0:
            r = opened
            opened += 1
            room = width - size
            pieces[r] = 1
        else:
            r = top[found]
            top[found] = below[r]
            if top[found] < 0:  # the room's stack is empty: clear it in the tree
                node = leaves + found
                tree[node] = False
                node >>= 1
                while node >= 1 and not (tree[2 * node] or tree[2 * node + 1]):
                    tree[node] = False
                    node >>= 1
            room = found - size
            pieces[r] += 1
        row[i] = r
        if room > 0 and (max_segments == 0 or pieces[r] < max_segments):
            below[r] = top[room]
            top[room] = r
            node = leaves + room
            while node >= 1 and not tree[node]:
                tree[node] = True
                node >>= 1
    return row, opened
