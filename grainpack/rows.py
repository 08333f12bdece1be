"""Row assembly: spans of tokens -> the model's arrays (the only layer that reads tokens).

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

import dataclasses
import functools
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from grainpack.plan import Spans


class StreamReader(Protocol):
    """What row assembly needs from a source (``TokenShardSource`` is one): document offsets,
    the token dtype and a many-span stream read."""

    @property
    def offsets(self) -> np.ndarray: ...

    @property
    def dtype(self) -> np.dtype: ...

    def read_spans(
        self, out: np.ndarray, at: np.ndarray, starts: np.ndarray, lengths: np.ndarray
    ) -> None: ...


@dataclasses.dataclass(frozen=True)
class Part:
    """Rows of one (source, epoch) in a batch: requested row ``i`` of ``spans`` goes to batch
    row ``destination[i]``."""

    source_index: int
    epoch: int
    reader: StreamReader
    spans: Spans
    destination: np.ndarray


def pack_rows(
    parts: Sequence[Part],
    *,
    num_rows: int,
    block: int,
    pad_id: int,
    boundary_id: int | None,
    provenance: bool = False,
) -> dict[str, np.ndarray]:
    """Reads the rows' tokens; the compact form :func:`expand_rows` turns into model arrays.

    About two bytes per token for uint16 corpora (what a worker process should send):
    ``tokens`` ``(num_rows, block + 1)`` (uint16 when every source and the pad and boundary
    ids fit, else int32), ``filled`` (real tokens per row), and the row layout as pieces
    tiling the flattened ``(num_rows, block)`` inputs: ``start`` (sorted), ``count`` and
    ``segment`` (the segment id of each piece, 0 for padding), all int32. Provenance keys
    (if asked) pass through unchanged.

    Args:
      parts: where the rows come from. Rows not covered by any part are padding rows.
      num_rows: rows in the batch.
      block: model sequence length (rows hold ``block + 1`` tokens).
      pad_id: token written where a row has no data.
      boundary_id: token written after spans whose ``boundary`` flag is set.
      provenance: also return where every segment comes from (source and epoch per row;
        document and offset per segment).
    """
    width = block + 1
    ids = [pad_id] if boundary_id is None else [pad_id, boundary_id]
    small = all(p.reader.dtype == np.uint16 for p in parts) and max(ids) < 65536
    tokens = np.empty((num_rows, width), dtype=np.uint16 if small else np.int32)
    flat = tokens.reshape(-1)
    filled = np.zeros(num_rows, dtype=np.int64)
    # per part, per span: flat position in ``tokens``, stream position, segment id (1, 2, ...
    # within its row), reader
    at, stream, ranks, which = [], [], [], []
    for k, part in enumerate(parts):
        spans = part.spans
        filled[part.destination] = spans.filled
        at.append(part.destination[spans.row] * width + spans.offset)
        stream.append(part.reader.offsets[spans.document] + spans.start)
        ranks.append(np.arange(1, len(spans.row) + 1) - np.searchsorted(spans.row, spans.row))
        which.append(np.full(len(spans.row), k))
    length = np.concatenate([p.spans.length for p in parts] or [np.zeros(0, np.int64)])
    boundary = np.concatenate([p.spans.boundary for p in parts] or [np.zeros(0, bool)])
    at, stream, which = (np.concatenate(x or [np.zeros(0, np.int64)]) for x in (at, stream, which))
    _read([p.reader for p in parts], flat, at, stream, length, which)
    if boundary.any():
        if boundary_id is None:
            raise ValueError("spans ask for boundary tokens but boundary_id is None")
        flat[(at + length)[boundary]] = boundary_id
    # Segments tile each row: spans, then one padding piece (segment 0) where a row is short.
    short = np.flatnonzero(filled < width)
    for r, n in zip(short.tolist(), filled[short].tolist()):  # rare: the end of an epoch
        tokens[r, n:] = pad_id
    at = np.concatenate([at, short * width + filled[short]])
    order = np.argsort(at)
    row, offset = np.divmod(at[order], width)
    start = (row * block + np.minimum(offset, block)).astype(np.int32)  # the inputs' grid
    count = np.diff(start, append=np.int32(num_rows * block))
    rank = np.concatenate([*ranks, np.zeros(len(short), dtype=np.int64)])[order]
    packed = {"tokens": tokens, "filled": filled, "start": start, "count": count}
    packed["segment"] = rank.astype(np.int32)
    if provenance:
        packed.update(_provenance(parts, ranks, num_rows, width))
    return packed


def expand_rows(packed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model arrays (module docstring) of rows packed by :func:`pack_rows`; fresh arrays.

    Example:
      >>> tokens = np.array([[5, 6, 7, 8], [9, 0, 0, 0]], dtype=np.uint16)
      >>> packed = {"tokens": tokens, "filled": np.array([4, 1]), "start": np.array([0, 2, 3, 4]),
      ...           "count": np.array([2, 1, 1, 2]), "segment": np.array([1, 2, 1, 0])}
      >>> out = expand_rows(packed)
      >>> out["segment_ids"].tolist(), out["positions"].tolist(), out["loss_mask"].tolist()
      ([[1, 1, 2], [1, 0, 0]], [[0, 1, 0], [0, 0, 0]], [[1, 1, 1], [0, 0, 0]])
    """
    tokens, filled, count = packed["tokens"], packed["filled"], packed["count"]
    num_rows, block = tokens.shape[0], tokens.shape[1] - 1
    segment_ids = packed["segment"].repeat(count).reshape(num_rows, block)
    positions = (_arange(num_rows * block) - packed["start"].repeat(count)).reshape(num_rows, block)
    loss_mask = np.ones((num_rows, block), dtype=np.int32)
    if filled.min(initial=block + 1) <= block:  # rare: rows with padding
        for r in (filled <= block).nonzero()[0].tolist():
            n = int(filled[r])
            positions[r, n:] = 0
            loss_mask[r, max(n - 1, 0) :] = 0
    batch = {
        "inputs": tokens[:, :-1].astype(np.int32),
        "targets": tokens[:, 1:].astype(np.int32),
        "segment_ids": segment_ids,
        "positions": positions,
        "loss_mask": loss_mask,
    }
    batch.update((k, v) for k, v in packed.items() if k not in _PACKED)
    return batch


_PIECES = ("start", "count", "segment")
_PACKED = ("tokens", "filled", *_PIECES)


def split_rows(packed: dict[str, np.ndarray], parts: int) -> list[dict[str, np.ndarray]]:
    """Cuts rows packed by :func:`pack_rows` into ``parts`` equal groups of consecutive rows
    (views); :func:`expand_rows` of a group gives the arrays of its rows.

    Example:
      >>> tokens = np.array([[5, 6, 7], [8, 9, 4]], dtype=np.uint16)
      >>> packed = {"tokens": tokens, "filled": np.array([3, 3]), "start": np.array([0, 1, 2]),
      ...           "count": np.array([1, 1, 2]), "segment": np.array([1, 2, 1])}
      >>> [p["start"].tolist() for p in split_rows(packed, 2)]
      [[0, 1], [0]]
    """
    tokens = packed["tokens"]
    n, block = len(tokens) // parts, tokens.shape[1] - 1
    cuts = np.searchsorted(packed["start"], np.arange(parts + 1) * (n * block)).tolist()
    out = []
    for i in range(parts):
        rows, pieces = slice(i * n, (i + 1) * n), slice(cuts[i], cuts[i + 1])
        part = {k: v[rows] for k, v in packed.items() if k not in _PIECES}
        part.update((k, packed[k][pieces]) for k in _PIECES)
        part["start"] = part["start"] - i * n * block
        out.append(part)
    return out


def _read(
    readers: Sequence[StreamReader],
    flat: np.ndarray,
    at: np.ndarray,
    stream: np.ndarray,
    length: np.ndarray,
    which: np.ndarray,
) -> None:
    """``flat[at[k]:][:length[k]] = stream tokens of readers[which[k]] from stream[k]``; spans
    contiguous in both ``flat`` and the stream (a document running on in the next row, or
    consecutive documents of a window) are copied at once."""
    if len(at) > 1:
        step = length[:-1]
        joined = (at[1:] == at[:-1] + step) & (stream[1:] == stream[:-1] + step)
        joined &= which[1:] == which[:-1]
        if joined.any():
            heads = np.flatnonzero(np.concatenate([[True], ~joined]))
            at, stream, which = at[heads], stream[heads], which[heads]
            length = np.add.reduceat(length, heads)
    for k, reader in enumerate(readers):
        mine = slice(None) if len(readers) == 1 else which == k
        reader.read_spans(flat, at[mine], stream[mine], length[mine])


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
