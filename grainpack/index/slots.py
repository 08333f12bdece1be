"""Slots and processes: which global slots a process's batches hold, and back to slot order.

Global batch ``t`` is slots ``[t*B, (t+1)*B)``; process ``p`` of ``P`` holds slots
``t*B + p + k*P`` for ``k < B // P`` (round-robin, as the window loader's ``rank_batch``
and ``shard_documents_for_rank``). This module is the one place that rule is written:
:func:`first_slot` (a step's first slot) and :func:`rows_per_process` (``B // P``, refused
unless ``P`` divides ``B``) are what every other module uses.

Pure: numpy and the standard library only.
"""

from __future__ import annotations

import numpy as np

from grainpack.index.checks import check_int

__all__ = ["first_slot", "process_slots", "rows_per_process", "slot_order"]


def first_slot(step: int, global_batch_size: int) -> int:
    """The first slot of global batch ``step``: ``step * global_batch_size`` (a Python int,
    exact at any size; also the number of slots before the step).

    Example:
      >>> first_slot(3, 8)
      24
    """
    return int(step) * int(global_batch_size)


def rows_per_process(global_batch_size: int, process_count: int) -> int:
    """Rows each process holds of a global batch, ``global_batch_size // process_count``.

    Raises:
      ValueError: ``process_count`` does not divide ``global_batch_size`` (every process
        holds the same number of rows), or either is below 1.
      TypeError: either is not an int.

    Example:
      >>> rows_per_process(8, 4)
      2
    """
    size = check_int("global_batch_size", global_batch_size, minimum=1)
    count = check_int("process_count", process_count, minimum=1)
    if size % count:
        raise ValueError(
            f"global_batch_size={size} is not divisible by process_count={count}: every "
            "process must hold the same number of rows; choose a global batch size that is "
            "a multiple of the process count"
        )
    return size // count


def process_slots(
    step: int, steps: int, global_batch_size: int, process_index: int, process_count: int
) -> np.ndarray:
    """Slots of process ``process_index``'s batches ``[step, step + steps)``, in row order.

    Example:
      >>> process_slots(1, 2, 4, 1, 2).tolist()  # batches 1 and 2, process 1 of 2
      [5, 7, 9, 11]
    """
    per = rows_per_process(global_batch_size, process_count)
    local = process_index + process_count * np.arange(per, dtype=np.int64)
    offsets = global_batch_size * np.arange(steps, dtype=np.int64)[:, None] + local
    return first_slot(step, global_batch_size) + offsets.reshape(-1)


def slot_order(global_batch_size: int, process_count: int) -> np.ndarray:
    """Permutation taking global-array rows (process-major) to slot order.

    ``global_rows[slot_order(B, P)]`` lists the rows of a global batch in slot order. It
    assumes the batch axis of the global array lists processes in order, as a mesh over
    ``jax.devices()`` does (devices sorted by process).

    Args:
      global_batch_size: rows per global batch, ``B``.
      process_count: processes sharing it, ``P`` (``B % P == 0``).

    Returns:
      int64 array of length ``B``.

    Example:
      >>> slot_order(4, 2).tolist()  # rows [p0k0, p0k1, p1k0, p1k1] -> slots 0, 1, 2, 3
      [0, 2, 1, 3]
    """
    per = rows_per_process(global_batch_size, process_count)
    rows = np.arange(global_batch_size, dtype=np.int64)
    return rows.reshape(process_count, per).T.reshape(-1)
