"""Deterministic orders: the splitmix64 hash, document orders per (seed, epoch), rank shards.

Every order here is a pure function of its integer arguments, so any process computes the
same result without communicating. Pure: numpy only, no grainpack IO module is imported.
"""

from __future__ import annotations

from typing import Protocol, overload

import numpy as np

from grainpack.checks import check_int

__all__ = [
    "DOCUMENT_ORDER_STREAM",
    "MASK64",
    "WINDOW_ORDER_STREAM",
    "SequenceSelector",
    "check_selected_order",
    "global_document_order",
    "shard_documents_for_rank",
    "splitmix64",
    "splitmix64_array",
    "window_permutation",
]

MASK64 = (1 << 64) - 1
# Third SeedSequence word of the document-level order (seed 000) and of the window-level
# order (seed 001, `default_rng([seed, epoch, 0xDA7A])`): one named stream per kind of order.
DOCUMENT_ORDER_STREAM = 0xD0C5
WINDOW_ORDER_STREAM = 0xDA7A

_GOLDEN = 0x9E3779B97F4A7C15
_MUL1 = 0xBF58476D1CE4E5B9
_MUL2 = 0x94D049BB133111EB


@overload
def splitmix64(x: int) -> int: ...
@overload
def splitmix64(x: np.ndarray) -> np.ndarray: ...
def splitmix64(x: int | np.ndarray) -> int | np.ndarray:
    """One SplitMix64 step: the seed's ``_splitmix64``, on Python ints modulo 2**64.

    An array argument is hashed elementwise by :func:`splitmix64_array` (same values).

    Any int is accepted (negative or >= 2**64); it is reduced modulo 2**64 by the masking, so
    ``splitmix64(x) == splitmix64(x % 2**64)``.

    Args:
        x: the state to hash.

    Returns:
        An int in ``[0, 2**64)``.

    Example:
        >>> hex(splitmix64(0))
        '0xe220a8397b1dcdaf'
    """
    if isinstance(x, np.ndarray):
        return splitmix64_array(x)
    x = (int(x) + _GOLDEN) & MASK64
    z = x
    z = ((z ^ (z >> 30)) * _MUL1) & MASK64
    z = ((z ^ (z >> 27)) * _MUL2) & MASK64
    return z ^ (z >> 31)


def splitmix64_array(x: np.ndarray | int) -> np.ndarray:
    """Vectorized :func:`splitmix64`: identical values, elementwise, as a uint64 array.

    Signed integer inputs are reinterpreted modulo 2**64 (two's complement), exactly as the
    scalar form reduces negative ints. uint64 arithmetic wraps, which is the masking.

    Args:
        x: an integer array (or scalar); it is not modified.

    Returns:
        A new uint64 array of the same shape.

    Example:
        >>> [hex(v) for v in splitmix64_array(np.array([0, 1], dtype=np.uint64)).tolist()]
        ['0xe220a8397b1dcdaf', '0x910a2dec89025cc1']
    """
    arr = np.asarray(x)
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(
            f"splitmix64_array expects an integer array, got {arr.dtype=}; "
            "convert with .astype(np.uint64)"
        )
    z = arr.astype(np.uint64, copy=True)
    return _splitmix64_inplace(z, np.empty_like(z))


def _splitmix64_inplace(z: np.ndarray, tmp: np.ndarray) -> np.ndarray:
    """Hash the uint64 array ``z`` in place (``tmp`` is scratch of the same shape)."""
    np.add(z, np.uint64(_GOLDEN), out=z)
    np.right_shift(z, np.uint64(30), out=tmp)
    np.bitwise_xor(z, tmp, out=z)
    np.multiply(z, np.uint64(_MUL1), out=z)
    np.right_shift(z, np.uint64(27), out=tmp)
    np.bitwise_xor(z, tmp, out=z)
    np.multiply(z, np.uint64(_MUL2), out=z)
    np.right_shift(z, np.uint64(31), out=tmp)
    np.bitwise_xor(z, tmp, out=z)
    return z


class SequenceSelector(Protocol):
    """Curriculum hook: ``(order, seed, epoch) -> order`` (reorder and/or filter documents).

    It receives the epoch's base permutation of document ids and returns the ids to consume,
    in order: any subset of them, each at most once. Plain functions satisfy the protocol;
    make them module-level (or small objects) so they pickle into worker processes.
    """

    def __call__(self, order: np.ndarray, seed: int, epoch: int) -> np.ndarray: ...


def check_selected_order(selected: object, num_documents: int) -> np.ndarray:
    """Validate a selector's result: 1-D integer document ids in range, no duplicates.

    Args:
        selected: what a :class:`SequenceSelector` returned.
        num_documents: the corpus size; valid ids are ``0 .. num_documents - 1``.

    Returns:
        The ids as a new int64 array.

    Raises:
        ValueError: the result is not a 1-D integer array of distinct in-range ids.

    Example:
        >>> check_selected_order(np.array([2, 0]), 3).tolist()
        [2, 0]
    """
    fix = "a sequence_selector must return a subset of the document ids it was given, each once"
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
    ``(seed=0, epoch=1)`` are unrelated. ``sequence_selector`` may then reorder or filter it.

    Args:
        num_documents: corpus size, >= 0.
        seed: non-negative int.
        epoch: non-negative int.
        sequence_selector: optional ``(order, seed, epoch) -> order`` curriculum hook.

    Returns:
        int64 document ids, bitwise identical for the same arguments in any process.

    Raises:
        TypeError, ValueError: bad arguments or a selector result that is not a subset.

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
    return check_selected_order(sequence_selector(order.copy(), seed, epoch), n)


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
    """Window order of one epoch, as seed 001: ``default_rng([seed, epoch, 0xDA7A])``.

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
