# Over 400 lines, one module: the packed-rows record, its layout and its read table are one
# structure, built in one vectorized pass.
"""Packed rows: spans of a batch's rows -> their pieces and *read table* (index math, no tokens).

:func:`pack_rows` turns the spans of every (source, epoch) in a batch into a
:class:`PackedRows` record: where each segment of the ``(rows, block)`` inputs starts, and the
pieces that tile the rows' ``block + 1`` tokens in order (stream ranges of a source's
shards, boundary tokens, padding runs). It is small: a Grain worker sends it, not tokens.
Reading the tokens (:mod:`grainpack.pipeline.gather`) and writing the model arrays
(:mod:`grainpack.pipeline.expand`) happen where the batch is consumed.

Pure: numpy and the standard library only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from grainpack.index.stream import Spans

__all__ = [
    "CONSTANT",
    "PackedRows",
    "Part",
    "Provenance",
    "StreamLayout",
    "pack_rows",
    "segment_bits",
]


class StreamLayout(Protocol):
    """Where a source's documents and shards lie in its token stream (``TokenShardSource``
    is one): int64 document offsets, the stream length and shard starts."""

    def document_offsets(self, documents: np.ndarray) -> np.ndarray: ...

    @property
    def num_tokens(self) -> int: ...

    @property
    def shard_starts(self) -> np.ndarray: ...


@dataclasses.dataclass(frozen=True)
class Part:
    """Rows of one (source, epoch) in a batch: requested row ``i`` of ``spans`` goes to batch
    row ``destination[i]``; ``stream`` gives the document offsets and shard starts."""

    source_index: int
    epoch: int
    stream: StreamLayout
    spans: Spans
    destination: np.ndarray


CONSTANT = -1  # read_source of padding runs and loose boundary tokens (constants buffer)


@dataclasses.dataclass(frozen=True)
class Provenance:
    """Where every row and segment of a :class:`PackedRows` comes from.

    Per row: ``source`` (int32) and ``epoch`` (int64), -1 for padding rows. Per segment, in
    token order: ``segment_slot`` (int64, ``row * (block + 1) + k`` for the row's segment
    ``k``, segment id ``k + 1``), ``segment_document`` and ``segment_offset`` (int64, the
    document id and the offset of the segment's first token in it). A segment made of the
    row's last token only (a target, after a boundary token) has an entry but no position
    in the inputs' segment ids. Kept per segment (a few per row), :meth:`rows` lays a
    batch's segments out in tables ``block + 1`` wide.
    """

    source: np.ndarray
    epoch: np.ndarray
    segment_slot: np.ndarray
    segment_document: np.ndarray
    segment_offset: np.ndarray

    def rows(self, first: int, stop: int, *, width: int) -> dict[str, np.ndarray]:
        """Rows ``[first, stop)`` by key, new arrays: ``source`` and ``epoch`` per row, and
        ``segment_document`` and ``segment_offset`` ``(stop - first, width)`` with the row's
        segment ``k`` in column ``k`` and -1 past its last segment (``width = block + 1``
        columns, the most segments a row can hold, so every batch has the same shapes).

        Example:
          >>> p = Provenance(np.array([0, 1], np.int32), np.array([3, 0]), np.array([0, 1, 3]),
          ...                np.array([7, 8, 9]), np.array([5, 0, 2]))
          >>> p.rows(0, 2, width=3)["segment_document"].tolist()
          [[7, 8, -1], [9, -1, -1]]
        """
        lo, hi = np.searchsorted(self.segment_slot, (first * width, stop * width))
        slot = self.segment_slot[lo:hi] - first * width
        out = {"source": self.source[first:stop].copy(), "epoch": self.epoch[first:stop].copy()}
        for key in ("segment_document", "segment_offset"):
            table = np.full((stop - first, width), -1, dtype=np.int64)
            table.flat[slot] = getattr(self, key)[lo:hi]
            out[key] = table
        return out


@dataclasses.dataclass(frozen=True)
class PackedRows:
    """The layout and read table of ``num_rows`` rows of ``block + 1`` tokens.

    Attributes:
      filled: int64 ``(num_rows,)``, real tokens per row.
      start: int32, sorted: where each piece of the layout starts in the flattened
        ``(num_rows, block)`` inputs.
      count: intp, the length of each layout piece (what ``np.repeat`` takes).
      segment: int32, the segment id of each layout piece (0 for padding).
      row_piece: the first layout piece of each row, then the number of pieces.
      padded: rows whose last target is padding (sorted).
      read_source: int32, per read piece: a part's ``source_index``, or ``CONSTANT``.
      read_shard: int32, the shard of that source the piece reads.
      read_start, read_stop: int64, a shard-local range (for ``CONSTANT``, a range of
        ``[pad_id] * (block + 1) + [boundary_id]``). Read pieces tile the flattened
        ``(num_rows, block + 1)`` tokens in order.
      read_marks: the sorted flat positions of boundary tokens. A span followed by a
        boundary token reads one stream token more, overwritten by the boundary id, so most
        boundaries cost no piece of their own.
      provenance: where rows and segments come from, if asked for.
      segment_starts: a plan for the compact layout has these instead of ``start``,
        ``count``, ``segment``, ``row_piece`` and ``padded`` (then ``None``): uint8
        ``(num_rows, ceil(block / 8))``, bit ``i`` of a row (``np.packbits`` order) set where a
        segment starts at input position ``i`` (:func:`segment_bits`).
    """

    filled: np.ndarray
    start: np.ndarray | None
    count: np.ndarray | None
    segment: np.ndarray | None
    row_piece: np.ndarray | None
    padded: np.ndarray | None
    read_source: np.ndarray
    read_shard: np.ndarray
    read_start: np.ndarray
    read_stop: np.ndarray
    read_marks: np.ndarray
    provenance: Provenance | None = None
    segment_starts: np.ndarray | None = None

    @property
    def num_rows(self) -> int:
        return len(self.filled)

    def to_element(self) -> dict[str, Any]:
        """The record as one uint8 buffer and a spec of (key, dtype, shape, offset).

        Grain moves the buffer through one shared-memory segment: a pickled element larger
        than a pipe's buffer blocks a worker's exit (``close()`` then waits 25 s), and a
        segment per array costs more than the rest of the plan.
        """
        arrays = [(f.name, getattr(self, f.name)) for f in _fields(PackedRows)]
        arrays = [(key, array) for key, array in arrays if array is not None]
        if self.provenance is not None:
            arrays += [(f.name, getattr(self.provenance, f.name)) for f in _fields(Provenance)]
        parts, spec, offset = [], [], 0
        for key, array in arrays:
            array = np.ascontiguousarray(array)
            spec.append((key, array.dtype.str, array.shape, offset))
            parts += [array.reshape(-1).view(np.uint8), np.zeros(-array.nbytes % 8, np.uint8)]
            offset += array.nbytes + len(parts[-1])
        return {"bytes": np.concatenate(parts), "spec": tuple(spec)}

    @classmethod
    def from_element(cls, element: dict[str, Any]) -> PackedRows:
        """Inverse of :meth:`to_element`: views of the buffer, no copy.

        Example:
          >>> plan = PackedRows(*[np.arange(3)] * 11)
          >>> PackedRows.from_element(plan.to_element()).read_marks.tolist()
          [0, 1, 2]
        """
        # A plain ndarray view: slices of Grain's shared-memory array subclass run Python
        # hooks (several microseconds a batch).
        data = np.asarray(element["bytes"])
        arrays = {
            key: data[offset : offset + np.dtype(dtype).itemsize * int(np.prod(shape))]
            .view(dtype)
            .reshape(shape)
            for key, dtype, shape, offset in element["spec"]
        }
        provenance = None
        if "source" in arrays:
            provenance = Provenance(**{f.name: arrays.pop(f.name) for f in _fields(Provenance)})
        for key in LAYOUT_FIELDS:  # a compact plan has none
            arrays.setdefault(key, None)
        return cls(**arrays, provenance=provenance)


def _fields(cls: type) -> tuple[dataclasses.Field, ...]:
    return tuple(f for f in dataclasses.fields(cls) if f.name != "provenance")


LAYOUT_FIELDS = ("start", "count", "segment", "row_piece", "padded")
_BITS = np.array([128, 64, 32, 16, 8, 4, 2, 1], dtype=np.uint8)  # np.packbits order


def segment_bits(row: np.ndarray, offset: np.ndarray, *, num_rows: int, block: int) -> np.ndarray:
    """Bit-packed segment starts: uint8 ``(num_rows, ceil(block / 8))`` with bit ``offset``
    of row ``row`` set for each pair (``np.packbits`` order; ``offset < block``).

    Example:
      >>> segment_bits(np.array([0, 0, 1]), np.array([0, 9, 0]), num_rows=2, block=10).tolist()
      [[128, 64], [128, 0]]
    """
    width = -(-block // 8)
    bits = np.zeros(num_rows * width, dtype=np.uint8)
    position = row * (8 * width) + offset
    byte, value = position >> 3, _BITS[position & 7]
    bits[byte] = value  # a byte rarely holds two starts (a document shorter than 8 tokens)
    missing = (bits[byte] & value) == 0  # such bytes kept one value: OR in the others
    np.bitwise_or.at(bits, byte[missing], value[missing])
    return bits.reshape(num_rows, width)


def pack_rows(
    parts: Sequence[Part],
    *,
    num_rows: int,
    block: int,
    boundary: bool,
    provenance: bool = False,
    compact: bool = False,
) -> PackedRows:
    """The layout and read table of ``num_rows`` rows (index math only, no tokens).

    Args:
      parts: where the rows come from. Rows not covered by any part are padding rows.
      num_rows: rows in the batch.
      block: model sequence length (rows hold ``block + 1`` tokens).
      boundary: whether a boundary id exists (spans with the ``boundary`` flag need one).
      provenance: also record where every row and segment comes from.
      compact: plan the compact layout: ``segment_starts`` instead of the layout pieces
        (about 40% less work).

    Example:
      >>> from grainpack.index.stream import row_spans, stream_plan
      >>> class Stream:
      ...     num_tokens, shard_starts = 5, np.array([0, 5])
      ...     document_offsets = np.array([0, 3, 5]).take
      >>> spans = row_spans(stream_plan(np.array([3, 2]), None, boundary=True), [0], block=4)
      >>> packed = pack_rows([Part(0, 0, Stream(), spans, np.array([0]))], num_rows=1,
      ...                    block=4, boundary=True)
      >>> [getattr(packed, k).tolist() for k in ("read_source", "read_start", "read_stop")]
      [[0, 0], [0, 3], [4, 4]]
      >>> packed.read_marks.tolist()
      [3]
    """
    width = block + 1
    filled = np.zeros(num_rows, dtype=np.int64)
    at, source, first, last, ranks, marks, loose = [], [], [], [], [], [], []
    for part in parts:
        spans = part.spans
        filled[part.destination] = spans.filled
        here = part.destination[spans.row] * width + spans.offset
        stream = part.stream.document_offsets(spans.document) + spans.start
        stop = stream + spans.length
        fold = spans.boundary & (stop < part.stream.num_tokens)  # the stream goes on
        at.append(here)
        source.append(np.full(len(here), part.source_index))
        first.append(stream)
        last.append(stop + fold)
        if provenance or not compact:  # segment numbers: the layout's and provenance's
            ranks.append(np.arange(1, len(here) + 1) - np.searchsorted(spans.row, spans.row))
        end = here + spans.length
        marks.append(end[spans.boundary])
        loose.append(end[spans.boundary & ~fold])
    empty = np.zeros(0, dtype=np.int64)
    at, source, first, last, marks, loose = (
        np.concatenate(x or [empty]) for x in (at, source, first, last, marks, loose)
    )
    if len(marks) and not boundary:
        raise ValueError("spans ask for boundary tokens but boundary_id is None")
    short = np.flatnonzero(filled < width)  # rare: padding at the end of an epoch
    pad_at = short * width + filled[short]
    n_loose, n_pads = len(loose), len(short)
    flat = np.concatenate([at, loose, pad_at])  # where each piece starts in the tokens
    order = np.argsort(flat, kind="stable")
    placed = flat[order]
    row = placed // width
    layout: dict[str, Any] = dict.fromkeys(LAYOUT_FIELDS)
    if compact:
        offset = placed - row * width
        # a span's start, unless on a row's last token (a target only, no input)
        starts = (order < len(at)) & (offset < block)
        bits = segment_bits(row[starts], offset[starts], num_rows=num_rows, block=block)
    else:
        layout, bits = _layout(at, pad_at, order, n_loose, ranks, filled, block), None
    # Read table: spans, loose boundary tokens and padding runs, in token order.
    constant = np.full(n_loose + n_pads, CONSTANT)
    lo = np.concatenate([first, np.full(n_loose, width), np.zeros(n_pads, np.int64)])
    hi = np.concatenate([last, np.full(n_loose, width + 1), width - filled[short]])
    read_source, read_shard, read_start, read_stop = _read_table(
        np.concatenate([source, constant])[order],
        lo[order],
        hi[order],
        row,
        {part.source_index: part.stream.shard_starts for part in parts},
    )
    return PackedRows(
        filled=filled,
        **layout,
        read_source=read_source,
        read_shard=read_shard,
        read_start=read_start,
        read_stop=read_stop,
        read_marks=np.sort(marks),
        provenance=_provenance(parts, ranks, num_rows, width) if provenance else None,
        segment_starts=bits,
    )


def _layout(
    at: np.ndarray,
    pad_at: np.ndarray,
    order: np.ndarray,
    n_loose: int,
    ranks: Sequence[np.ndarray],
    filled: np.ndarray,
    block: int,
) -> dict[str, np.ndarray]:
    """The layout pieces (spans and padding runs; a boundary token belongs to its span's
    segment) of :class:`PackedRows`, given the pieces' token ``order``."""
    n_spans, num_rows = len(at), len(filled)
    layout = order[(order < n_spans) | (order >= n_spans + n_loose)]
    position = np.concatenate([at, pad_at])[layout - n_loose * (layout >= n_spans)]
    row, offset = np.divmod(position, block + 1)
    start = (row * block + np.minimum(offset, block)).astype(np.int32)  # the inputs' grid
    rank = np.concatenate([*ranks, [0]]) if ranks else np.zeros(1, dtype=np.int64)
    return {
        "start": start,
        "count": np.diff(start, append=np.int32(num_rows * block)).astype(np.intp),
        "segment": rank[np.minimum(layout, n_spans)].astype(np.int32),
        "row_piece": np.searchsorted(start, np.arange(num_rows + 1) * block),
        "padded": np.flatnonzero(filled <= block),  # rows whose last target is padding
    }


def _read_table(
    source: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    row: np.ndarray,
    shard_starts: dict[int, np.ndarray],
) -> tuple[np.ndarray, ...]:
    """Pieces ``(source, lo, hi)`` in token order, merged where consecutive in one row and in
    one source's stream (a window is one piece), then cut at shard ends: returns
    ``(source, shard, start, stop)`` with shard-local offsets."""
    if len(source) > 1:
        joined = (source[1:] == source[:-1]) & (source[1:] != CONSTANT)
        joined &= (lo[1:] == hi[:-1]) & (row[1:] == row[:-1])
        if joined.any():
            heads = np.flatnonzero(np.concatenate([[True], ~joined]))
            source, lo, hi = source[heads], lo[heads], hi[np.append(heads[1:], len(hi)) - 1]
    # One axis for every source's stream, a gap after each so that no piece reaches the next
    # source; constants (source -1, the last entry) get one endless shard of their own.
    size = max(shard_starts, default=-1) + 2
    base, shard0, top = (np.zeros(size, dtype=np.int64) for _ in range(3))
    begins, ends, axis, shards = [], [], 0, 0
    for j, starts in sorted(shard_starts.items()):
        base[j], shard0[j], top[j] = axis, shards, shards + len(starts) - 2
        begins.append(starts[:-1])
        ends.append(starts[1:])
        axis, shards = axis + int(starts[-1]) + 1, shards + len(starts) - 1
    base[-1] = axis
    shard0[-1] = top[-1] = shards
    begin = np.concatenate([*begins, [0]]).astype(np.int64)
    end = np.concatenate([*ends, [np.iinfo(np.int64).max]]).astype(np.int64)
    grid = begin + np.repeat(base[[*sorted(shard_starts), -1]], [*map(len, begins), 1])
    here = base[source]
    first = np.searchsorted(grid, lo + here, side="right") - 1
    if (hi > end[first]).any():  # rare: pieces that cross a shard end are cut there
        last = np.searchsorted(grid, np.maximum(hi - 1, lo) + here, side="right") - 1
        np.minimum(last, top[source], out=last)
        np.minimum(first, last, out=first)  # empty pieces at the very end of a stream
        cuts = last - first + 1  # shards each piece touches
        piece = np.repeat(np.arange(len(lo)), cuts)
        first = first[piece] + np.arange(len(piece)) - np.repeat(np.cumsum(cuts) - cuts, cuts)
        source, lo, hi = source[piece], lo[piece], hi[piece]
    begin, end = begin[first], end[first]
    lo = np.maximum(lo, begin) - begin
    hi = np.minimum(hi, end) - begin
    first -= shard0[source]
    return source.astype(np.int32), first.astype(np.int32), lo, hi


def _provenance(
    parts: Sequence[Part], ranks: Sequence[np.ndarray], num_rows: int, width: int
) -> Provenance:
    """The :class:`Provenance` of the rows; segment ``k`` of a row is the span of rank
    ``k + 1`` in ``ranks``."""
    source = np.full(num_rows, -1, dtype=np.int32)
    epoch = np.full(num_rows, -1, dtype=np.int64)
    slot, document, offset = [], [], []
    for part, rank in zip(parts, ranks):
        source[part.destination] = part.source_index
        epoch[part.destination] = part.epoch
        spans = part.spans
        slot.append(part.destination[spans.row] * width + rank - 1)
        document.append(spans.document.astype(np.int64, copy=False))
        offset.append(spans.start.astype(np.int64, copy=False))
    empty = np.zeros(0, dtype=np.int64)
    slot, document, offset = (np.concatenate([*x, empty]) for x in (slot, document, offset))
    order = np.argsort(slot, kind="stable")
    return Provenance(source, epoch, slot[order], document[order], offset[order])
