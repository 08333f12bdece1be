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

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from grainpack.plan import Spans

MODEL_KEYS = ("inputs", "targets", "segment_ids", "positions", "loss_mask")


class StreamReader(Protocol):
    """What row assembly needs from a source: document offsets and a stream read."""

    @property
    def offsets(self) -> np.ndarray: ...

    def read_into(self, out: np.ndarray, start: int) -> None: ...


def assemble_rows(
    parts: Sequence[tuple[StreamReader, Spans, np.ndarray]],
    *,
    num_rows: int,
    block: int,
    pad_id: int,
    boundary_id: int | None,
) -> dict[str, np.ndarray]:
    """Reads the spans of ``num_rows`` rows and builds the model arrays.

    Args:
      parts: ``(source, spans, destination)`` triples; requested row ``i`` of ``spans`` goes
        to batch row ``destination[i]``. Rows not covered by any part are padding rows.
      num_rows: rows in the batch.
      block: model sequence length (rows hold ``block + 1`` tokens).
      pad_id: token written where a row has no data.
      boundary_id: token written after spans whose ``boundary`` flag is set.

    Returns:
      The arrays described in the module docstring.
    """
    width = block + 1
    tokens = np.full((num_rows, width), pad_id, dtype=np.int32)
    marks = np.zeros((num_rows, width), dtype=np.int32)
    filled = np.zeros(num_rows, dtype=np.int64)
    for source, spans, destination in parts:
        rows = destination[spans.row]
        offsets = source.offsets
        starts = offsets[spans.document] + spans.start
        read_into = source.read_into
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
    return {
        "inputs": np.ascontiguousarray(tokens[:, :-1]),
        "targets": np.ascontiguousarray(tokens[:, 1:]),
        "segment_ids": np.ascontiguousarray(segment_ids[:, :-1]),
        "positions": np.ascontiguousarray(positions[:, :-1], dtype=np.int32),
        "loss_mask": np.ascontiguousarray(real[:, 1:], dtype=np.int32),
    }
