"""Deterministic orders: document orders per (seed, epoch), window permutations, rank shards.

Every order here is a pure function of its integer arguments, so any process computes the
same result without communicating. Pure: numpy and the standard library only.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from grainpack.index.checks import check_int

__all__ = [
    "DOCUMENT_ORDER_STREAM",
    "WINDOW_ORDER_STREAM",
    "SequenceSelector",
    "check_selected_order",
    "global_document_order",
    "shard_documents_for_rank",
    "window_permutation",
]

# Third SeedSequence word of the document pipeline's order and of the window loader's order
# (`default_rng([seed, epoch, 0xDA7A])`): one named stream per kind of order.
DOCUMENT_ORDER_STREAM = 0xD0C5
WINDOW_ORDER_STREAM = 0xDA7A


@runtime_checkable
class SequenceSelector(Protocol):
    """Curriculum hook: ``(order, seed, epoch) -> order`` (reorder and/or filter documents).

    It receives the epoch's base permutation of document ids and returns the ids to consume,
    in order: any subset of them, each at most once. Plain functions satisfy the protocol;
    make them module-level (or small objects) so they pickle into worker processes.
    ``isinstance(x, SequenceSelector)`` checks only that ``x`` is callable.
    """

    def __call__(self, order: np.ndarray, seed: int, epoch: int) -> np.ndarray: ...


def check_selected_order(
    selected: object, num_documents: int, *, distinct: bool = True
) -> np.ndarray:
    """Validate a selector's result: 1-D integer document ids in range (and no duplicates).

    Args:
        selected: what a :class:`SequenceSelector` returned.
        num_documents: the corpus size; valid ids are ``0 .. num_documents - 1``.
        distinct: refuse repeated ids (the pipeline's epochs visit a document at most once).

    Returns:
        The ids as a new int64 array.

    Raises:
        ValueError: the result is not a 1-D integer array of distinct in-range ids.

    Example:
        >>> check_selected_order(np.array([2, 0]), 3).tolist()
        [2, 0]
    """
    fix = "a sequence_selector must return document ids it was given" + ", each once" * distinct
    arr = np.asarray(selected)
    if arr.ndim != 1:
        raise ValueError(f"selected order must be 1-D, got shape {arr.shape}; {fix}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"selected order must hold integer ids, got dtype {arr.dtype}; {fix}")
    ids = arr.astype(np.int64)  # uint64 ids >= 2**63 wrap negative: reported as out of range
    bad = (ids < 0) | (ids >= num_documents)
    if bad.any():
        shown = arr[bad][:10].tolist()
        raise ValueError(
            f"selected order has {int(bad.sum())} ids outside [0, {num_documents}), "
            f"e.g. {shown}; {fix}"
        )
    if not distinct:
        return ids
    uniq, counts = np.unique(ids, return_counts=True)
    if uniq.size != ids.size:
        dup = uniq[counts > 1][:10].tolist()
        raise ValueError(f"selected order repeats document ids {dup}; {fix}")
    return ids


def global_document_order(
    num_documents: int,
    *,
    seed: int,
    epoch: int,
    sequence_selector: SequenceSelector | None = None,
) -> np.ndarray:
    """The order all ranks together consume documents in, for one epoch.

    The base order is ``np.random.default_rng([seed, epoch, 0xD0C5]).permutation(n)``: seed
    and epoch are mixed by SeedSequence (never added), so ``(seed=1, epoch=0)`` and
    ``(seed=0, epoch=1)`` are unrelated. ``sequence_selector`` may then reorder, filter or
    otherwise transform it (repeat ids, say); the pipeline's selectors may not repeat.

    Args:
        num_documents: corpus size, >= 0.
        seed: non-negative int.
        epoch: non-negative int.
        sequence_selector: optional ``(order, seed, epoch) -> order`` curriculum hook.

    Returns:
        int64 document ids, bitwise identical for the same arguments in any process.

    Raises:
        TypeError, ValueError: bad arguments, or a selector result that is not 1-D integer
            ids of this corpus.

    Example:
        >>> order = global_document_order(5, seed=0, epoch=0)
        >>> sorted(order.tolist())
        [0, 1, 2, 3, 4]
    """
    n = check_int("num_documents", num_documents)
    seed = check_int("seed", seed)
    epoch = check_int("epoch", epoch)
    rng = np.random.default_rng([seed, epoch, DOCUMENT_ORDER_STREAM])
    order = rng.permutation(n).astype(np.int64, copy=False)
    if sequence_selector is None:
        return order
    return check_selected_order(sequence_selector(order.copy(), seed, epoch), n, distinct=False)


def shard_documents_for_rank(order: np.ndarray, rank: int, world_size: int) -> np.ndarray:
    """Round-robin residency: rank ``r`` keeps ``order[r], order[r + W], order[r + 2W], ...``.

    Disjoint across ranks and complete (their union is ``order``).

    Args:
        order: a 1-D global order (e.g. from :func:`global_document_order`).
        rank: this rank, ``0 <= rank < world_size``.
        world_size: number of ranks, >= 1.

    Returns:
        A copy of ``order[rank::world_size]`` (int64 for integer input).

    Example:
        >>> shard_documents_for_rank(np.arange(7), 1, 3).tolist()
        [1, 4]
    """
    world_size = check_int("world_size", world_size)
    rank = check_int("rank", rank)
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size=}")
    if rank >= world_size:
        raise ValueError(
            f"rank must be in [0, world_size), got {rank=} with {world_size=}; "
            "ranks are numbered from 0"
        )
    arr = np.asarray(order)
    if arr.ndim != 1:
        raise ValueError(f"order must be 1-D, got shape {arr.shape}")
    out = arr[rank::world_size].copy()
    return out.astype(np.int64, copy=False) if np.issubdtype(out.dtype, np.integer) else out


def window_permutation(n_windows: int, seed: int, epoch: int) -> np.ndarray:
    """Window order of one epoch, as the window loader's: ``default_rng([seed, epoch, 0xDA7A])``.

    Args:
        n_windows: number of windows, >= 0.
        seed: the stream's seed (for language ``j`` of a mix: ``seed + j``), >= 0.
        epoch: >= 0.

    Returns:
        int64 permutation of ``range(n_windows)``.

    Example:
        >>> sorted(window_permutation(4, 0, 0).tolist())
        [0, 1, 2, 3]
    """
    n = check_int("n_windows", n_windows)
    seed = check_int("seed", seed)
    epoch = check_int("epoch", epoch)
    rng = np.random.default_rng([seed, epoch, WINDOW_ORDER_STREAM])
    return rng.permutation(n).astype(np.int64, copy=False)
