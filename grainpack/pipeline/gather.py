"""Gathering tokens: the read table of a :class:`~grainpack.index.packed.PackedRows` ->
``(rows, block + 1)`` tokens, with one call per read.

With numba installed (the ``fast`` extra), :func:`grainpack.pipeline.compiled.gather` copies
every piece of the rows from the mapped shards in one compiled call; else one ``bytes.join``
of memmap views does, one C loop after a slice and a view per piece (several times faster
than a numpy copy per span, about half the compiled gather's speed). Either way the rows are
then still in the CPU cache when :func:`~grainpack.pipeline.expand.expand_rows` converts
them.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from grainpack.corpus.errors import CorpusError
from grainpack.corpus.pool import ArrayPool
from grainpack.index.packed import PackedRows
from grainpack.pipeline import fast

__all__ = ["RowReader", "TokenStream", "token_dtype"]

# Views joined at once. Objects alive when the cyclic GC runs are promoted to an older
# generation, and enough promotions trigger a full collection (tens of ms with JAX
# imported): thousands of live views per join did that every ~40 batches.
JOIN_PIECES = 64


class TokenStream(Protocol):
    """What gathering needs from a source (``TokenShardSource`` is one): shard starts in the
    token stream, the token dtype and each shard's tokens as a buffer."""

    @property
    def shard_starts(self) -> np.ndarray: ...

    @property
    def dtype(self) -> np.dtype: ...

    def shard_view(self, shard: int) -> memoryview: ...

    # Optional: ``size_check(shard)``, a check that raises unless reading the view is safe
    # (a truncated file would raise SIGBUS).


def token_dtype(readers: Sequence[TokenStream], ids: Sequence[int]) -> np.dtype:
    """The dtype rows are gathered in (a compact batch's ``tokens``): the readers' dtypes
    promoted (uint16 and uint32 give uint32), or uint32 if the ``ids`` (pad and boundary)
    do not fit it, or int32 (signed or wider dtypes; ids are below 2**31).

    Example:
      >>> class R:
      ...     def __init__(self, dtype): self.dtype = np.dtype(dtype)
      >>> [str(token_dtype([R(a), R(b)], ids)) for a, b, ids in [("uint16", "uint16", [0]),
      ...     ("uint16", "uint32", [0]), ("uint16", "uint16", [70_000]), ("uint16", "int32", [0])]]
      ['uint16', 'uint32', 'uint32', 'int32']
    """

    def holds_ids(dtype: np.dtype) -> bool:
        return all(np.iinfo(dtype).min <= i <= np.iinfo(dtype).max for i in ids)

    dtype = np.result_type(*[np.dtype(r.dtype) for r in readers])
    if dtype.itemsize <= 4 and holds_ids(dtype):
        return dtype
    if dtype.kind == "u" and holds_ids(np.dtype(np.uint32)):
        return np.dtype(np.uint32)
    return np.dtype(np.int32)


class RowReader:
    """Gathers the tokens of rows packed by :func:`pack_rows`, a range of rows at a time.

    The constructor turns the read table into buffer views (no tokens are touched);
    :meth:`read` copies the pieces of a few rows in one call (the compiled gather, or a join
    of the views), so the rows are still in the CPU cache when :func:`expand_rows` converts
    them.

    Args:
      packed: the output of :func:`pack_rows`.
      readers: ``readers[j]`` reads the source whose ``source_index`` is ``j``.
      block: as in :func:`pack_rows`.
      pad_id: token of padding runs.
      boundary_id: token written at ``read_marks``.
      names: the sources' names, for messages (default: their indices).
      compiled: copy with the compiled gather (:func:`grainpack.pipeline.fast.kernels`) when
        numba is installed; the tokens are the same either way.

    Example:
      >>> import tempfile, grainpack as gp
      >>> src = gp.write_corpus(tempfile.mkdtemp(), [[1, 2, 3], [4, 5]])
      >>> none = dict.fromkeys(("start", "count", "segment", "row_piece", "padded"))
      >>> packed = PackedRows(**none, filled=np.array([5]), read_source=np.array([0, -1]),
      ...     read_shard=np.array([0, 0]), read_start=np.array([1, 0]),
      ...     read_stop=np.array([5, 1]), read_marks=np.array([2]))
      >>> RowReader(packed, [src], block=4, pad_id=0, boundary_id=9).read(0, 1).tolist()
      [[2, 3, 9, 5, 0]]
    """

    def __init__(
        self,
        packed: PackedRows,
        readers: Sequence[TokenStream],
        *,
        block: int,
        pad_id: int,
        boundary_id: int | None,
        names: Sequence[str] | None = None,
        compiled: bool = True,
    ) -> None:
        self.width = block + 1
        self.names = list(names) if names is not None else list(range(len(readers)))
        source, shard = packed.read_source, packed.read_shard
        start, stop = packed.read_start, packed.read_stop
        ids = [pad_id] if boundary_id is None else [pad_id, boundary_id]
        self.dtype = token_dtype(readers, ids)  # of every source: one dtype for every batch
        # buffer g: shard g - base[j] of source j; the last one holds the constants
        base = np.cumsum([0, *(len(r.shard_starts) - 1 for r in readers)])
        index = base[source] + shard
        buffers: list[Any] = [None] * (int(base[-1]) + 1)
        checks: list[Any] = [None] * len(buffers)  # run before every read of the buffer
        self.shards: dict[int, list[int]] = {}  # source -> the shards read, in order
        self.signed = False  # a signed token file (Megatron's int dtypes) is read
        for g in np.flatnonzero(np.bincount(index[source >= 0], minlength=len(buffers))).tolist():
            j = int(np.searchsorted(base, g, side="right")) - 1
            k = g - int(base[j])
            self.shards.setdefault(j, []).append(k)
            view = readers[j].shard_view(k)
            if hasattr(readers[j], "size_check"):
                checks[g] = readers[j].size_check(k)
            stored = np.dtype(view.format)  # little-endian file bytes, whatever the host
            self.signed |= stored.kind == "i"
            # mixed token dtypes (or a big-endian host): convert piece by piece
            buffers[g] = view if stored == self.dtype else _Converted(view, stored, self.dtype)
        constants = np.full(self.width + 1, pad_id, dtype=self.dtype)
        constants[-1] = pad_id if boundary_id is None else boundary_id
        buffers[-1] = memoryview(constants)
        # Tables stay numpy arrays, and views and slices are made per read (a few dozen):
        # Python objects per piece (millions with short documents) make every run of the
        # cyclic GC traverse them, which stalled next() for tens of milliseconds.
        self.buffers, self.checks, self.base = buffers, checks, base
        self.table = np.stack([index, start, stop]).astype(np.int64, copy=False)
        lengths = stop - start
        at = np.cumsum(lengths) - lengths  # token position of each piece (pieces tile rows)
        self.row_pieces = _row_firsts(at, packed.num_rows, self.width)
        self.marks = np.array(packed.read_marks, dtype=np.int64)
        self.boundary_id = boundary_id
        self.row_marks = _row_firsts(self.marks, packed.num_rows, self.width)
        # The compiled gather copies from the buffers' addresses (``self.buffers`` keeps
        # them mapped); converted pieces are joined.
        found = fast.kernels() if compiled else None
        plain = not any(isinstance(b, _Converted) for b in buffers)
        self.kernel = found.gather if found is not None and plain else None
        if self.kernel is not None:
            held = [np.frombuffer(b, np.uint8) if b is not None else None for b in buffers]
            self.addresses = np.array([0 if h is None else h.ctypes.data for h in held])
            items = self.dtype.itemsize
            self.sizes = np.array([0 if h is None else len(h) // items for h in held])

    def read(self, first: int, stop: int, *, pool: ArrayPool | None = None) -> np.ndarray:
        """The tokens ``(stop - first, block + 1)`` of rows ``[first, stop)`` (a new array;
        the compiled gather's is of ``pool`` when given)."""
        p0, p1 = self.row_pieces.item(first), self.row_pieces.item(stop)
        m0, m1 = self.row_marks.item(first), self.row_marks.item(stop)
        if self.kernel is None:  # the join needs every column as Python ints
            shards, lo, hi = self.table[:, p0:p1].tolist()
        else:
            shards = self.table[0, p0:p1].tolist()
        for g in set(shards):  # a truncated shard: a CorpusError, not SIGBUS
            if (check := self.checks[g]) is not None:
                check()
        if self.kernel is not None:
            size = (stop - first) * self.width
            tokens = np.empty(size, self.dtype) if pool is None else pool.empty((size,), self.dtype)
            boundary = 0 if self.boundary_id is None else self.boundary_id
            args = (self.table, p0, p1, self.marks, m0, m1, first * self.width, boundary)
            if self.kernel(tokens, self.addresses, self.sizes, *args) < 0:
                raise RuntimeError(
                    f"the read table of rows [{first}, {stop}) does not fit the mapped shards "
                    "(a grainpack bug: please report it)"
                )
        else:
            tokens = self._join(shards, lo, hi)
            if m1 > m0:
                tokens[self.marks[m0:m1] - first * self.width] = self.boundary_id
        if self.signed and len(tokens) and tokens.min() < 0:
            self._refuse_negative(tokens, p0, p1)
        return tokens.reshape(stop - first, self.width)

    def _join(self, shards: list[int], lo: list[int], hi: list[int]) -> np.ndarray:
        """The pieces ``(shards, lo, hi)`` joined, one ``bytes.join`` of views."""
        views = map(operator.getitem, map(self.buffers.__getitem__, shards), map(slice, lo, hi))
        if len(shards) <= JOIN_PIECES:
            data = bytearray().join(views)
        else:  # short documents: few live views at a time (see JOIN_PIECES)
            data = bytearray()
            for _ in range(0, len(shards), JOIN_PIECES):
                data += bytearray().join(itertools.islice(views, JOIN_PIECES))
        return np.frombuffer(data, self.dtype)

    def _refuse_negative(self, tokens: np.ndarray, p0: int, p1: int) -> None:
        """Raises :class:`CorpusError` naming the first negative id of ``tokens`` (read from
        pieces ``[p0, p1)``) and where it is stored."""
        shards, lo, hi = self.table[:, p0:p1].tolist()
        position = int(np.argmax(tokens < 0))
        ends = np.cumsum(np.subtract(hi, lo))
        piece = int(np.searchsorted(ends, position, side="right"))
        local = hi[piece] - int(ends[piece]) + position  # in the piece's shard
        g = shards[piece]
        source = int(np.searchsorted(self.base, g, side="right")) - 1
        raise CorpusError(
            f"token id {tokens[position]} at token {local} of shard {g - int(self.base[source])} "
            f"of source {self.names[source]!r} is negative (a signed token file); token ids are "
            "non-negative, so the file is corrupt or not a token file (`grainpack verify` checks "
            "every id)"
        )


def _row_firsts(positions: np.ndarray, num_rows: int, width: int) -> np.ndarray:
    """For sorted token ``positions``, the index of the first one in each row of ``width``
    tokens, then their number (a count per row: cheaper than a search per row)."""
    firsts = np.zeros(num_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(positions // width, minlength=num_rows)[:num_rows], out=firsts[1:])
    return firsts


@dataclasses.dataclass(frozen=True)
class _Converted:
    """A shard buffer whose slices are converted to another dtype (copies)."""

    view: memoryview
    source: np.dtype
    target: np.dtype

    def __getitem__(self, piece: slice) -> np.ndarray:
        return np.frombuffer(self.view[piece], self.source).astype(self.target)
