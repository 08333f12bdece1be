"""Concatenate-and-chunk packing of documents into ``block + 1`` token rows (the document pipeline).

Invariant: the rows, read in order and with the final row's padding removed, are exactly the
documents in the given order joined by ``boundary_id``; only the final row is ever padded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from grainpack.index.checks import check_int
from grainpack.index.stream import stream_plan

INT64 = np.iinfo(np.int64)

__all__ = ["PackedCorpus", "pack_documents"]


@dataclasses.dataclass(frozen=True, eq=False)
class PackedCorpus:
    """Result of :func:`pack_documents`: rows plus the token accounting.

    Attributes:
        rows: int64 ``(num_rows, block + 1)``; ``row[:-1]`` is the input, ``row[1:]`` the target.
        real_tokens: document tokens plus boundary tokens (everything but padding).
        total_tokens: ``num_rows * (block + 1)``.

    Example:
        >>> docs = [np.array([1, 2, 3]), np.array([4, 5])]
        >>> packed = pack_documents(docs, [0, 1], 3, pad_id=9, boundary_id=0)
        >>> packed.rows.tolist(), packed.real_tokens, packed.packing_efficiency
        ([[1, 2, 3, 0], [4, 5, 9, 9]], 6, 0.75)
    """

    rows: np.ndarray
    real_tokens: int
    total_tokens: int

    def __len__(self) -> int:
        """The number of rows."""
        return len(self.rows)

    @property
    def packing_efficiency(self) -> float:
        """``real_tokens / total_tokens``; 0.0 when nothing was packed (no rows).

        An empty shard reports 0.0 rather than a vacuous 1.0, so it never looks perfectly
        efficient in a log.
        """
        return self.real_tokens / self.total_tokens if self.total_tokens else 0.0


def _is_source(documents: Any) -> bool:
    # A grainpack TokenShardSource (duck-typed: packing imports no IO module).
    return hasattr(documents, "read_into") and hasattr(documents, "offsets")


def _row_id(name: str, value: object) -> int:
    """``value`` as a token id of the int64 rows."""
    value = check_int(name, value, INT64.min)
    if value > INT64.max:
        raise ValueError(f"{name} must fit the int64 rows (at most {INT64.max}), got {value}")
    return value


def _check_tokens(i: int, doc: np.ndarray) -> None:
    """Raises unless document ``i`` holds integer ids that the int64 rows keep exactly."""
    if doc.size == 0:
        return
    if doc.dtype == np.bool_ or not np.issubdtype(doc.dtype, np.integer):
        raise TypeError(
            f"documents must hold integer token ids; document {i} has dtype {doc.dtype} "
            "(convert it with .astype(np.int64) if its values are whole)"
        )
    if doc.dtype == np.uint64 and doc.max() > INT64.max:
        raise ValueError(
            f"document {i} holds the id {doc.max()}, more than the int64 rows hold "
            f"({INT64.max}); check the tokenizer output"
        )


def pack_documents(
    documents: Any,
    indices: np.ndarray | Sequence[int],
    block: int,
    *,
    pad_id: int = 0,
    boundary_id: int | None = None,
) -> PackedCorpus:
    """Concatenate ``documents[i]`` for ``i`` in ``indices`` and chunk into ``block + 1`` rows.

    ``boundary_id`` (e.g. EOS), if given, goes between consecutive documents (not after the
    last) and counts as a real token. Only the final row is padded, with ``pad_id``; an empty
    stream gives no rows at all. Only the listed documents are read.

    Args:
        documents: a sequence of 1-D integer arrays, or a grainpack source (read through its
            stream offsets, without per-document copies).
        indices: document ids, in packing order (repeats allowed).
        block: model sequence length, >= 1; rows hold ``block + 1`` tokens.
        pad_id: token that fills the end of the final row.
        boundary_id: token inserted between consecutive documents, or None.

    Returns:
        A :class:`PackedCorpus` with int64 rows.

    Raises:
        ValueError, TypeError: bad block, indices out of range or documents not 1-D.

    Example:
        >>> docs = [np.array([1, 2, 3]), np.array([4, 5])]
        >>> pack_documents(docs, [1, 0], 2, pad_id=0, boundary_id=9).rows.tolist()
        [[4, 5, 9], [1, 2, 3]]
    """
    block = check_int("block", block, minimum=1)
    pad_id = _row_id("pad_id", pad_id)
    if boundary_id is not None:
        boundary_id = _row_id("boundary_id", boundary_id)
    idx = np.asarray(indices)
    if idx.ndim != 1 or (idx.size and not np.issubdtype(idx.dtype, np.integer)):
        raise ValueError(f"indices must be a 1-D integer array, got {idx.dtype} {idx.shape}")
    idx = idx.astype(np.int64)
    n = len(documents)
    bad = idx[(idx < 0) | (idx >= n)]
    if bad.size:
        raise ValueError(
            f"indices must be document ids in [0, {n}), got {bad[:10].tolist()}; "
            "pass ids from global_document_order/shard_documents_for_rank of this corpus"
        )

    if _is_source(documents):
        offsets = np.asarray(documents.offsets, dtype=np.int64)
        starts, lens = offsets[idx], offsets[idx + 1] - offsets[idx]
        docs = None
    else:
        docs = [np.asarray(documents[int(i)]) for i in idx]
        bad_docs = [int(i) for i, d in zip(idx, docs, strict=True) if d.ndim != 1]
        if bad_docs:
            raise ValueError(f"documents must be 1-D token arrays; not 1-D: ids {bad_docs[:10]}")
        for i, d in zip(idx.tolist(), docs, strict=True):
            _check_tokens(i, d)
        lens = np.array([d.size for d in docs], dtype=np.int64)
        starts = None

    plan = stream_plan(lens, None, boundary=boundary_id is not None)
    real, num_rows = plan.total, plan.num_rows(block)
    flat = np.full(num_rows * (block + 1), pad_id, dtype=np.int64)
    pos = plan.bounds[:-1]  # stream start of document k (its boundary token ends at pos[k+1])
    if boundary_id is not None and idx.size > 1:
        flat[pos[1:] - 1] = boundary_id
    for k in range(idx.size):
        p, m = int(pos[k]), int(lens[k])
        if docs is not None:
            flat[p : p + m] = docs[k]
        elif m:
            documents.read_into(flat[p : p + m], int(starts[k]))
    rows = flat.reshape(num_rows, block + 1)
    return PackedCorpus(rows=rows, real_tokens=real, total_tokens=rows.size)
