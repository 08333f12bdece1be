"""Row assembly: spans of tokens -> the model's arrays, in three steps.

1. :func:`pack_rows` (index math, no tokens): the row layout and the *read table*, the
   pieces that tile the rows' ``block + 1`` tokens in order (stream ranges of a source, a
   boundary token, a padding run). It is small: a worker process sends it, not tokens.
2. :meth:`RowReader.read` (the only step that reads tokens): one ``bytes.join`` of memmap
   views gathers every piece in a C loop, several times faster than a numpy copy per span.
3. :func:`expand_rows`: the model arrays of a range of rows.

A batch of ``n`` rows of ``block + 1`` tokens becomes::

    inputs       int32 (n, block)  row[:-1]
    targets      int32 (n, block)  row[1:]   (next-token targets)
    segment_ids  int32 (n, block)  1, 2, ... per document segment of the row; 0 on padding
    positions    int32 (n, block)  position inside the segment (restarts at 0 in each row)
    loss_mask    int32 (n, block)  1 where the target is a real token, 0 where it is padding

Masks come from the plan's structure (which positions were filled), never from comparing
token values with ``pad_id``. A boundary token belongs to the segment of the document it
follows. MaxText's keys map as ``inputs_segmentation = segment_ids``,
``inputs_position = positions``, ``targets_segmentation = segment_ids * loss_mask`` and
``targets_position = positions``.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import operator
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from grainpack.plan import Spans


class StreamReader(Protocol):
    """What row assembly needs from a source (``TokenShardSource`` is one): document offsets
    and shard starts in the token stream, the token dtype and each shard's tokens as a
    buffer."""

    @property
    def offsets(self) -> np.ndarray: ...

    @property
    def shard_starts(self) -> np.ndarray: ...

    @property
    def dtype(self) -> np.dtype: ...

    def shard_view(self, shard: int) -> memoryview: ...


@dataclasses.dataclass(frozen=True)
class Part:
    """Rows of one (source, epoch) in a batch: requested row ``i`` of ``spans`` goes to batch
    row ``destination[i]``; ``reader`` gives the document offsets."""

    source_index: int
    epoch: int
    reader: StreamReader
    spans: Spans
    destination: np.ndarray


CONSTANT = -1  # read_source of padding runs and loose boundary tokens (constants buffer)


def pack_rows(
    parts: Sequence[Part],
    *,
    num_rows: int,
    block: int,
    boundary: bool,
    provenance: bool = False,
) -> dict[str, np.ndarray]:
    """The layout and read table of ``num_rows`` rows (index math only, no tokens).

    Keys:

    * ``filled``: real tokens per row.
    * the row layout, pieces tiling the flattened ``(num_rows, block)`` inputs: ``start``
      (sorted) and ``segment`` (segment id of each piece, 0 for padding), int32, and
      ``count``, intp (what ``np.repeat`` takes).
    * the read table, pieces tiling the flattened ``(num_rows, block + 1)`` tokens in order:
      ``read_source`` (a part's ``source_index``, or ``CONSTANT``), ``read_start`` and
      ``read_stop`` (a stream range of that source; for ``CONSTANT`` a range of
      ``[pad_id] * (block + 1) + [boundary_id]``), and ``read_marks``, the sorted flat
      positions of boundary tokens. A span followed by a boundary token reads one stream
      token more, overwritten by the boundary id, so most boundaries cost no piece of their
      own.
    * with ``provenance``, the source and epoch of every row and the document and offset of
      every segment.

    Args:
      parts: where the rows come from. Rows not covered by any part are padding rows.
      num_rows: rows in the batch.
      block: model sequence length (rows hold ``block + 1`` tokens).
      boundary: whether a boundary id exists (spans with the ``boundary`` flag need one).
      provenance: also return where every segment comes from.

    Example:
      >>> from grainpack.plan import row_spans, stream_plan
      >>> class Reader: offsets, shard_starts = np.array([0, 3, 5]), np.array([0, 5])
      >>> spans = row_spans(stream_plan(np.array([3, 2]), None, boundary=True), [0], block=4)
      >>> packed = pack_rows([Part(0, 0, Reader(), spans, np.array([0]))], num_rows=1,
      ...                    block=4, boundary=True)
      >>> [packed[k].tolist() for k in ("read_source", "read_start", "read_stop", "read_marks")]
      [[0, 0], [0, 3], [4, 4], [3]]
    """
    width = block + 1
    filled = np.zeros(num_rows, dtype=np.int64)
    at, source, first, last, ranks, marks, loose = [], [], [], [], [], [], []
    for part in parts:
        spans = part.spans
        filled[part.destination] = spans.filled
        here = part.destination[spans.row] * width + spans.offset
        stream = part.reader.offsets[spans.document] + spans.start
        stop = stream + spans.length
        fold = spans.boundary & (stop < part.reader.offsets[-1])  # the stream goes on
        at.append(here)
        source.append(np.full(len(here), part.source_index))
        first.append(stream)
        last.append(stop + fold)
        ranks.append(np.arange(1, len(here) + 1) - np.searchsorted(spans.row, spans.row))
        marks.append((here + spans.length)[spans.boundary])
        loose.append((here + spans.length)[spans.boundary & ~fold])
    empty = np.zeros(0, dtype=np.int64)
    at, source, first, last, marks, loose = (
        np.concatenate(x or [empty]) for x in (at, source, first, last, marks, loose)
    )
    if len(marks) and not boundary:
        raise ValueError("spans ask for boundary tokens but boundary_id is None")
    short = np.flatnonzero(filled < width)  # rare: padding at the end of an epoch
    pad_at = short * width + filled[short]
    n_spans, n_loose, n_pads = len(at), len(loose), len(short)
    flat = np.concatenate([at, loose, pad_at])  # where each piece starts in the tokens
    order = np.argsort(flat, kind="stable")
    packed = {"filled": filled}
    # Layout: spans and padding (a boundary token belongs to its span's segment).
    layout = order[(order < n_spans) | (order >= n_spans + n_loose)]
    position = np.concatenate([at, pad_at])[layout - n_loose * (layout >= n_spans)]
    row, offset = np.divmod(position, width)
    start = (row * block + np.minimum(offset, block)).astype(np.int32)  # the inputs' grid
    packed["start"] = start
    packed["count"] = np.diff(start, append=np.int32(num_rows * block)).astype(np.intp)
    rank = np.concatenate([*ranks, [0]]) if ranks else np.zeros(1, dtype=np.int64)
    packed["segment"] = rank[np.minimum(layout, n_spans)].astype(np.int32)
    # Read table: spans, loose boundary tokens and padding runs, in token order.
    constant = np.full(n_loose + n_pads, CONSTANT)
    lo = np.concatenate([first, np.full(n_loose, width), np.zeros(n_pads, np.int64)])
    hi = np.concatenate([last, np.full(n_loose, width + 1), width - filled[short]])
    table = _read_table(
        np.concatenate([source, constant])[order],
        lo[order],
        hi[order],
        flat[order] // width,
        {part.source_index: part.reader.shard_starts for part in parts},
    )
    packed.update(zip(_READS, table))
    packed["row_piece"] = np.searchsorted(start, np.arange(num_rows + 1) * block)
    packed["padded"] = np.flatnonzero(filled <= block)  # rows whose last target is padding
    packed["read_marks"] = np.sort(marks)
    if provenance:
        packed.update(_provenance(parts, ranks, num_rows, width))
    return packed


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
    first, last = np.zeros_like(lo), np.zeros_like(lo)
    for j, starts in shard_starts.items():
        mine = source == j
        top = len(starts) - 2
        first[mine] = np.searchsorted(starts, lo[mine], side="right") - 1
        end = np.maximum(hi[mine] - 1, lo[mine])
        last[mine] = np.minimum(np.searchsorted(starts, end, side="right") - 1, top)
    np.minimum(first, last, out=first)  # empty pieces at the very end of a stream
    cuts = last - first + 1  # shards each piece touches (1 unless it crosses a shard end)
    if (cuts > 1).any():
        piece = np.repeat(np.arange(len(lo)), cuts)
        first = first[piece] + np.arange(len(piece)) - np.repeat(np.cumsum(cuts) - cuts, cuts)
        source, lo, hi = source[piece], lo[piece], hi[piece]
    for j, starts in shard_starts.items():
        mine = source == j
        begin, end = starts[first[mine]], starts[first[mine] + 1]
        lo[mine] = np.maximum(lo[mine], begin) - begin
        hi[mine] = np.minimum(hi[mine], end) - begin
    return source.astype(np.int32), first.astype(np.int32), lo, hi


def token_dtype(readers: Sequence[StreamReader], ids: Sequence[int]) -> np.dtype:
    """The dtype rows are gathered in: the readers' common dtype if the ``ids`` (pad and
    boundary) fit it, else int32."""
    dtypes = {np.dtype(r.dtype) for r in readers}
    if len(dtypes) == 1:
        dtype = dtypes.pop()
        info = np.iinfo(dtype)
        if all(info.min <= i <= info.max for i in ids):
            return dtype
    return np.dtype(np.int32)


class RowReader:
    """Gathers the tokens of rows packed by :func:`pack_rows`, a range of rows at a time.

    The constructor turns the read table into buffer views (no tokens are touched);
    :meth:`read` joins the views of a few rows in one C loop, so the rows are still in the
    CPU cache when :func:`expand_rows` converts them.

    Args:
      packed: the output of :func:`pack_rows`.
      readers: ``readers[j]`` reads the source whose ``source_index`` is ``j``.
      block: as in :func:`pack_rows`.
      pad_id: token of padding runs.
      boundary_id: token written at ``read_marks``.

    Example:
      >>> import tempfile, grainpack as gp
      >>> src = gp.write_corpus(tempfile.mkdtemp(), [[1, 2, 3], [4, 5]])
      >>> packed = {"filled": np.array([5]), "read_source": np.array([0, -1]),
      ...           "read_shard": np.array([0, 0]), "read_start": np.array([1, 0]),
      ...           "read_stop": np.array([5, 1]), "read_marks": np.array([2])}
      >>> RowReader(packed, [src], block=4, pad_id=0, boundary_id=9).read(0, 1).tolist()
      [[2, 3, 9, 5, 0]]
    """

    def __init__(
        self,
        packed: dict[str, np.ndarray],
        readers: Sequence[StreamReader],
        *,
        block: int,
        pad_id: int,
        boundary_id: int | None,
    ) -> None:
        self.width = block + 1
        source, shard = packed["read_source"], packed["read_shard"]
        start, stop = packed["read_start"], packed["read_stop"]
        used = np.flatnonzero(np.bincount(source + 1, minlength=len(readers) + 1)[1:]).tolist()
        ids = [pad_id] if boundary_id is None else [pad_id, boundary_id]
        self.dtype = token_dtype([readers[j] for j in used], ids)
        # buffer g: shard g - base[j] of source j; the last one holds the constants
        base = np.cumsum([0, *(len(r.shard_starts) - 1 for r in readers)])
        index = (base[source] + shard).tolist()
        buffers: list[Any] = [None] * (int(base[-1]) + 1)
        for g in set(index) - {len(buffers) - 1}:
            j = int(np.searchsorted(base, g, side="right")) - 1
            view = readers[j].shard_view(g - int(base[j]))
            stored = np.dtype(view.format)  # little-endian file bytes, whatever the host
            # mixed token dtypes (or a big-endian host): convert piece by piece
            buffers[g] = view if stored == self.dtype else _Converted(view, stored, self.dtype)
        constants = np.full(self.width + 1, pad_id, dtype=self.dtype)
        constants[-1] = pad_id if boundary_id is None else boundary_id
        buffers[-1] = memoryview(constants)
        # Views are made per read: thousands of live memoryviews would wake the cyclic GC.
        self.buffers, self.index = buffers, index
        self.start, self.stop = start.tolist(), stop.tolist()
        self.ends = np.cumsum(stop - start).tolist()  # token position after each piece
        self.marks, self.boundary_id = packed["read_marks"], boundary_id
        rows = np.arange(len(packed["filled"]) + 1) * self.width
        self.row_marks = np.searchsorted(self.marks, rows).tolist()

    def read(self, first: int, stop: int) -> np.ndarray:
        """The tokens ``(stop - first, block + 1)`` of rows ``[first, stop)`` (a new array)."""
        a, b = first * self.width, stop * self.width
        p0, p1 = bisect.bisect_right(self.ends, a), bisect.bisect_right(self.ends, b)
        ranges = map(slice, self.start[p0:p1], self.stop[p0:p1])
        views = map(operator.getitem, map(self.buffers.__getitem__, self.index[p0:p1]), ranges)
        tokens = np.frombuffer(bytearray().join(views), self.dtype)
        m0, m1 = self.row_marks[first], self.row_marks[stop]
        if m1 > m0:
            tokens[self.marks[m0:m1] - a] = self.boundary_id
        return tokens.reshape(stop - first, self.width)


@dataclasses.dataclass(frozen=True)
class _Converted:
    """A shard buffer whose slices are converted to another dtype (copies)."""

    view: memoryview
    source: np.dtype
    target: np.dtype

    def __getitem__(self, piece: slice) -> np.ndarray:
        return np.frombuffer(self.view[piece], self.source).astype(self.target)


def expand_rows(
    packed: dict[str, np.ndarray], tokens: np.ndarray, *, first: int = 0
) -> dict[str, np.ndarray]:
    """The model arrays (module docstring) of rows ``[first, first + len(tokens))`` of rows
    packed by :func:`pack_rows`, given their ``tokens`` (``RowReader.read``); fresh arrays.

    Example:
      >>> tokens = np.array([[5, 6, 7, 8], [9, 0, 0, 0]], dtype=np.uint16)
      >>> packed = {"filled": np.array([4, 1]), "start": np.array([0, 2, 3, 4]),
      ...           "count": np.array([2, 1, 1, 2]), "segment": np.array([1, 2, 1, 0]),
      ...           "row_piece": np.array([0, 2, 4]), "padded": np.array([1])}
      >>> out = expand_rows(packed, tokens)
      >>> out["segment_ids"].tolist(), out["positions"].tolist(), out["loss_mask"].tolist()
      ([[1, 1, 2], [1, 0, 0]], [[0, 1, 0], [0, 0, 0]], [[1, 1, 1], [0, 0, 0]])
      >>> expand_rows(packed, tokens[1:], first=1)["segment_ids"].tolist()
      [[1, 0, 0]]
    """
    n, block = tokens.shape[0], tokens.shape[1] - 1
    lo, hi = int(packed["row_piece"][first]), int(packed["row_piece"][first + n])
    count = packed["count"][lo:hi]
    segment_ids = packed["segment"][lo:hi].repeat(count).reshape(n, block)
    positions = (packed["start"][lo:hi] - first * block).repeat(count)
    np.subtract(_arange(n * block), positions, out=positions)
    positions = positions.reshape(n, block)
    loss_mask = np.empty((n, block), dtype=np.int32)
    loss_mask.fill(1)
    padded = packed["padded"]
    for r in padded[bisect.bisect_left(padded, first) : bisect.bisect_left(padded, first + n)]:
        f = int(packed["filled"][r])  # rare: a row with padding
        positions[r - first, f:] = 0
        loss_mask[r - first, max(f - 1, 0) :] = 0
    batch = {
        "inputs": tokens[:, :-1].astype(np.int32),
        "targets": tokens[:, 1:].astype(np.int32),
        "segment_ids": segment_ids,
        "positions": positions,
        "loss_mask": loss_mask,
    }
    rows = slice(first, first + n)
    if len(packed) > len(_PACKED):  # provenance: copies, so a batch holds no plan memory
        batch.update((k, v[rows].copy()) for k, v in packed.items() if k not in _PACKED)
    return batch


_READS = ("read_source", "read_shard", "read_start", "read_stop")
_PACKED = ("filled", "padded", "start", "count", "segment", "row_piece", "read_marks", *_READS)


def _provenance(
    parts: Sequence[Part], ranks: Sequence[np.ndarray], num_rows: int, width: int
) -> dict[str, np.ndarray]:
    """Per row: source and epoch; per segment ``k`` (segment id ``k + 1``, the span's rank in
    ``ranks``): document id and the offset of the segment's first token inside the document
    (-1 where absent). Tables are ``width`` (``block + 1``, the most segments a row can
    hold) wide, so every batch has the same shapes."""
    source = np.full(num_rows, -1, dtype=np.int32)
    epoch = np.full(num_rows, -1, dtype=np.int64)
    document = np.full((num_rows, width), -1, dtype=np.int64)
    offset = np.full((num_rows, width), -1, dtype=np.int64)
    for part, rank in zip(parts, ranks):
        source[part.destination] = part.source_index
        epoch[part.destination] = part.epoch
        spans = part.spans
        rows = part.destination[spans.row]
        document[rows, rank - 1] = spans.document
        offset[rows, rank - 1] = spans.start
    return {
        "source": source,
        "epoch": epoch,
        "segment_document": document,
        "segment_offset": offset,
    }


@functools.lru_cache(maxsize=8)
def _arange(n: int) -> np.ndarray:
    out = np.arange(n, dtype=np.int32)
    out.flags.writeable = False
    return out
