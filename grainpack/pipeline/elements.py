"""Grain elements of the pipeline: plans of many steps, and their expansion into batches.

One Grain element (:class:`PlannedSteps`) is the :class:`~grainpack.index.packed.PackedRows`
of ``steps_per_element`` consecutive per-process batches: row layouts and read tables, index
math. :class:`ExpandedBatches` is the consumer: in process, it reads the tokens from its own
memory maps and expands them into model arrays, a group of batches at a time.

With Grain workers, a worker also gathers the element's tokens (``with_tokens``), so that
the consuming process, which workers do not multiply, does not read. The plan and the
tokens go into a slot of the worker's ring of shared-memory files (:class:`_Ring`), which
the consumer maps once (:class:`_RingViews`): through Grain passes only the slot's
description, and the consumer's batches are views of the slot (compact rows, no copy) or
expanded from it (the full layout), and the slot is free again once no view of it is left.
Fresh segments per element, as Grain sends arrays, cost the consumer a page fault per 4 KiB
and their unmapping, as much as reading the tokens itself (``docs/performance.md``).
Expanding in the consumer costs less than receiving the expanded arrays, 20 bytes a token
(five int32 arrays) against 2 to 4. Workers plan only when a source is on object storage:
its reads stay in the consumer, whose staging threads read ahead in step order
(:mod:`grainpack.corpus.staging`).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import mmap
import multiprocessing.util
import os
import secrets
import sys
import weakref
from multiprocessing import resource_tracker
from typing import Any

import grain
import numpy as np
from grain._src.python.ipc.shared_memory_array import SharedMemoryArray

from grainpack.corpus.pool import ArrayPool
from grainpack.corpus.staging import StagedReader
from grainpack.index.packed import PackedRows
from grainpack.pipeline.batches import CheckedReader, PipelineBatches
from grainpack.pipeline.expand import compact_rows, describe_rows, expand_rows

# Batches whose int32 arrays are smaller than this are read and expanded in groups of about
# this size (numpy's per-call cost would dominate); larger ones one per next(), so that every
# next() costs the same (a group makes one next() in the group pay for all of it).
EXPAND_BYTES = 1 << 16

logger = logging.getLogger(__name__)

SHM_FOLDER = "/dev/shm"  # where Grain's shared memory lives (Linux)

# A worker that plans only sends each plan as one byte buffer (PackedRows.to_element), which
# Grain moves through one shared-memory segment whatever its size (as the tokens of an
# element that found no free slot in the worker's ring).
WORKER_OPTIONS = grain.experimental.DatasetOptions(min_shm_size=1)


def group_rows(batches: PipelineBatches) -> int:
    """Rows read and expanded at once: one batch, or whole batches with int32 arrays of
    about ``EXPAND_BYTES`` when a batch is smaller (amortises numpy's per-call cost while the
    rows are in cache)."""
    rows = batches.rows_per_batch
    return rows * max(1, EXPAND_BYTES // (rows * batches.config.block * 4))


def reads_in_workers(batches: PipelineBatches, *, workers: int, buffer: int) -> bool:
    """Whether ``workers`` Grain workers, each ``buffer`` elements ahead, gather the tokens
    of their elements: unless a source is on object storage (module docstring), or the
    shared memory they would use at most (:class:`_Ring`) does not fit in the free
    space of ``/dev/shm`` (a container's is often 64 MiB) or there is no ``/dev/shm``, where
    they plan only."""
    if any(getattr(source, "remote", False) for source in batches.sources):
        return False
    tokens = batches.steps_per_element * batches.rows_per_batch * (batches.config.block + 1)
    need = workers * (_Ring.SLOTS + buffer + 2) * tokens * 4  # 4: the widest dtype
    try:
        room = os.statvfs(SHM_FOLDER)
    except OSError:  # not Linux: no folder for the ring's files
        return False
    if need > room.f_bavail * room.f_frsize:
        logger.warning(
            "Grain workers plan only and this process reads the tokens: they would send "
            "up to %.0f MiB of tokens through %s, which has %.0f MiB free (enlarge it, e.g. "
            "docker run --shm-size, to have them gather the tokens too)",
            need / 2**20,
            SHM_FOLDER,
            room.f_bavail * room.f_frsize / 2**20,
        )
        return False
    return True


@dataclasses.dataclass(frozen=True)
class PlannedSteps:
    """Grain data source of one process's steps, ``steps_per_element`` per record: record
    ``c`` is the :class:`PackedRows` of steps ``first + c * steps_per_element`` onwards, in
    its byte form (:meth:`PackedRows.to_element`) when ``as_bytes`` (worker processes), and
    with its rows' tokens, read where the record is made, when ``with_tokens`` (both in a
    slot of this process's :class:`_Ring`). With ``short_head``, record 0 is step ``first``
    alone and the others follow it: a source on object storage then plans (and fetches the
    offsets and tokens of) no later step before the first batch."""

    batches: PipelineBatches
    first: int
    process_index: int
    as_bytes: bool
    with_tokens: bool = False
    short_head: bool = False

    def __len__(self) -> int:
        return sys.maxsize

    def __getitem__(self, record: int) -> PackedRows | dict[str, Any]:
        steps = self.batches.steps_per_element
        head = 1 if self.short_head else steps  # the steps of record 0
        start = self.first + (record and head + (record - 1) * steps)
        plan = self.batches.packed_steps(start, self.process_index, steps=steps if record else head)
        if not self.as_bytes:
            return plan
        element = plan.to_element()
        if self.with_tokens:
            return _ring().pack(element, self.batches.reader(plan), plan.num_rows)
        return element


class _Ring:
    """A worker's segments of shared memory for its elements' tokens, reused: the consumer
    maps each once and marks a slot free in the shared ``flags`` when the last view of its
    element is gone (:class:`_RingViews`), so receiving an element costs it neither a page
    fault nor an unmapping. The worker owns the files (registered with the resource
    tracker, unlinked when it exits). With no slot free (a consumer that keeps many
    batches), a segment of Grain's own is sent instead, so nothing waits."""

    SLOTS = 12

    def __init__(self) -> None:
        self.names: list[str] = []  # every file created, unlinked at exit
        self.flags_name, self.flags = self._create(self.SLOTS)
        self.flags[:] = 0
        self.segments: list[tuple[str, np.ndarray] | None] = [None] * self.SLOTS
        multiprocessing.util.Finalize(self, _unlink_all, (self.names,), exitpriority=10)

    def _create(self, size: int) -> tuple[str, np.ndarray]:
        name = f"gp_{os.getpid()}_{secrets.token_hex(6)}"
        fd = os.open(os.path.join(SHM_FOLDER, name), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, size)
            mapped = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        resource_tracker.register("/" + name, "shared_memory")
        self.names.append(name)
        return name, np.frombuffer(mapped, np.uint8)

    def pack(self, element: dict[str, Any], reader: Any, rows: int) -> dict[str, Any]:
        """``element`` (a plan's byte form) with the tokens of the first ``rows`` rows of
        ``reader``: both in a free slot, described under ``"ring"`` (a few numbers), or
        the tokens as a ``SharedMemoryArray`` under ``"tokens"`` when no slot is free."""
        free = np.flatnonzero(self.flags == 0)
        if not len(free):
            tokens = reader.read(0, rows)
            element["tokens"] = SharedMemoryArray(tokens.shape, tokens.dtype)
            np.copyto(element["tokens"], tokens)
            return element
        slot = int(free[0])
        plan = element.pop("bytes")
        at = -(-len(plan) // 64) * 64  # the tokens' offset, aligned
        size = at + rows * reader.width * reader.dtype.itemsize
        segment = self.segments[slot]
        if segment is None or len(segment[1]) < size:  # room for plans a quarter larger
            segment = self.segments[slot] = self._create(size + at // 4)
        self.flags[slot] = 1
        name, mapped = segment
        mapped[: len(plan)] = plan
        into = mapped[at:size].view(reader.dtype)
        tokens = reader.read(0, rows, pool=_Into(into))
        if not np.shares_memory(tokens, into):  # joined, not gathered: no pool
            into[:] = tokens.reshape(-1)
        element["ring"] = (self.flags_name, slot, name, len(plan), at, tokens.shape)
        element["dtype"] = reader.dtype.str
        return element


@dataclasses.dataclass(frozen=True)
class _Into:
    """A pool of one array: the gather writes into ``array``."""

    array: np.ndarray

    def empty(self, shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
        return self.array.reshape(shape)


def _unlink_all(names: list[str]) -> None:
    for name in names:
        try:
            os.unlink(os.path.join(SHM_FOLDER, name))
        except FileNotFoundError:
            continue
        resource_tracker.unregister("/" + name, "shared_memory")


_RING: _Ring | None = None  # a worker's, made at its first element


def _ring() -> _Ring:
    global _RING
    if _RING is None:
        _RING = _Ring()
    return _RING


class _Lease:
    """What a view of a slot's tokens points to (its ``base``): alive while any view is,
    and its death frees the slot (a ``weakref.finalize``)."""

    __slots__ = ("__array_interface__", "__weakref__", "mapped")

    def __init__(self, mapped: np.ndarray, shape: tuple[int, ...], dtype: str) -> None:
        self.mapped = mapped
        self.__array_interface__ = {
            "shape": tuple(shape),
            "typestr": dtype,
            "data": (mapped.ctypes.data, False),
            "version": 3,
        }


class _RingViews:
    """The consumer's side of the workers' :class:`_Ring` s: each file mapped once."""

    def __init__(self) -> None:
        self.mapped: dict[str, np.ndarray] = {}

    def _map(self, name: str) -> np.ndarray:
        mapped = self.mapped.get(name)
        if mapped is None:
            fd = os.open(os.path.join(SHM_FOLDER, name), os.O_RDWR)
            try:
                mapped = np.frombuffer(mmap.mmap(fd, 0), np.uint8)
            finally:
                os.close(fd)
            self.mapped[name] = mapped
        return mapped

    def open(self, element: dict[str, Any]) -> tuple[dict[str, Any], np.ndarray]:
        """A ring element's plan (byte form) and tokens: views of its slot, which is free
        again once no view of either is left."""
        flags_name, slot, name, plan_bytes, at, shape = element["ring"]
        flags, mapped = self._map(flags_name), self._map(name)
        dtype = np.dtype(element["dtype"])
        size = at + int(np.prod(shape)) * dtype.itemsize
        lease = _Lease(mapped, (size,), "|u1")
        weakref.finalize(lease, flags.__setitem__, slot, 0)
        data = np.asarray(lease)
        tokens = data[at:size].view(dtype).reshape(shape)
        return {"bytes": data[:plan_bytes], "spec": element["spec"]}, tokens

    def clear(self) -> None:
        self.mapped.clear()  # views still held keep their maps


@dataclasses.dataclass(frozen=True)
class _Gathered:
    """The reader of an element whose tokens came with it: row slices, no copy."""

    tokens: np.ndarray

    def read(self, first: int, stop: int, *, pool: ArrayPool | None = None) -> np.ndarray:
        return self.tokens[first:stop]


def _unlink_now(buffer: np.ndarray) -> None:
    """Unlinks the shared-memory segment a worker sent ``buffer`` in, at once: the mapping
    stays valid until the array goes, and no segment is left for Grain's deferred deletion
    (a thread) to miss when the interpreter exits."""
    if getattr(buffer, "_unlink_on_del", False):
        buffer.shm.unlink()
        buffer._unlink_on_del = False


# Plans an element on object storage takes early while its rows' pieces are on their way.
PLANS_WHILE_WAITING = 4


@dataclasses.dataclass(frozen=True)
class _Element:
    """An element as :class:`ExpandedBatches` reads it."""

    plan: PackedRows
    reader: CheckedReader | StagedReader | _Gathered
    shared: bool  # from a worker: the plan is a view of Grain's shared memory


class ExpandedBatches:
    """Consumer side of :class:`PlannedSteps`: reads (unless the element brought its tokens)
    and expands :func:`group_rows` rows at once and yields one batch per ``next`` (in the
    compact layout, one batch at a time, with its rows' description, computed once per
    plan). A batch's arrays are row slices of the group's, the plan's or the element's
    tokens, never shared with another batch."""

    def __init__(self, elements: Any, batches: PipelineBatches) -> None:
        self.elements, self.batches = elements, batches
        self.rows = batches.rows_per_batch
        self.compact = batches.config.layout == "compact"
        self.group = self.rows if self.compact else group_rows(batches)
        self.plan: PackedRows | None = None
        self.reader: CheckedReader | StagedReader | _Gathered | None = None
        self.described: dict[str, np.ndarray] | None = None
        self.next_row = 0
        self.pending: collections.deque[dict[str, np.ndarray]] = collections.deque()
        self.upcoming: collections.deque[_Element | Exception] = collections.deque()
        self.plans_read = False
        # Arrays of 256 rows of 2048 are MBs: fresh ones cost a page fault per 4 KiB.
        self.pool = ArrayPool()
        self.ring = _RingViews()

    def _take(self) -> _Element:
        """The next element: its plan, its reader, whether it came from a worker."""
        element = next(self.elements)
        shared = not isinstance(element, PackedRows)
        tokens = element.get("tokens") if shared else None
        if shared and "ring" in element:  # in a slot of a worker's ring
            element, tokens = self.ring.open(element)
        elif shared:
            _unlink_now(element["bytes"])
            if tokens is not None:  # a plain ndarray view, as the plan's
                _unlink_now(tokens)
                tokens = np.asarray(tokens)
        if shared:
            element = PackedRows.from_element(element)
        reader = self.batches.reader(element) if tokens is None else _Gathered(tokens)
        return _Element(element, reader, shared)

    def _stage_ahead(self) -> None:
        """Sources on object storage: starts fetching the next elements' pieces while this
        one's last rows are read, up to ``lookahead_bytes`` past the row being read. Their
        plans are taken from the elements early, at most one a batch (a failure to take
        one is raised where the element is due; none with a schedule that adapts
        online)."""
        budget = self.reader.lookahead - self.reader.bytes_after(self.next_row)
        for element in self.upcoming:
            if budget <= 0 or not isinstance(element, _Element):
                return
            element.reader.prefetch(budget)
            budget -= element.reader.bytes_after(0)
        if budget > 0:  # one more element a batch
            element = self._take_ahead()
            if element is not None and isinstance(element.reader, StagedReader):
                element.reader.prefetch(budget)

    def _take_ahead(self) -> _Element | None:
        """Takes the next element into ``upcoming`` (its reader started), or the error that
        taking it raised (raised when the element is due: ``None``). Takes nothing
        (``None``) when a schedule adapts online: no step is planned before the training
        loop's updates that decide it."""
        if self.batches.adapts_online:
            return None
        try:
            element = self._take()
        except Exception as err:
            self.upcoming.append(err)
            return None
        self.upcoming.append(element)
        if isinstance(element.reader, StagedReader):
            element.reader.start(self.group)
        return element

    def _plan_while_waiting(self, first: int) -> None:
        """Sources on object storage: while the pieces of the rows due are not here yet
        (this step waits for the network anyway), takes the next elements' plans early,
        until ``PLANS_WHILE_WAITING`` wait beyond those being fetched, so that the steps
        which find their pieces here seldom plan (an element's plan costs milliseconds of
        this thread's time, and several times that on a core it shares with the reads)."""
        while not self.reader.ready(first, self.next_row):
            planned = [e for e in self.upcoming if isinstance(e, _Element)]
            if len(planned) < len(self.upcoming):
                return  # a failure to take one, raised when that element is due
            waiting = sum(not getattr(e.reader, "submitted", 1) for e in planned)
            if waiting >= PLANS_WHILE_WAITING or self._take_ahead() is None:
                return

    def __next__(self) -> dict[str, np.ndarray]:
        if not self.pending:
            if self.plan is None or self.next_row == self.plan.num_rows:
                element = self.upcoming.popleft() if self.upcoming else self._take()
                if isinstance(element, BaseException):
                    raise element
                self.plan, self.reader, self.next_row = element.plan, element.reader, 0
                if self.compact:
                    block = self.batches.config.block
                    self.described = describe_rows(element.plan, block=block, shared=element.shared)
            first = self.next_row
            self.next_row = min(first + self.group, self.plan.num_rows)
            if isinstance(self.reader, StagedReader) and self.plans_read:
                self._plan_while_waiting(first)
            tokens = self.reader.read(first, self.next_row, pool=self.pool)
            if isinstance(self.reader, StagedReader) and self.plans_read:
                self._stage_ahead()  # from the second read on: the first batch comes first
            elif not self.plans_read:
                self.plans_read = True
                self.batches.first_batch_served()
            if self.compact:
                return compact_rows(self.plan, tokens, first=first, rows=self.described)
            arrays = expand_rows(self.plan, tokens, first=first, pool=self.pool)
            if self.next_row - first == self.rows:
                return arrays
            self.pending.extend(
                {k: v[i : i + self.rows] for k, v in arrays.items()}
                for i in range(0, self.next_row - first, self.rows)
            )
        return self.pending.popleft()

    def start_prefetch(self) -> None:
        self.elements.start_prefetch()

    def close(self) -> None:
        self.elements.close()
        # Then the current element: with workers it is a view of a shared-memory segment,
        # released (unlinked) when its last reference goes. Dropping it before Grain has
        # stopped its workers made close() wait for them.
        self.plan = self.reader = self.described = None
        self.pending.clear()
        self.upcoming.clear()
        self.pool.clear()
        self.ring.clear()
