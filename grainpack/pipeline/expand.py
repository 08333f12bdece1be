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

The *compact* layout (``PipelineConfig(layout="compact")``) leaves that expansion to the
accelerator (:func:`grainpack.expand`); a batch holds what determines the five arrays::

    tokens          corpus dtype (n, block + 1)      the rows (inputs are row[:-1])
    segment_starts  uint8 (n, ceil(block / 8))       bit i (np.packbits order) set where a
                                                     segment starts at input position i
    filled          int32 (n,)                       real tokens in the row (block + 1 if
                                                     it has no padding)

so that, for input position ``i`` of a row, ``segment_ids = popcount(bits[:i + 1])`` and
``positions = i - (last set bit <= i)`` where ``i < filled`` (0 elsewhere), and
``loss_mask = i + 1 < filled`` (:func:`expand_compact` is the numpy statement of this). A
row has at most ``block`` segment starts in its inputs, so the description never overflows.
"""

from __future__ import annotations

import bisect
import functools

import numpy as np

from grainpack.index.layout import PackedRows

__all__ = ["compact_rows", "expand_compact", "expand_rows", "segment_starts"]


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


def segment_starts(packed: PackedRows, *, block: int) -> np.ndarray:
    """The ``segment_starts`` bits (module docstring) of every row of ``packed``: uint8
    ``(num_rows, ceil(block / 8))``, computed once per plan (vectorized over its pieces).

    Example:
      >>> reads = dict.fromkeys(("read_source", "read_shard", "read_start", "read_stop"))
      >>> packed = PackedRows(filled=np.array([4, 1]), start=np.array([0, 2, 3, 4]),
      ...     count=np.array([2, 1, 1, 2]), segment=np.array([1, 2, 1, 0]),
      ...     row_piece=np.array([0, 2, 4]), padded=np.array([1]), read_marks=None, **reads)
      >>> np.unpackbits(segment_starts(packed, block=3), axis=1, count=3).tolist()
      [[1, 0, 1], [1, 0, 0]]
    """
    width = -(-block // 8)
    bits = np.zeros(packed.num_rows * width, dtype=np.uint8)
    # a segment that starts on a row's last token (its target only) has no input position
    at = packed.start[(packed.segment > 0) & (packed.count > 0)]
    row, offset = np.divmod(at, block)
    np.bitwise_or.at(bits, row * width + (offset >> 3), _BITS[offset & 7])
    return bits.reshape(packed.num_rows, width)


def compact_rows(
    packed: PackedRows, tokens: np.ndarray, *, first: int = 0, starts: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """The compact batch (module docstring) of rows ``[first, first + len(tokens))`` of
    ``packed``, given their ``tokens`` (kept, not copied) and optionally the plan's
    :func:`segment_starts` (computed here otherwise).

    Example:
      >>> tokens = np.array([[5, 6, 7, 8], [9, 0, 0, 0]], dtype=np.uint16)
      >>> reads = dict.fromkeys(("read_source", "read_shard", "read_start", "read_stop"))
      >>> packed = PackedRows(filled=np.array([4, 1]), start=np.array([0, 2, 3, 4]),
      ...     count=np.array([2, 1, 1, 2]), segment=np.array([1, 2, 1, 0]),
      ...     row_piece=np.array([0, 2, 4]), padded=np.array([1]), read_marks=None, **reads)
      >>> batch = compact_rows(packed, tokens)
      >>> batch["segment_starts"].tolist(), batch["filled"].tolist()
      ([[160], [128]], [4, 1])
    """
    n, block = tokens.shape[0], tokens.shape[1] - 1
    if starts is None:
        starts = segment_starts(packed, block=block)
    batch = {
        "tokens": tokens,
        "segment_starts": starts[first : first + n].copy(),  # a batch holds no plan memory
        "filled": packed.filled[first : first + n].astype(np.int32),
    }
    if packed.provenance is not None:
        batch.update(packed.provenance.rows(first, first + n))
    return batch


def expand_compact(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A compact batch's five model arrays, in numpy (what :func:`grainpack.expand` computes
    on the accelerator); other keys are kept.

    Example:
      >>> batch = {"tokens": np.array([[5, 6, 7, 8], [9, 0, 0, 0]], dtype=np.uint16),
      ...          "segment_starts": np.array([[160], [128]], dtype=np.uint8),
      ...          "filled": np.array([4, 1], dtype=np.int32)}
      >>> out = expand_compact(batch)
      >>> out["segment_ids"].tolist(), out["positions"].tolist(), out["loss_mask"].tolist()
      ([[1, 1, 2], [1, 0, 0]], [[0, 1, 0], [0, 0, 0]], [[1, 1, 1], [0, 0, 0]])
    """
    rest = {k: v for k, v in batch.items() if k not in COMPACT_KEYS}
    tokens, filled = batch["tokens"], batch["filled"][:, None]
    block = tokens.shape[1] - 1
    bits = np.unpackbits(batch["segment_starts"], axis=1, count=block).astype(bool)
    i = np.arange(block, dtype=np.int32)
    real = i < filled
    last_start = np.maximum.accumulate(np.where(bits, i, 0), axis=1)
    return {
        "inputs": tokens[:, :-1].astype(np.int32),
        "targets": tokens[:, 1:].astype(np.int32),
        "segment_ids": np.where(real, np.cumsum(bits, axis=1, dtype=np.int32), 0),
        "positions": np.where(real, i - last_start, 0).astype(np.int32),
        "loss_mask": (i + 1 < filled).astype(np.int32),
        **rest,
    }


COMPACT_KEYS = ("tokens", "segment_starts", "filled")
_BITS = np.array([128, 64, 32, 16, 8, 4, 2, 1], dtype=np.uint8)  # np.packbits order


@functools.lru_cache(maxsize=8)
def _arange(n: int) -> np.ndarray:
    out = np.arange(n, dtype=np.int32)
    out.flags.writeable = False
    return out
