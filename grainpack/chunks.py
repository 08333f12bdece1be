"""Grain elements of the pipeline: plans of many steps, and their expansion into batches.

A :class:`PlannedChunks` record is the plan of ``chunk_steps`` per-process batches (row
layouts and read tables from ``PipelineBatches.packed_steps``; index math, no tokens).
:class:`ExpandedBatches` is the consumer: it reads the tokens from its own memory maps and
expands them into model arrays, two batches at a time. Worker processes, when used, only
plan: sending tokens between processes costs more than reading them again from the page
cache.
"""

from __future__ import annotations

import collections
import dataclasses
import sys
from typing import Any

import grain
import numpy as np

from grainpack.batches import PipelineBatches
from grainpack.rows import RowReader, expand_rows

EXPAND_BYTES = 1 << 17  # size of one int32 output array when batches are expanded together


def group_rows(batches: PipelineBatches) -> int:
    """Rows read and expanded at once: whole batches, int32 arrays of about ``EXPAND_BYTES``
    (amortises numpy's per-call cost while the rows are in cache; larger arrays cost page
    faults in malloc)."""
    rows = batches.config.global_batch_size // batches.process_count
    return rows * max(1, EXPAND_BYTES // (rows * batches.config.block * 4))


# A worker sends each plan as one byte buffer, which Grain moves through one shared-memory
# segment: a pickled element larger than a pipe's buffer blocks the worker's exit (close()
# then waits 25 s), and a segment per array costs more than the plan's other work.
WORKER_OPTIONS = grain.experimental.DatasetOptions(min_shm_size=1)


def plan_to_bytes(plan: dict[str, np.ndarray]) -> dict[str, Any]:
    """A plan's arrays as one uint8 buffer and a spec of (key, dtype, shape, offset)."""
    parts, spec, offset = [], [], 0
    for key, array in plan.items():
        array = np.ascontiguousarray(array)
        spec.append((key, array.dtype.str, array.shape, offset))
        parts += [array.reshape(-1).view(np.uint8), np.zeros(-array.nbytes % 8, np.uint8)]
        offset += array.nbytes + len(parts[-1])
    return {"bytes": np.concatenate(parts or [np.zeros(0, np.uint8)]), "spec": tuple(spec)}


def plan_from_bytes(element: dict[str, Any]) -> dict[str, np.ndarray]:
    # A plain ndarray view: slices of Grain's shared-memory array subclass run Python hooks
    # (several microseconds a batch).
    data = np.asarray(element["bytes"])
    return {
        key: data[offset : offset + np.dtype(dtype).itemsize * int(np.prod(shape))]
        .view(dtype)
        .reshape(shape)
        for key, dtype, shape, offset in element["spec"]
    }


@dataclasses.dataclass(frozen=True)
class PlannedChunks:
    """Grain data source of one process's steps, ``chunk_steps`` per record: record ``c``
    is the plan (row layout and read table, no tokens) of steps ``first + c * chunk_steps``
    onwards; ``as_bytes`` for worker processes (:func:`plan_to_bytes`)."""

    batches: PipelineBatches
    first: int
    process_index: int
    as_bytes: bool

    def __len__(self) -> int:
        return sys.maxsize

    def __getitem__(self, record: int) -> dict[str, Any]:
        steps = self.batches.chunk_steps
        plan = self.batches.packed_steps(
            self.first + record * steps, self.process_index, steps=steps
        )
        return plan_to_bytes(plan) if self.as_bytes else plan


class ExpandedBatches:
    """Consumer side of :class:`PlannedChunks`: reads and expands :func:`group_rows` rows at
    once and yields one batch per ``next``. A batch's arrays are row slices of the group's,
    never shared with another batch."""

    def __init__(self, chunks: Any, batches: PipelineBatches) -> None:
        self.chunks, self.batches = chunks, batches
        self.rows = batches.config.global_batch_size // batches.process_count
        self.group = group_rows(batches)
        self.chunk: dict[str, np.ndarray] = {"filled": np.zeros(0)}
        self.reader: RowReader | None = None
        self.next_row = 0
        self.pending: collections.deque[dict[str, np.ndarray]] = collections.deque()

    def __next__(self) -> dict[str, np.ndarray]:
        if not self.pending:
            if self.next_row == len(self.chunk["filled"]):
                chunk, self.next_row = next(self.chunks), 0
                self.chunk = plan_from_bytes(chunk) if "spec" in chunk else chunk
                self.reader = self.batches.reader(self.chunk)
            first = self.next_row
            self.next_row = min(first + self.group, len(self.chunk["filled"]))
            arrays = expand_rows(self.chunk, self.reader.read(first, self.next_row), first=first)
            if self.next_row - first == self.rows:
                return arrays
            self.pending.extend(
                {k: v[i : i + self.rows] for k, v in arrays.items()}
                for i in range(0, self.next_row - first, self.rows)
            )
        return self.pending.popleft()

    def start_prefetch(self) -> None:
        self.chunks.start_prefetch()

    def close(self) -> None:
        self.chunks.close()
