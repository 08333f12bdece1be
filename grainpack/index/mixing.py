# Over 400 lines, one module: the scalar rule, its vectorized thresholds and the counting mixer
# must agree bit for bit.
"""Source mixing: slot -> source by a stateless hash, and occurrence counting.

Slot ``s`` picks source ``j`` exactly as the window loader's ``MixedStream._choose``: with
``u = splitmix64(seed * 0x100000001 + s) / 2**64``, the first ``j`` with ``u < cumulative[j]``
(else the last source). With a schedule (:mod:`grainpack.index.schedule`) ``cumulative`` is
that of the weights of the slot's step ``s // slots_per_step``; the hash is the same. The
occurrence of a slot is the number of earlier slots that chose the same source; it is
computed from cached per-block counts, never by walking slots in Python.
Pure: numpy and the standard library only.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from grainpack.index.checks import check_int
from grainpack.index.hashing import MASK64, splitmix64, splitmix64_inplace
from grainpack.index.schedule import (
    MixtureSchedule,
    Segment,
    Stage,
    WeightSchedule,
    segment_probabilities,
)
from grainpack.index.slots import first_slot
from grainpack.index.weights import normalize_probabilities

__all__ = [
    "BLOCK_SLOTS",
    "MAX_SLOTS",
    "SLOT_SEED_MULTIPLIER",
    "SlotMixer",
    "choose_source",
    "choose_sources",
    "cumulative_probabilities",
    "cumulative_thresholds",
    "occurrences_from",
    "source_thresholds",
]

SLOT_SEED_MULTIPLIER = 0x100000001  # window loader: splitmix64(seed * 0x100000001 + slot)
BLOCK_SLOTS = 1 << 16  # slots per cached count block; 512 KiB of uint64 scratch, fits in L2
# Occurrences are counted by hashing every earlier slot (5e8-1e9 slots/s on 2 cores): a run
# of 10**13 tokens at global batch 1024 has ~5e9 slots (5-10 s). Beyond MAX_SLOTS (about a
# minute, 4 MiB of counts per source) a query is refused instead of running for hours.
MAX_SLOTS = 1 << 35
_CHUNK_SLOTS = 1 << 20  # scratch size of choose_sources (bounded memory for long ranges)
_THREADED_BLOCKS = 256  # extend the block cache with 2 threads from 2**24 new slots on
_BACK_SLOTS = 1 << 22  # a slot this close before an anchor is counted back from it


def cumulative_probabilities(probs: Sequence[float]) -> tuple[float, ...]:
    """Running sums ``acc = 0.0; acc += p``, exactly the window loader's accumulation.

    The sums are made in the arithmetic of the values given, as the window loader makes
    them: Python floats (and ints, ``np.float64``) in float64; under NumPy 2, a
    ``np.float32`` (or ``float16``, ``longdouble``) value keeps the sum in its own type, and
    ``u < acc`` then compares in that type. Such a sum is returned as the Python float that
    compares with every ``u = z / 2**64`` as the sum does, so every later step (thresholds,
    counting) is the float64 one.

    Example:
        >>> cumulative_probabilities((0.1, 0.2, 0.7))
        (0.1, 0.30000000000000004, 1.0)
    """
    acc = 0.0
    out = []
    for p in probs:
        acc += p
        out.append(float(acc) if isinstance(acc, float) else _comparing_float(acc))
    return tuple(out)


def _comparing_float(acc: Any) -> float:
    """The Python float ``c`` with ``(u < c) == (u < acc)`` for every ``u = z / 2**64``.

    ``u < acc`` depends on ``z`` only through the float ``u`` and is monotone in it, so it
    holds exactly for ``z`` below the smallest ``z`` that fails it, ``T``, whose ``u`` is
    then the cut (no smaller ``z`` rounds to the same ``u``, or it would fail too)."""
    if not acc < 2.0:  # NaN or out of range: refused later, with the probabilities named
        return float(acc)
    cut = _cut(acc)
    return cut / 2**64 if cut < 1 << 64 else 2.0  # 2.0: above every u (u <= 1.0)


def _cut(c: Any) -> int:
    """The smallest ``z`` in ``[0, 2**64]`` with ``not (z / 2**64 < c)`` (``2**64``: none).
    ``z / 2**64`` is Python's correctly rounded int/int division, monotone in ``z``."""
    lo, hi = 0, 1 << 64
    while lo < hi:
        mid = (lo + hi) // 2
        if mid / 2**64 < c:
            lo = mid + 1
        else:
            hi = mid
    return lo


def choose_source(seed: int, slot: int, cumulative: Sequence[float]) -> int:
    """Source index slot ``slot`` picks: exactly the window loader's ``_choose`` (one source -> 0).

    Example:
        >>> choose_source(0, 0, (0.5, 1.0))  # splitmix64(0) / 2**64 = 0.88...
        1
    """
    if len(cumulative) == 1:
        return 0
    u = splitmix64(seed * SLOT_SEED_MULTIPLIER + slot) / 2**64
    for j, c in enumerate(cumulative):
        if u < c:
            return j
    return len(cumulative) - 1


@functools.lru_cache(maxsize=64)
def _thresholds(cumulative: tuple[float, ...]) -> tuple[int, ...]:
    return tuple(_cut(c) for c in cumulative)  # 2**64 stands for "never"


def source_thresholds(cumulative: Sequence[float]) -> tuple[int, ...]:
    """Integer thresholds ``T`` with ``(z / 2**64 < c) == (z < T)`` for every 64-bit ``z``.

    They let the vectorized choice compare uint64 hashes directly, bit-exact with the float
    comparison of the scalar form. ``T == 2**64`` means every ``z`` is below ``c``.

    Raises:
        ValueError: ``cumulative`` is empty, not finite or decreasing.

    Example:
        >>> # (2**63 - 1) / 2**64 rounds to 0.5, so the cut is below 2**63
        >>> source_thresholds((0.5, 1.0)) == (2**63 - 2**9, 2**64 - 2**10)
        True
    """
    cum = tuple(float(c) for c in cumulative)
    if not cum or not all(math.isfinite(c) for c in cum):
        raise ValueError(f"cumulative must be non-empty and finite, got {list(cum)}")
    if any(b < a for a, b in itertools.pairwise(cum)):
        raise ValueError(
            f"cumulative must be non-decreasing, got {list(cum)}; "
            "build it with cumulative_probabilities(probs) from non-negative probs"
        )
    return _thresholds(cum)


def cumulative_thresholds(cumulative: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorized :func:`source_thresholds` of any array of cumulative values, bit-exact.

    ``z / 2**64`` is ``fl(z) / 2**64`` (scaling by a power of two is exact), so
    ``z / 2**64 < c`` holds exactly for ``fl(z) < C`` with ``C = c * 2**64``: the threshold is
    the smallest integer that rounds to ``C`` or above. Below ``2**53`` integers are exact
    (``ceil(C)``); above, it is the midpoint between ``C`` and the double before it, plus one
    when that tie rounds down (to an even significand).

    Returns:
        ``(thresholds, never)``: uint64 thresholds, and where the threshold is ``2**64``
        (every hash lies below ``c``; the uint64 value is then 0 and meaningless).

    Example:
        >>> t, never = cumulative_thresholds(np.array([0.5, 1.0, 1.5]))
        >>> [int(x) for x in t] == [2**63 - 2**9, 2**64 - 2**10, 0], never.tolist()
        (True, [False, False, True])
    """
    big_c = np.ldexp(np.asarray(cumulative, dtype=np.float64), 64)
    out = np.zeros(big_c.shape, dtype=np.uint64)
    never = big_c > 2.0**64
    small = (big_c > 0) & (big_c <= 2.0**53)
    out[small] = np.ceil(big_c[small]).astype(np.uint64)
    large = (big_c > 2.0**53) & ~never
    mantissa, exponent = np.frexp(big_c[large])  # C = M * 2**k, M in [2**52, 2**53), k >= 1
    m = np.ldexp(mantissa, 53).astype(np.uint64)
    k = exponent.astype(np.int64) - 53
    one = np.uint64(1)
    # M > 2**52: predecessor M - 1 (same exponent), midpoint (2M - 1) * 2**(k - 1); a tie
    # rounds to the even significand: to C when M is even, else down (threshold + 1).
    # M == 2**52: predecessor (2**53 - 1) * 2**(k - 1), midpoint (4M - 1) * 2**(k - 2), ties
    # round to C (k >= 2 here: C == 2**53 is among the small ones).
    power = m == np.uint64(1 << 52)
    shift = (k - 1 - power).astype(np.uint64)
    base = np.where(power, np.uint64(4) * m - one, np.uint64(2) * m - one)
    out[large] = (base << shift) + np.where(power, np.uint64(0), m & one)
    return out, never


def _finite_thresholds(cumulative: Sequence[float]) -> np.ndarray:
    """uint64 thresholds of all sources but the last (which takes the rest), minus 2**64s."""
    ts = source_thresholds(cumulative)[:-1]
    return np.array([t for t in ts if t < 1 << 64], dtype=np.uint64)


def _hash_slots(seed: int, start: int, n: int, z: np.ndarray, tmp: np.ndarray) -> np.ndarray:
    """``z[:n] = splitmix64(seed * K + start + i)`` for ``i < n`` (wrapping uint64)."""
    base = np.uint64((seed * SLOT_SEED_MULTIPLIER + start) & MASK64)
    np.add(_arange_u64(n), base, out=z[:n])
    return splitmix64_inplace(z[:n], tmp[:n])


@functools.lru_cache(maxsize=4)
def _arange_u64(n: int) -> np.ndarray:
    out = np.arange(n, dtype=np.uint64)
    out.flags.writeable = False
    return out


def choose_sources(seed: int, start: int, stop: int, cumulative: Sequence[float]) -> np.ndarray:
    """Vectorized :func:`choose_source` for slots ``[start, stop)``; identical values.

    Args:
        seed: the mix seed.
        start: first slot, >= 0.
        stop: end slot, >= start.
        cumulative: from :func:`cumulative_probabilities` (non-decreasing).

    Returns:
        int64 source index per slot.

    Example:
        >>> choose_sources(0, 0, 4, (0.5, 1.0)).tolist() == [
        ...     choose_source(0, s, (0.5, 1.0)) for s in range(4)]
        True
    """
    start = check_int("start", start)
    stop = check_int("stop", stop, minimum=start)
    n = stop - start
    out = np.zeros(n, dtype=np.int64)
    if len(cumulative) == 1 or n == 0:
        source_thresholds(cumulative)  # validate
        return out
    thresholds = _finite_thresholds(cumulative)
    size = min(n, _CHUNK_SLOTS)
    z, tmp = np.empty(size, np.uint64), np.empty(size, np.uint64)
    for lo in range(0, n, size):
        m = min(size, n - lo)
        h = _hash_slots(seed, start + lo, m, z, tmp)
        # choice = number of thresholds <= z; the last source takes every remaining z.
        out[lo : lo + m] = np.searchsorted(thresholds, h, side="right")
    return out


class SlotMixer:
    """Slot -> (source, occurrence) for one (seed, weights), with cached per-block counts.

    Counts per source of each block of ``BLOCK_SLOTS`` slots are computed by one vectorized
    hash and kept as prefix sums, extended lazily. ``counts_before(10**8)`` costs about 0.13 s
    the first time (1526 blocks, 2 cores) and microseconds afterwards. A restore that knows
    the counts at its slot (:meth:`anchor`) starts the prefix sums there instead of at 0:
    its cost no longer grows with the slot. With one source the occurrence is the slot
    itself: nothing is counted. Counting more than ``MAX_SLOTS`` slots (from 0 or from the
    anchor) is refused with a ``ValueError`` stating the cost.

    With a schedule the weights are those of each slot's step (``slot // slots_per_step``):
    a block that spans a stage boundary is counted in pieces, one per stage, and a ramp
    compares each slot's hash with the thresholds of its own step (computed vectorized for
    the steps of the block). A schedule whose weights never change chooses exactly as fixed
    weights.

    Args:
        seed: the mix seed (any int; it enters the hash modulo 2**64).
        probs: one probability per source (see :func:`normalize_probabilities`), or a
            :class:`~grainpack.index.schedule.WeightSchedule` of them by global step.
        slots_per_step: slots of one global step (the global batch size), for a schedule.

    Example:
        >>> mixer = SlotMixer(0, (0.5, 0.5))
        >>> sources, occurrences = mixer.draws(0, 4)
        >>> int(mixer.counts_before(4).sum())
        4
        >>> staged = SlotMixer(0, MixtureSchedule([(0, (1.0, 0.0)), (2, (0.0, 1.0))]),
        ...                    slots_per_step=3)
        >>> staged.draws(0, 9)[0].tolist()  # steps 0 and 1 take source 0, step 2 source 1
        [0, 0, 0, 0, 0, 0, 1, 1, 1]
    """

    def __init__(
        self, seed: int, probs: Sequence[float] | WeightSchedule, *, slots_per_step: int = 1
    ) -> None:
        self.seed = check_int("seed", seed, minimum=None)
        self.slots_per_step = check_int("slots_per_step", slots_per_step, minimum=1)
        if isinstance(probs, WeightSchedule):
            schedule = probs
            constant = probs.constant if isinstance(probs, MixtureSchedule) else None
        elif (
            probs is None or isinstance(probs, str) or not isinstance(probs, Sequence | np.ndarray)
        ):
            raise TypeError(
                f"probs must be a sequence with one probability per source, got {probs!r}; "
                "use normalize_probabilities(None, n) for equal weights"
            )
        else:
            constant = normalize_probabilities(probs, len(probs))
            schedule = MixtureSchedule([Stage(0, constant)])
        self.schedule = schedule
        self.num_sources = schedule.num_sources
        # Weights that never change: exactly the fixed-weight choice, on its fast path (the
        # running sums of the values as given, as the window loader sums them).
        self.probs = constant
        given = constant if isinstance(probs, WeightSchedule) else probs
        self.cumulative = None if constant is None else cumulative_probabilities(given)
        self._thresholds = None if constant is None else _finite_thresholds(self.cumulative)
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._base = 0  # row b of _prefix: counts of the slots < (base + b) * BLOCK_SLOTS
        self._prefix = np.zeros((1, self.num_sources), dtype=np.int64)
        # (slot, counts before it) of the last query: consecutive draws() of one stream of
        # batches then hash only their own slots, not the start of their block again.
        self._memo: tuple[int, np.ndarray] | None = None
        self._stage_thresholds: dict[tuple[float, ...], np.ndarray] = {}

    def __getstate__(self) -> dict[str, Any]:
        # Caches are rebuilt lazily: the pickle stays small however far the mixer has run.
        skip = ("_lock", "_base", "_prefix", "_memo", "_stage_thresholds")
        return {k: v for k, v in self.__dict__.items() if k not in skip}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def __repr__(self) -> str:
        if self.probs is not None:
            return f"SlotMixer(seed={self.seed}, probs={self.probs})"
        return (
            f"SlotMixer(seed={self.seed}, schedule={self.schedule!r}, "
            f"slots_per_step={self.slots_per_step})"
        )

    def _pieces(self, start: int, stop: int) -> list[tuple[int, int, Segment | None]]:
        """``[start, stop)`` cut where the weights change kind: ``(lo, hi, segment)``, with
        ``None`` for the whole range when the weights never change."""
        if self.probs is not None or stop <= start:
            return [(start, stop, None)]
        size = self.slots_per_step
        out = []
        for seg in self.schedule.segments(start // size, -(-stop // size)):
            lo = max(start, first_slot(seg.start, size))
            hi = stop if seg.stop is None else min(stop, first_slot(seg.stop, size))
            if lo < hi:
                out.append((lo, hi, seg))
        return out

    def _constant_thresholds(self, segment: Segment | None) -> np.ndarray:
        if segment is None:
            return self._thresholds
        found = self._stage_thresholds.get(segment.probs)
        if found is None:
            found = _finite_thresholds(cumulative_probabilities(segment.probs))
            self._stage_thresholds[segment.probs] = found
        return found

    def _ramp_beyond(self, h: np.ndarray, first: int, segment: Segment) -> Iterator[np.ndarray]:
        """For slots ``first + i`` (hashes ``h[i]``) inside a ramp, yields per source ``j`` but
        the last whether each slot's hash is at or above the threshold of source ``j`` of
        its own step (so chooses a source after ``j``), as a ``(steps, slots_per_step)``
        grid of the steps the slots touch (cells outside the slots are arbitrary; the
        buffer is reused). A ramp's weights are >= 0 (``a + (b - a) * x`` with ``a, b >= 0``
        and ``0 <= x < 1`` rounds to >= 0), so running sums and thresholds never decrease
        along the sources: being above threshold ``j`` implies being above all before it."""
        size = self.slots_per_step
        offset = first % size
        step0 = first // size
        steps = np.arange(step0, (first + len(h) - 1) // size + 1, dtype=np.int64)
        probs = segment_probabilities(segment, steps)
        cumulative = probs[:, 0].copy()  # running sums in source order, as the scalar form
        columns = []
        for j in range(1, self.num_sources):
            columns.append(cumulative.copy())
            cumulative += probs[:, j]
        thresholds, never = cumulative_thresholds(np.stack(columns, axis=1))
        grid = np.empty(len(steps) * size, dtype=np.uint64)  # whole steps: no gather needed
        grid[offset : offset + len(h)] = h
        grid = grid.reshape(len(steps), size)
        beyond = np.empty(grid.shape, dtype=bool)
        for j in range(self.num_sources - 1):
            np.greater_equal(grid, thresholds[:, j, None], out=beyond)
            if never[:, j].any():  # a threshold of 2**64: no hash reaches it
                beyond &= ~never[:, j, None]
            yield beyond

    def _ramp_choices(self, h: np.ndarray, first: int, segment: Segment) -> np.ndarray:
        """Sources chosen by slots ``first + i`` with hashes ``h[i]`` inside a ramp."""
        choice = None
        for beyond in self._ramp_beyond(h, first, segment):
            choice = beyond.astype(np.int64) if choice is None else choice + beyond
        offset = first % self.slots_per_step
        return choice.reshape(-1)[offset : offset + len(h)]

    def _count(self, start: int, n: int, z: np.ndarray, tmp: np.ndarray) -> np.ndarray:
        """Per-source counts of slots ``[start, start + n)``; ``n <= len(z)``."""
        counts = np.zeros(self.num_sources, dtype=np.int64)
        if self.num_sources == 1:
            counts[0] = n
            return counts
        h = _hash_slots(self.seed, start, n, z, tmp)
        for lo, hi, segment in self._pieces(start, start + n):
            part = h[lo - start : hi - start]
            if segment is not None and segment.ramp_from is not None:
                offset = lo % self.slots_per_step
                ahead = [len(part)]  # ahead[j]: slots choosing a source >= j
                for beyond in self._ramp_beyond(part, lo, segment):
                    ahead.append(np.count_nonzero(beyond.reshape(-1)[offset : offset + len(part)]))
                ahead.append(0)
                counts -= np.diff(np.array(ahead, dtype=np.int64))
                continue
            mask = np.empty(len(part), dtype=bool)
            below = [0]  # below[j + 1] = #(z < T_j): slots choosing a source <= j
            below += [
                int(np.count_nonzero(np.less(part, t, out=mask)))
                for t in self._constant_thresholds(segment)
            ]
            below += [len(part)] * (self.num_sources - len(below) + 1)  # 2**64s, the last one
            counts += np.diff(np.array(below, dtype=np.int64))
        return counts

    def choices(self, start: int, stop: int) -> np.ndarray:
        """int64 source index of every slot in ``[start, stop)``: :func:`choose_sources`
        with each slot's weights.

        Example:
            >>> SlotMixer(0, (0.5, 0.5)).choices(0, 4).tolist()
            [1, 1, 1, 0]
        """
        start = check_int("start", start)
        stop = check_int("stop", stop, minimum=start)
        if self.probs is not None:
            return choose_sources(self.seed, start, stop, self.cumulative)
        n = stop - start
        out = np.zeros(n, dtype=np.int64)
        if self.num_sources == 1 or n == 0:
            return out
        size = min(n, _CHUNK_SLOTS)
        z, tmp = np.empty(size, np.uint64), np.empty(size, np.uint64)
        for lo in range(start, stop, size):
            m = min(size, stop - lo)
            h = _hash_slots(self.seed, lo, m, z, tmp)
            for a, b, segment in self._pieces(lo, lo + m):
                part = h[a - lo : b - lo]
                if segment.ramp_from is not None:
                    chosen = self._ramp_choices(part, a, segment)
                else:
                    thresholds = self._constant_thresholds(segment)
                    chosen = np.searchsorted(thresholds, part, side="right")
                out[a - start : b - start] = chosen
        return out

    def anchor(self, slot: int, counts: Sequence[int]) -> None:
        """Starts the count cache at ``slot``, whose per-source counts are known (a restore).

        The counts are trusted: a restore checks them by recomputing the last batch before
        ``slot``, whose rows depend on them. Counts the cache already holds are compared.

        Raises:
            ValueError: ``counts`` has the wrong length or does not sum to ``slot``, or the
              cache already holds other counts for ``slot``.
        """
        slot = check_int("slot", slot)
        known = np.array([check_int("counts", c) for c in counts], dtype=np.int64)
        if known.shape != (self.num_sources,) or int(known.sum()) != slot:
            raise ValueError(
                f"counts must give one count per source ({self.num_sources}) summing to the "
                f"slot {slot}; got {known.tolist()}"
            )
        block = slot // BLOCK_SLOTS
        with self._lock:
            at_block = known - self._count_range(block * BLOCK_SLOTS, slot)
            cached = self._base <= block < self._base + self._prefix.shape[0]
            # negative: fewer occurrences than the hash chose since the block's start
            if (at_block < 0).any() or (
                cached and not np.array_equal(self._prefix[block - self._base], at_block)
            ):
                raise ValueError(
                    f"counts {known.tolist()} at slot {slot} disagree with the slot hash; "
                    "the state is corrupt or from another mixture"
                )
            if cached:
                return
            self._base, self._prefix = block, at_block[None, :]
            self._memo = (slot, known)

    def _ensure_blocks(self, num_blocks: int) -> None:
        if num_blocks < self._base + self._prefix.shape[0]:
            return
        with self._lock:
            self._extend(num_blocks)

    def _extend(self, num_blocks: int) -> None:
        have = self._base + self._prefix.shape[0] - 1
        if num_blocks <= have:
            return
        new = np.empty((num_blocks - have, self.num_sources), dtype=np.int64)

        def fill(lo: int, hi: int) -> None:
            z, tmp = np.empty(BLOCK_SLOTS, np.uint64), np.empty(BLOCK_SLOTS, np.uint64)
            for i in range(lo, hi):
                new[i] = self._count((have + i) * BLOCK_SLOTS, BLOCK_SLOTS, z, tmp)

        # numpy releases the GIL in the hash: two threads take 10**8 slots from 0.17 s to
        # 0.11 s on 2 cores. Only worth it for long extensions (resume far into a run).
        workers = min(2, os.cpu_count() or 1) if len(new) >= _THREADED_BLOCKS else 1
        if workers == 1:
            fill(0, len(new))
        else:
            cuts = [len(new) * k // workers for k in range(workers + 1)]
            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(fill, cuts[:-1], cuts[1:]))
        np.cumsum(new, axis=0, out=new)
        new += self._prefix[-1]
        self._prefix = np.concatenate([self._prefix, new])

    def _count_range(self, start: int, stop: int) -> np.ndarray:
        counts = np.zeros(self.num_sources, dtype=np.int64)
        if stop <= start:
            return counts
        size = min(stop - start, _CHUNK_SLOTS)
        z, tmp = np.empty(size, np.uint64), np.empty(size, np.uint64)
        for lo in range(start, stop, size):
            counts += self._count(lo, min(size, stop - lo), z, tmp)
        return counts

    def check_cost(self, slot: int) -> None:
        """Raises ``ValueError`` (stating the cost) if counting the slots before ``slot`` is
        refused: more than ``MAX_SLOTS`` of them to hash with several sources, from 0 or from
        the last block the count cache holds (a stream counts as it goes: never refused)."""
        first, known = self._base, self._base + self._prefix.shape[0] - 1
        counted = slot - known * BLOCK_SLOTS if slot >= first * BLOCK_SLOTS else slot
        if self.num_sources > 1 and counted > MAX_SLOTS:
            raise ValueError(
                f"counting which of {self.num_sources} sources each of the {counted:,} slots "
                f"before slot {slot:,} chose hashes every one of them: about "
                f"{counted / 5e8:,.0f} s and "
                f"{slot // BLOCK_SLOTS * self.num_sources * 8 / 2**20:,.0f} MiB; grainpack "
                f"refuses more than MAX_SLOTS={MAX_SLOTS:,} slots (a run of 10**13 tokens at "
                "global batch 1024 has ~5e9). Check the step (a corrupt checkpoint state?)"
            )

    def counts_before(self, slot: int) -> np.ndarray:
        """int64 ``(num_sources,)``: how many slots ``< slot`` chose each source.

        Raises:
            ValueError: ``slot > MAX_SLOTS`` with several sources (the message states the cost).
        """
        slot = check_int("slot", slot)
        if self.num_sources == 1:
            return np.array([slot], dtype=np.int64)
        self.check_cost(slot)
        block = slot // BLOCK_SLOTS
        if block < self._base:  # before an anchor: count back from it when close
            if (self._base - block) * BLOCK_SLOTS <= _BACK_SLOTS:
                end = self._base * BLOCK_SLOTS
                return self._prefix[0] - self._count_range(slot, end)
            with self._lock:
                self._base, self._prefix = 0, np.zeros((1, self.num_sources), dtype=np.int64)
        self._ensure_blocks(block)
        base_slot, base = block * BLOCK_SLOTS, self._prefix[block - self._base]
        memo = self._memo
        if memo is not None and base_slot <= memo[0] <= slot:
            base_slot, base = memo
        counts = base + self._count_range(base_slot, slot)
        self._memo = (slot, counts)
        return counts.copy()

    def counts_between(self, start: int, stop: int) -> np.ndarray:
        """int64 ``(num_sources,)``: how many slots in ``[start, stop)`` chose each source."""
        start = check_int("start", start)
        stop = check_int("stop", stop, minimum=start)
        if self.num_sources == 1:
            return np.array([stop - start], dtype=np.int64)
        cached_slots = (self._base + self._prefix.shape[0] - 1) * BLOCK_SLOTS
        if stop - start <= 4 * BLOCK_SLOTS and stop > cached_slots:
            return self._count_range(start, stop)  # short range past the cache: count directly
        return self.counts_before(stop) - self.counts_before(start)

    def draws(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Source and occurrence index (int64 arrays) of every slot in ``[start, stop)``."""
        start = check_int("start", start)
        stop = check_int("stop", stop, minimum=start)
        if self.num_sources == 1:  # the occurrence is the slot
            return np.zeros(stop - start, np.int64), np.arange(start, stop, dtype=np.int64)
        sources = self.choices(start, stop)
        before = self.counts_before(start)
        occurrences = occurrences_from(sources, before)
        self._memo = (stop, before + np.bincount(sources, minlength=self.num_sources))
        return sources, occurrences


def occurrences_from(sources: np.ndarray, counts_before: np.ndarray) -> np.ndarray:
    """Occurrence index of each slot of a run of choices, given the counts before the run.

    ``occurrence[i] = counts_before[sources[i]] + #{k < i : sources[k] == sources[i]}``.

    Example:
        >>> occurrences_from(np.array([0, 1, 0, 0]), np.array([5, 2])).tolist()
        [5, 2, 6, 7]
    """
    sources = np.asarray(sources, dtype=np.int64)
    out = np.empty(sources.shape[0], dtype=np.int64)
    for j, before in enumerate(np.asarray(counts_before, dtype=np.int64).tolist()):
        idx = np.flatnonzero(sources == j)
        out[idx] = before + np.arange(idx.size, dtype=np.int64)
    return out
