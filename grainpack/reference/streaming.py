"""``StreamingCorpus``: per-rank streaming of shuffled, packed, batched documents.

Invariant: for a given (seed, epoch, rank, world_size) the batches are a pure function of the
corpus; concatenated, they are ``pack_documents`` of ``rank_document_indices(epoch)``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from grainpack.index.checks import check_int
from grainpack.index.orders import SequenceSelector, global_document_order, shard_documents_for_rank
from grainpack.reference.packing import pack_documents

__all__ = ["StreamingCorpus"]

_INT64_MIN = int(np.iinfo(np.int64).min)


class StreamingCorpus:
    """This rank's view of a corpus: ordered by (seed, epoch), sharded, packed and batched.

    Every rank holds the same ``documents`` (a list of token arrays or a grainpack source);
    only this rank's documents are ever read. Rows are ``block + 1`` tokens: ``row[:-1]`` is
    the context, ``row[1:]`` the next-token targets.

    Args:
        documents: sequence of 1-D token arrays, or a grainpack ``TokenShardSource``.
        rank: this rank, ``0 <= rank < world_size``.
        world_size: number of ranks.
        block: sequence length (tokens per context row).
        batch_size: rows per micro-batch (the last one of an epoch may be smaller).
        seed: order seed, >= 0.
        pad_id: token filling the end of the last row.
        boundary_id: token between consecutive documents, or None.
        sequence_selector: optional curriculum hook ``(order, seed, epoch) -> order``.

    Example:
        >>> docs = [np.arange(5), np.arange(10, 13)]
        >>> sc = StreamingCorpus(docs, rank=0, world_size=1, block=3, batch_size=4)
        >>> [(x.shape, y.shape) for x, y in sc.epoch_batches(0)]
        [((2, 3), (2, 3))]
        >>> sc.last_packing_efficiency
        1.0
    """

    def __init__(
        self,
        documents: Sequence[Any] | Any,
        *,
        rank: int,
        world_size: int,
        block: int,
        batch_size: int,
        seed: int = 0,
        pad_id: int = 0,
        boundary_id: int | None = None,
        sequence_selector: SequenceSelector | None = None,
    ) -> None:
        self.world_size = check_int("world_size", world_size, minimum=1)
        self.rank = check_int("rank", rank, minimum=0)
        if self.rank >= self.world_size:
            raise ValueError(
                f"rank must be in [0, world_size), got rank={rank} with world_size={world_size}"
            )
        self.block = check_int("block", block, minimum=1)
        self.batch_size = check_int("batch_size", batch_size, minimum=1)
        self.seed = check_int("seed", seed, minimum=0)
        self.pad_id = check_int("pad_id", pad_id, _INT64_MIN)
        self.boundary_id = (
            None if boundary_id is None else check_int("boundary_id", boundary_id, _INT64_MIN)
        )
        if sequence_selector is not None and not callable(sequence_selector):
            raise TypeError(
                f"sequence_selector must be callable (order, seed, epoch) -> order, "
                f"got {sequence_selector!r}"
            )
        self.sequence_selector = sequence_selector
        self.documents = documents
        self.last_packing_efficiency: float | None = None

    def __len__(self) -> int:
        """Number of documents in the whole corpus (all ranks)."""
        return len(self.documents)

    def rank_document_indices(self, epoch: int) -> np.ndarray:
        """This rank's document ids for ``epoch``, in the exact order they are packed."""
        order = global_document_order(
            len(self.documents),
            seed=self.seed,
            epoch=epoch,
            sequence_selector=self.sequence_selector,
        )
        return shard_documents_for_rank(order, self.rank, self.world_size)

    def epoch_batches(self, epoch: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield ``(context float32 (b, block), targets int64 (b, block))`` micro-batches.

        Deterministic given (seed, epoch, rank, world_size). The context is float32 as in the
        seed (exact for token ids below 2**24); the targets are exact int64. Sets
        ``last_packing_efficiency`` (real-token fraction of this epoch's rows on this rank)
        when the first batch is produced.
        """
        packed = pack_documents(
            self.documents,
            self.rank_document_indices(epoch),
            self.block,
            pad_id=self.pad_id,
            boundary_id=self.boundary_id,
        )
        self.last_packing_efficiency = packed.packing_efficiency
        rows = packed.rows
        for lo in range(0, rows.shape[0], self.batch_size):
            chunk = rows[lo : lo + self.batch_size]
            yield chunk[:, :-1].astype(np.float32), chunk[:, 1:].copy()
