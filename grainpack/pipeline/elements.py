"""Grain elements of the pipeline: plans of many steps, and their expansion into batches.

One Grain element (:class:`PlannedSteps`) is the :class:`~grainpack.index.packed.PackedRows`
of ``steps_per_element`` consecutive per-process batches: row layouts and read tables, index
math, no tokens. :class:`ExpandedBatches` is the consumer: it reads the tokens from its own
memory maps and expands them into model arrays, a group of batches at a time. Worker
processes, when used, only plan: sending tokens between processes costs more than reading
them again from the page cache.
"""

from __future__ import annotations

import collections
import dataclasses
import sys
from typing import Any

import grain
import numpy as np

from grainpack.index.packed import PackedRows
from grainpack.pipeline.batches import PipelineBatches
from grainpack.pipeline.expand import compact_rows, describe_rows, expand_rows
from grainpack.pipeline.gather import RowReader
from grainpack.pipeline.pool import ArrayPool

# Batches whose int32 arrays are smaller than this are read and expanded in groups of about
# this size (numpy's per-call cost would dominate); larger ones one per next(), so that every
# next() costs the same (a group makes one next() in the group pay for all of it).
EXPAND_BYTES = 1 << 16

# A worker sends each plan as one byte buffer (PackedRows.to_element), which Grain moves
# through one shared-memory segment whatever its size.
WORKER_OPTIONS = grain.experimental.DatasetOptions(min_shm_size=1)


def group_rows(batches: PipelineBatches) -> int:
    """Rows read and expanded at once: one batch, or whole batches with int32 arrays of
    about ``EXPAND_BYTES`` when a batch is smaller (amortises numpy's per-call cost while the
    rows are in cache)."""
    rows = batches.rows_per_batch
    return rows * max(1, EXPAND_BYTES // (rows * batches.config.block * 4))


@dataclasses.dataclass(frozen=True)
class PlannedSteps:
    """Grain data source of one process's steps, ``steps_per_element`` per record: record
    ``c`` is the :class:`PackedRows` of steps ``first + c * steps_per_element`` onwards, in
    its byte form (:meth:`PackedRows.to_element`) when ``as_bytes`` (worker processes)."""

    batches: PipelineBatches
    first: int
    process_index: int
    as_bytes: bool

    def __len__(self) -> int:
        return sys.maxsize

    def __getitem__(self, record: int) -> PackedRows | dict[str, Any]:
        steps = self.batches.steps_per_element
        plan = self.batches.packed_steps(
            self.first + record * steps, self.process_index, steps=steps
        )
        return plan.to_element() if self.as_bytes else plan


def _unlink_now(buffer: np.ndarray) -> None:
    """Unlinks the shared-memory segment a worker sent ``buffer`` in, at once: the mapping
    stays valid until the array goes, and no segment is left for Grain's deferred deletion
    (a thread) to miss when the interpreter exits."""
    if getattr(buffer, "_unlink_on_del", False):
        buffer.shm.unlink()
        buffer._unlink_on_del = False


class ExpandedBatches:
    """Consumer side of :class:`PlannedSteps`: reads and expands :func:`group_rows` rows at
    once and yields one batch per ``next`` (in the compact layout, reads one batch at a
    time and adds its rows' description, computed once per plan). A batch's arrays are
    row slices of the group's or the plan's, never shared with another batch."""

    def __init__(self, elements: Any, batches: PipelineBatches) -> None:
        self.elements, self.batches = elements, batches
        self.rows = batches.rows_per_batch
        self.compact = batches.config.layout == "compact"
        self.group = self.rows if self.compact else group_rows(batches)
        self.plan: PackedRows | None = None
        self.reader: RowReader | None = None
        self.described: dict[str, np.ndarray] | None = None
        self.next_row = 0
        self.pending: collections.deque[dict[str, np.ndarray]] = collections.deque()
        # Arrays of 256 rows of 2048 are MBs: fresh ones cost a page fault per 4 KiB.
        self.pool = ArrayPool()

    def __next__(self) -> dict[str, np.ndarray]:
        if not self.pending:
            if self.plan is None or self.next_row == self.plan.num_rows:
                element = next(self.elements)
                shared = not isinstance(element, PackedRows)
                if shared:
                    _unlink_now(element["bytes"])
                    element = PackedRows.from_element(element)
                self.plan, self.next_row = element, 0
                self.reader = self.batches.reader(element)
                if self.compact:
                    block = self.batches.config.block
                    self.described = describe_rows(element, block=block, shared=shared)
            first = self.next_row
            self.next_row = min(first + self.group, self.plan.num_rows)
            tokens = self.reader.read(first, self.next_row, pool=self.pool)
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
        self.pool.clear()
