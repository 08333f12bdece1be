"""Grain workers that gather their elements' tokens (issue 36) into a ring of shared-memory
slots that the consumer maps once: an element's plan and tokens arrive as views of a slot,
which is free again once no view is left; with no slot free, the tokens travel as Grain's
own segment; where the shared memory would not fit, workers plan only."""

from __future__ import annotations

import gc
import logging

import numpy as np
import pytest

import grainpack as gp
from grainpack.index.packed import PackedRows
from grainpack.pipeline import elements
from grainpack.pipeline.batches import PipelineBatches
from grainpack.pipeline.elements import PlannedSteps, reads_in_workers


@pytest.fixture(scope="module")
def batches(tmp_path_factory):
    rng = np.random.default_rng(37)
    docs = [rng.integers(1, 60_000, size=rng.integers(1, 50)) for _ in range(300)]
    path = tmp_path_factory.mktemp("gathering") / "c"
    gp.write_corpus(path, docs, shard_tokens=1000)
    cfg = gp.PipelineConfig(sources={"c": str(path)}, block=8, global_batch_size=4, seed=9)
    return PipelineBatches(cfg, process_count=1)


def test_an_element_arrives_as_views_of_a_slot_freed_when_they_go(batches):
    sent = PlannedSteps(batches, 3, 0, as_bytes=True, with_tokens=True)[1]
    assert set(sent) == {"ring", "spec", "dtype"}  # a few numbers through Grain's queue
    flags_name, slot, *_ = sent["ring"]
    ring = elements._RingViews()
    element, tokens = ring.open(sent)
    plan = batches.packed_steps(3 + 512, 0, steps=512)
    assert tokens.shape == (512 * 4, 9) and tokens.dtype == np.uint16
    np.testing.assert_array_equal(tokens, batches.reader(plan).read(0, plan.num_rows))
    got = PackedRows.from_element(element)
    np.testing.assert_array_equal(got.read_start, plan.read_start)
    flags = ring.mapped[flags_name]
    row = tokens[5]  # a batch's view keeps the slot
    del element, tokens, got
    gc.collect()
    assert flags[slot] == 1
    del row
    gc.collect()
    assert flags[slot] == 0
    again = PlannedSteps(batches, 3, 0, as_bytes=True, with_tokens=True)[1]
    assert again["ring"][1:3] == (slot, sent["ring"][2])  # the same slot and file, reused


def test_with_no_slot_free_the_tokens_travel_as_a_grain_segment(batches, monkeypatch):
    ring = elements._ring()
    monkeypatch.setattr(ring, "flags", np.ones_like(ring.flags))  # every slot held
    sent = PlannedSteps(batches, 0, 0, as_bytes=True, with_tokens=True)[0]
    assert set(sent) == {"bytes", "spec", "tokens"}
    plan = batches.packed_steps(0, 0, steps=512)
    np.testing.assert_array_equal(sent["tokens"], batches.reader(plan).read(0, plan.num_rows))


def test_workers_plan_only_where_their_shared_memory_does_not_fit(batches, monkeypatch, caplog):
    assert reads_in_workers(batches, workers=2, buffer=2)
    monkeypatch.setattr(elements._Ring, "SLOTS", 10**12)  # petabytes of slots
    with caplog.at_level(logging.WARNING, logger="grainpack.pipeline.elements"):
        assert not reads_in_workers(batches, workers=2, buffer=2)
    assert "Grain workers plan only and this process reads the tokens" in caplog.text


def test_workers_plan_only_without_a_shared_memory_folder(batches, monkeypatch, tmp_path):
    monkeypatch.setattr(elements, "SHM_FOLDER", str(tmp_path / "none"))  # as on macOS
    assert not reads_in_workers(batches, workers=2, buffer=2)
