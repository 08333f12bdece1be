"""Recycled batch memory: reused only once no view of an array is left (issue 36)."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import grainpack as gp
from grainpack.corpus.pool import ArrayPool
from grainpack.pipeline.batches import PipelineBatches


def test_pool_recycles_a_block_only_when_every_view_is_gone():
    pool = ArrayPool(min_bytes=0)
    a = pool.empty((4, 8), np.int32)
    address = a.ctypes.data
    views = [a[1:], a.T, a.view(np.uint32), memoryview(a[2])]
    del a
    while views:
        assert pool.empty((4, 8), np.int32).ctypes.data != address  # still held: a new block
        views.pop()
    assert pool.empty((4, 8), np.int32).ctypes.data == address


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [
        ((3, 5), np.int32),  # a batch array
        ((7,), np.uint16),  # tokens before their reshape
        ((0, 4), np.int32),  # no rows
    ],
)
def test_pool_arrays_are_writable_c_contiguous_ndarrays(shape, dtype):
    out = ArrayPool(min_bytes=0).empty(shape, dtype)
    assert type(out) is np.ndarray and out.shape == shape and out.dtype == dtype
    assert out.flags.c_contiguous and out.flags.writeable
    out[...] = 1
    assert (out == 1).all()


def test_pool_keeps_at_most_keep_released_blocks_and_small_arrays_bypass_it():
    pool = ArrayPool(min_bytes=64, keep=2)
    held = [pool.empty((16,), np.int32) for _ in range(5)]
    del held
    gc.collect()
    assert [len(v) for v in pool.free.values()] == [2]
    pool.empty((8,), np.int32)  # 32 bytes: np.empty
    assert list(pool.free) == [64]
    pool.clear()
    assert not pool.free


def test_pool_keeps_at_most_keep_bytes_of_released_blocks_in_all():
    pool = ArrayPool(min_bytes=0, keep_bytes=300)
    held = [pool.empty((n,), np.uint8) for n in (100, 100, 200, 50)]
    while held:  # released in order: 100, 100 kept; 200 over the bound: freed; 50 kept
        held.pop(0)
    assert ({size: len(v) for size, v in pool.free.items()}, pool.kept) == (
        {100: 2, 200: 0, 50: 1},
        250,
    )
    again = pool.empty((100,), np.uint8)  # a kept block
    assert (pool.kept, again.size) == (150, 100)
    pool.clear()
    del again  # released after the clear: kept, and counted, in the pool's own lists
    assert ({size: len(v) for size, v in pool.free.items()}, pool.kept) == ({100: 1}, 100)
    assert pool.empty((100,), np.uint8).size == 100 and pool.kept == 0


@pytest.mark.parametrize("layout", ["full", "compact"])
def test_batches_held_by_the_consumer_stay_valid_while_later_ones_are_made(tmp_path, layout):
    rng = np.random.default_rng(0)
    docs = [rng.integers(1, 50_000, size=rng.integers(1, 3000)) for _ in range(200)]
    gp.write_corpus(tmp_path / "c", docs, vocab_size=50_000)
    # 64 rows of 1024: arrays of 256 KiB (int32) and 128 KiB (uint16 tokens, pooled from
    # 256 KiB on: so 128 rows in the compact layout)
    rows = 64 if layout == "full" else 128
    cfg = gp.PipelineConfig(
        sources={"c": str(tmp_path / "c")}, block=1024, global_batch_size=rows, layout=layout
    )
    iterator = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    kept = [next(iterator)["inputs" if layout == "full" else "tokens"][:2] for _ in range(6)]
    owner = kept[0]
    while isinstance(owner, np.ndarray):
        owner = owner.base
    assert type(owner).__name__ == "_Lease"  # pooled memory
    for _ in range(6):  # made while the views above are held, then dropped
        next(iterator)
    batches = PipelineBatches(cfg, process_count=1)
    for step, rows in enumerate(kept):
        expected = batches.batch(step, 0)["inputs" if layout == "full" else "tokens"][:2]
        np.testing.assert_array_equal(rows, expected)
