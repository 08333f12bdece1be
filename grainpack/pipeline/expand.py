"""Expansion: a :class:`~grainpack.index.layout.PackedRows` and its tokens -> model arrays.

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
import functools

import numpy as np

from grainpack.index.layout import PackedRows

__all__ = ["expand_rows"]


def expand_rows(packed: PackedRows, tokens: np.ndarray, *, first: int = 0) -> dict[str, np.ndarray]:
    """The model arrays (module docstring) of rows ``[first, first + len(tokens))`` of rows
    packed by :func:`pack_rows`, given their ``tokens`` (``RowReader.read``); fresh arrays.

    Example:
      >>> tokens = np.array([[5, 6, 7, 8], [9, 0, 0, 0]], dtype=np.uint16)
      >>> reads = dict.fromkeys(("read_source", "read_shard", "read_start", "read_stop"))
      >>> packed = PackedRows(filled=np.array([4, 1]), start=np.array([0, 2, 3, 4]),
      ...     count=np.array([2, 1, 1, 2]), segment=np.array([1, 2, 1, 0]),
      ...     row_piece=np.array([0, 2, 4]), padded=np.array([1]), read_marks=None, **reads)
      >>> out = expand_rows(packed, tokens)
      >>> out["segment_ids"].tolist(), out["positions"].tolist(), out["loss_mask"].tolist()
      ([[1, 1, 2], [1, 0, 0]], [[0, 1, 0], [0, 0, 0]], [[1, 1, 1], [0, 0, 0]])
      >>> expand_rows(packed, tokens[1:], first=1)["segment_ids"].tolist()
      [[1, 0, 0]]
    """
    n, block = tokens.shape[0], tokens.shape[1] - 1
    lo, hi = int(packed.row_piece[first]), int(packed.row_piece[first + n])
    count = packed.count[lo:hi]
    segment_ids = packed.segment[lo:hi].repeat(count).reshape(n, block)
    positions = (packed.start[lo:hi] - first * block).repeat(count)
    np.subtract(_arange(n * block), positions, out=positions)
    positions = positions.reshape(n, block)
    loss_mask = np.empty((n, block), dtype=np.int32)
    loss_mask.fill(1)
    padded = packed.padded
    for r in padded[bisect.bisect_left(padded, first) : bisect.bisect_left(padded, first + n)]:
        f = int(packed.filled[r])  # rare: a row with padding
        positions[r - first, f:] = 0
        loss_mask[r - first, max(f - 1, 0) :] = 0
    batch = {
        "inputs": tokens[:, :-1].astype(np.int32),
        "targets": tokens[:, 1:].astype(np.int32),
        "segment_ids": segment_ids,
        "positions": positions,
        "loss_mask": loss_mask,
    }
    if packed.provenance is not None:
        batch.update(packed.provenance.rows(first, first + n))
    return batch


@functools.lru_cache(maxsize=8)
def _arange(n: int) -> np.ndarray:
    out = np.arange(n, dtype=np.int32)
    out.flags.writeable = False
    return out
