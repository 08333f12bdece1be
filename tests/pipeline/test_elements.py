"""Grain elements: plans travel as one byte buffer; batches are expanded in pairs."""

from __future__ import annotations

import numpy as np

import grainpack as gp
from grainpack.index.packed import PackedRows, Provenance
from grainpack.pipeline.batches import PipelineBatches
from grainpack.pipeline.elements import ExpandedBatches, group_rows


def test_plan_bytes_round_trip_keeps_dtypes_shapes_and_values():
    arrays = {
        "filled": np.array([5, 3], dtype=np.int64),
        "start": np.array([0, 2], dtype=np.int32)[::-1],  # not contiguous
        "count": np.array([2, 7], dtype=np.intp),
        "segment": np.array([1, 2, 0], dtype=np.int32),
        "row_piece": np.array([0, 1, 2], dtype=np.int64),
        "padded": np.zeros(0, dtype=np.int64),
        "read_source": np.array([0, -1], dtype=np.int32),
        "read_shard": np.array([0, 0], dtype=np.int32),
        "read_start": np.array([1, 0], dtype=np.int64),
        "read_stop": np.array([5, 1], dtype=np.int64),
        "read_marks": np.array([3], dtype=np.int64),
    }
    provenance = Provenance(
        source=np.array([0, -1], dtype=np.int32),
        epoch=np.array([4, -1], dtype=np.int64),
        segment_slot=np.array([0, 1, 3], dtype=np.int64),
        segment_document=np.array([7, 8, 9], dtype=np.int64),
        segment_offset=np.array([5, 0, 2], dtype=np.int64),
    )
    compact = {**arrays, **dict.fromkeys(("start", "count", "segment", "row_piece", "padded"))}
    compact["segment_starts"] = np.array([[128, 0], [160, 1]], dtype=np.uint8)
    plans = (
        PackedRows(**arrays),
        PackedRows(**arrays, provenance=provenance),
        PackedRows(**compact, provenance=provenance),
    )
    for plan in plans:
        element = plan.to_element()
        assert element["bytes"].dtype == np.uint8 and element["bytes"].ndim == 1
        assert all(offset % 8 == 0 for *_, offset in element["spec"])  # aligned views
        back = PackedRows.from_element(element)
        assert (back.provenance is None) == (plan.provenance is None)
        pairs = [
            (getattr(back, k), getattr(plan, k))
            for k in [*arrays, "segment_starts"]
            if getattr(plan, k) is not None or getattr(back, k) is not None
        ]
        if plan.provenance is not None:
            pairs += [
                (getattr(back.provenance, k), getattr(provenance, k))
                for k in ("source", "epoch", "segment_slot", "segment_document", "segment_offset")
            ]
        for got, want in pairs:
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
            assert type(got) is np.ndarray


def test_expanded_batches_equal_single_batches_and_share_no_memory(tmp_path):
    rng = np.random.default_rng(5)
    docs = [rng.integers(1, 900, size=rng.integers(1, 40)) for _ in range(60)]
    gp.write_corpus(tmp_path / "c", docs)
    cfg = gp.PipelineConfig(sources={"c": str(tmp_path / "c")}, block=256, global_batch_size=4)
    batches = PipelineBatches(cfg, process_count=1)
    steps = batches.steps_per_element
    plans = iter([batches.packed_steps(0, 0, steps=steps), batches.packed_steps(steps, 0, steps=3)])
    expanded = ExpandedBatches(plans, batches)
    assert expanded.group == 16 * 4  # rows of 16 batches: int32 arrays of 64 KiB
    got = [next(expanded) for _ in range(steps + 3)]
    for step in (0, 1, 15, 16, steps - 1, steps, steps + 2):
        want = batches.batch(step, 0)
        for key in want:
            np.testing.assert_array_equal(got[step][key], want[key])
    assert not np.shares_memory(got[0]["inputs"], got[1]["inputs"])
    got[0]["inputs"][:] = -1  # a batch is the caller's to change
    assert (got[1]["inputs"] != -1).all()


def test_batches_of_64_kib_arrays_are_expanded_one_per_next_smaller_ones_in_groups(tmp_path):
    gp.write_corpus(tmp_path / "c", [np.arange(1, 3000)] * 4)
    for block, batch, group in ((2048, 8, 8), (1024, 16, 16), (1024, 8, 16), (256, 4, 64)):
        cfg = gp.PipelineConfig(
            sources={"c": str(tmp_path / "c")}, block=block, global_batch_size=batch
        )
        assert group_rows(PipelineBatches(cfg, process_count=1)) == group


def test_a_workers_segment_is_unlinked_on_arrival_and_stays_readable():
    import os

    from grain._src.python.ipc.shared_memory_array import SharedMemoryArray

    from grainpack.pipeline.elements import _unlink_now

    sent = SharedMemoryArray((16,), np.uint8)
    sent[:] = np.arange(16)
    received = SharedMemoryArray.from_metadata(sent.metadata)
    received.unlink_on_del()  # as Grain marks what reaches the main process
    path = f"/dev/shm/{received.shm.name.lstrip('/')}"
    assert os.path.exists(path)
    _unlink_now(received)
    assert not os.path.exists(path)
    assert received.tolist() == list(range(16))
    del sent, received  # closing later finds nothing left to unlink (no error)
