"""Grain elements: plans travel as one byte buffer; batches are expanded in pairs."""

from __future__ import annotations

import numpy as np

import grainpack as gp
from grainpack.chunks import ExpandedBatches, plan_from_bytes, plan_to_bytes


def test_plan_bytes_round_trip_keeps_dtypes_shapes_and_values():
    plan = {
        "filled": np.array([5, 3], dtype=np.int64),
        "segment": np.array([1, 2, 0], dtype=np.int32),
        "padded": np.zeros(0, dtype=np.int64),
        "segment_document": np.arange(6, dtype=np.int64).reshape(2, 3),
        "source": np.array([0, -1], dtype=np.int32)[::-1],  # not contiguous
    }
    element = plan_to_bytes(plan)
    assert element["bytes"].dtype == np.uint8 and element["bytes"].ndim == 1
    assert [offset % 8 for *_, offset in element["spec"]] == [0] * 5  # aligned views
    back = plan_from_bytes(element)
    assert back.keys() == plan.keys()
    for key in plan:
        assert back[key].dtype == plan[key].dtype and back[key].shape == plan[key].shape
        np.testing.assert_array_equal(back[key], plan[key])
        assert type(back[key]) is np.ndarray


def test_expanded_batches_equal_single_batches_and_share_no_memory(tmp_path):
    rng = np.random.default_rng(5)
    docs = [rng.integers(1, 900, size=rng.integers(1, 40)) for _ in range(60)]
    gp.write_corpus(tmp_path / "c", docs)
    cfg = gp.PipelineConfig(sources={"c": str(tmp_path / "c")}, block=256, global_batch_size=4)
    batches = gp.PipelineBatches(cfg, process_count=1)
    steps = batches.chunk_steps
    plans = iter([batches.packed_steps(0, 0, steps=steps), batches.packed_steps(steps, 0, steps=3)])
    expanded = ExpandedBatches(plans, batches)
    assert expanded.group == 32 * 4  # rows of 32 batches: int32 arrays of 128 KiB
    got = [next(expanded) for _ in range(steps + 3)]
    for step in (0, 1, 31, 32, steps - 1, steps, steps + 2):
        want = batches.batch(step, 0)
        for key in want:
            np.testing.assert_array_equal(got[step][key], want[key])
    assert not np.shares_memory(got[0]["inputs"], got[1]["inputs"])
    got[0]["inputs"][:] = -1  # a batch is the caller's to change
    assert (got[1]["inputs"] != -1).all()
