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
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from grainpack.plan import Spans


class StreamReader(Protocol):
    """What row assembly needs from a source: document offsets and a stream read."""

    @property
    def offsets(self) -> np.ndarray: ...

    def read_into(self, out: np.ndarray, start: int) -> None: ...


@dataclasses.dataclass(frozen=True)
class Part:
    """Rows of one (source, epoch) in a batch: requested row ``i`` of ``spans`` goes to batch
    row ``destination[i]``."""

    source_index: int
    epoch: int
    reader: StreamReader
    spans: Spans
    destination: np.ndarray


def assemble_rows(
    parts: Sequence[Part],
    *,
    num_rows: int,
    block: int,
    pad_id: int,
    boundary_id: int | None,
    provenance: bool = False,
) -> dict[str, np.ndarray]:
    """Reads the spans of ``num_rows`` rows and builds the model arrays.

    Args:
      parts: where the rows come from. Rows not covered by any part are padding rows.
      num_rows: rows in the batch.
      block: model sequence length (rows hold ``block + 1`` tokens).
      pad_id: token written where a row has no data.
      boundary_id: token written after spans whose ``boundary`` flag is set.
      provenance: also return where every segment comes from (see :func:`provenance`).

    Returns:
      The arrays described in the module docstring.
    """
    width = block + 1
    tokens = np.full((num_rows, width), pad_id, dtype=np.int32)
    marks = np.zeros((num_rows, width), dtype=np.int32)
    filled = np.zeros(num_rows, dtype=np.int64)
    for part in parts:
        spans, destination = part.spans, part.destination
        rows = destination[spans.row]
        starts = part.reader.offsets[spans.document] + spans.start
        read_into = part.reader.read_into
        for r, at, start, n in zip(
            rows.tolist(), spans.offset.tolist(), starts.tolist(), spans.length.tolist()
        ):
            if n:
                read_into(tokens[r, at : at + n], start)
        if spans.boundary.any():
            if boundary_id is None:
                raise ValueError("spans ask for boundary tokens but boundary_id is None")
            b = spans.boundary
            tokens[rows[b], (spans.offset + spans.length)[b]] = boundary_id
        marks[rows, spans.offset] = 1
        filled[destination] = spans.filled
    index = np.arange(width, dtype=np.int32)
    real = index < filled[:, None]
    segment_ids = np.cumsum(marks, axis=1, dtype=np.int32)
    segment_ids *= real
    segment_start = np.maximum.accumulate(np.where(marks == 1, index, 0), axis=1)
    positions = (index - segment_start) * real
    batch = {
        "inputs": np.ascontiguousarray(tokens[:, :-1]),
        "targets": np.ascontiguousarray(tokens[:, 1:]),
        "segment_ids": np.ascontiguousarray(segment_ids[:, :-1]),
        "positions": np.ascontiguousarray(positions[:, :-1], dtype=np.int32),
        "loss_mask": np.ascontiguousarray(real[:, 1:], dtype=np.int32),
    }
    if provenance:
        batch.update(_provenance(parts, num_rows))
    return batch


def _provenance(parts: Sequence[Part], num_rows: int) -> dict[str, np.ndarray]:
    """Per row: source and epoch; per segment ``k`` (segment id ``k + 1``): document id and
    the offset of the segment's first token inside the document (-1 where absent)."""
    source = np.full(num_rows, -1, dtype=np.int32)
    epoch = np.full(num_rows, -1, dtype=np.int64)
    per_row = [np.bincount(p.spans.row, minlength=len(p.destination)) for p in parts]
    width = max([int(c.max(initial=0)) for c in per_row], default=0)
    document = np.full((num_rows, width), -1, dtype=np.int64)
    offset = np.full((num_rows, width), -1, dtype=np.int64)
    for part, counts in zip(parts, per_row):
        source[part.destination] = part.source_index
        epoch[part.destination] = part.epoch
        spans = part.spans
        first = np.cumsum(counts) - counts
        k = np.arange(len(spans.row)) - first[spans.row]
        rows = part.destination[spans.row]
        document[rows, k] = spans.document
        offset[rows, k] = spans.start
    return {
        "source": source,
        "epoch": epoch,
        "segment_document": document,
        "segment_offset": offset,
    }
