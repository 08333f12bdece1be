"""Expansion: a :class:`~grainpack.index.packed.PackedRows` and its tokens -> model arrays.

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

from grainpack.corpus.pool import ArrayPool
from grainpack.index.packed import PackedRows, segment_bits
from grainpack.pipeline import fast

__all__ = [
    "COMPACT_KEYS",
    "FULL_KEYS",
    "compact_rows",
    "describe_rows",
    "expand_compact",
    "expand_rows",
]

COMPACT_KEYS = ("tokens", "segment_starts", "filled")
FULL_KEYS = ("inputs", "targets", "segment_ids", "positions", "loss_mask")


def expand_rows(
    packed: PackedRows,
    tokens: np.ndarray,
    *,
    first: int = 0,
    compiled: bool = True,
    pool: ArrayPool | None = None,
) -> dict[str, np.ndarray]:
    """The model arrays (module docstring) of rows ``[first, first + len(tokens))`` of rows
    packed by :func:`pack_rows`, given their ``tokens`` (``RowReader.read``); fresh arrays.
    With numba installed (and ``compiled``), :func:`grainpack.pipeline.compiled.expand`
    writes them, one pass each (the same arrays as numpy's, about twice as fast), into
    arrays of ``pool`` when given (recycled memory, no fresh pages to fault in).

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
    found = fast.kernels() if compiled else None
    if found is not None:
        empty = np.empty if pool is None else pool.empty
        batch = {key: empty((n, block), np.int32) for key in FULL_KEYS}
        layout = (packed.start, packed.count, packed.segment, lo, hi, packed.filled, first)
        if found.expand(tokens, *layout, *batch.values()) < 0:
            raise RuntimeError(
                f"the layout of rows [{first}, {first + n}) does not tile them (a grainpack "
                "bug: please report it)"
            )
    else:
        batch = _expand(packed, tokens, first, lo, hi)
    if packed.provenance is not None:
        batch.update(packed.provenance.rows(first, first + n, width=tokens.shape[1]))
    return batch


def _expand(
    packed: PackedRows, tokens: np.ndarray, first: int, lo: int, hi: int
) -> dict[str, np.ndarray]:
    """:func:`expand_rows` in numpy (layout pieces ``[lo, hi)``), without provenance."""
    n, block = tokens.shape[0], tokens.shape[1] - 1
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
    return {
        "inputs": tokens[:, :-1].astype(np.int32),
        "targets": tokens[:, 1:].astype(np.int32),
        "segment_ids": segment_ids,
        "positions": positions,
        "loss_mask": loss_mask,
    }


def describe_rows(packed: PackedRows, *, block: int, shared: bool = False) -> dict[str, np.ndarray]:
    """``segment_starts`` and ``filled`` (module docstring) of every row of ``packed``, once
    per plan: a compact plan's bits (copied when ``shared``: a plan from a worker is a view
    of Grain's shared memory, which batches must not hold), or bits computed from a full
    plan's layout.

    Example:
      >>> reads = dict.fromkeys(("read_source", "read_shard", "read_start", "read_stop"))
      >>> packed = PackedRows(filled=np.array([4, 1]), start=np.array([0, 2, 3, 4]),
      ...     count=np.array([2, 1, 1, 2]), segment=np.array([1, 2, 1, 0]),
      ...     row_piece=np.array([0, 2, 4]), padded=np.array([1]), read_marks=None, **reads)
      >>> rows = describe_rows(packed, block=3)
      >>> np.unpackbits(rows["segment_starts"], axis=1, count=3).tolist(), rows["filled"]
      ([[1, 0, 1], [1, 0, 0]], array([4, 1], dtype=int32))
    """
    if packed.segment_starts is not None:
        bits = packed.segment_starts.copy() if shared else packed.segment_starts
    else:  # a plan of the full layout
        # a segment that starts on a row's last token (its target only) has no input
        row, offset = np.divmod(packed.start[(packed.segment > 0) & (packed.count > 0)], block)
        bits = segment_bits(row, offset, num_rows=packed.num_rows, block=block)
    return {"segment_starts": bits, "filled": packed.filled.astype(np.int32)}


def compact_rows(
    packed: PackedRows,
    tokens: np.ndarray,
    *,
    first: int = 0,
    rows: dict[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """The compact batch (module docstring) of rows ``[first, first + len(tokens))`` of
    ``packed``, given their ``tokens`` (kept, not copied) and the plan's
    :func:`describe_rows` (computed here when not given; the batch holds row slices of it).

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
    n = len(tokens)
    if rows is None:
        rows = describe_rows(packed, block=tokens.shape[1] - 1)
    batch = {"tokens": tokens}
    for key, value in rows.items():
        batch[key] = value[first : first + n]
    if packed.provenance is not None:
        batch.update(packed.provenance.rows(first, first + n, width=tokens.shape[1]))
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


@functools.lru_cache(maxsize=8)
def _arange(n: int) -> np.ndarray:
    out = np.arange(n, dtype=np.int32)
    out.flags.writeable = False
    return out
