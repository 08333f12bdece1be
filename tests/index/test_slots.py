"""grainpack.index.slots: the slot -> process rule and its inverse."""

from __future__ import annotations

import numpy as np
import pytest

import grainpack as gp
from grainpack.index.slots import process_slots


def test_process_slots_golden():
    # B=6, P=3: process 2 holds slots t*6 + 2 + 3k, k in {0, 1}
    assert process_slots(0, 1, 6, 2, 3).tolist() == [2, 5]
    assert process_slots(4, 3, 6, 2, 3).tolist() == [26, 29, 32, 35, 38, 41]


def test_process_slots_partition_every_global_batch():
    for size, count in ((8, 1), (8, 2), (8, 4), (12, 3)):
        slots = np.concatenate([process_slots(5, 2, size, p, count) for p in range(count)])
        assert sorted(slots.tolist()) == list(range(5 * size, 7 * size))


def test_slot_order_inverts_process_slots():
    size, count = 12, 4
    rows = np.concatenate([process_slots(0, 1, size, p, count) for p in range(count)])
    assert rows[gp.index.slot_order(size, count)].tolist() == list(range(size))


def test_slot_order_rejects_bad_sizes():
    with pytest.raises(ValueError, match="global_batch_size=6 is not divisible by process_count=4"):
        gp.index.slot_order(6, 4)
    with pytest.raises(ValueError, match="process_count must be >= 1, got process_count=0"):
        gp.index.slot_order(4, 0)
    with pytest.raises(TypeError, match=r"global_batch_size must be an int, got 4\.0 of type"):
        gp.index.slot_order(4.0, 2)
    with pytest.raises(ValueError, match="not divisible"):
        process_slots(0, 1, 6, 0, 4)


def test_first_slot_and_rows_per_process():
    from grainpack.index.slots import first_slot, rows_per_process

    assert first_slot(3, 8) == 24 and first_slot(2**40, 2**22) == 2**62  # Python ints: exact
    assert type(first_slot(np.int64(3), np.int64(8))) is int
    assert rows_per_process(12, 4) == 3
    with pytest.raises(ValueError, match="global_batch_size=6 is not divisible by process_count"):
        rows_per_process(6, 4)
