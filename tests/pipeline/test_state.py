"""IteratorState: the on-disk iterator state as a typed record, both versions."""

from __future__ import annotations

import json

import pytest

import grainpack as gp
from grainpack.pipeline.state import IteratorState, is_pipeline_state, state_check

VERSION_1 = {
    "version": 1,
    "step": 3,
    "process_index": 1,
    "process_count": 2,
    "fingerprint": 2**62 + 5,
    "digest": 77,
}
VERSION_2 = {**VERSION_1, "version": 2, "counts": [4, 8]}


@pytest.mark.parametrize(
    ("saved", "record"),
    [
        (VERSION_1, IteratorState(3, 1, 2, 2**62 + 5, 77)),  # the exact order's
        (VERSION_2, IteratorState(3, 1, 2, 2**62 + 5, 77, counts=(4, 8))),  # the blocked order's
    ],
)
def test_every_version_reads_and_writes_back_the_same_json(saved, record):
    assert IteratorState.from_dict(saved) == record
    assert record.version == saved["version"]
    # same keys in the same order, and the check value (which older states lack) last
    assert json.dumps(record.to_dict()) == json.dumps({**saved, "check": state_check(saved)})
    assert is_pipeline_state(saved)


def test_a_state_of_a_pipeline_round_trips(tmp_path):
    sources = {}
    for name in ("en", "fr"):
        sources[name] = str(tmp_path / name)
        gp.write_corpus(sources[name], [list(range(1, 3 + k)) for k in range(12)])
    for order in ("exact", gp.BlockedOrder(block_docs=4, window_blocks=2)):
        cfg = gp.PipelineConfig(sources=sources, block=8, global_batch_size=4, order=order)
        it = iter(gp.make_dataset(cfg, process_index=0, process_count=2))
        next(it)
        state = it.get_state()
        assert IteratorState.from_dict(state).to_dict() == state
        assert ("counts" in state) == (order != "exact")


@pytest.mark.parametrize(
    ("state", "error", "match"),
    [
        ('{"step": 3}', TypeError, r"set_state takes the dict get_state returned, got str"),
        ({**VERSION_1, "extra": 1}, ValueError, "not a grainpack iterator state: expected keys"),
        ({**VERSION_1, "step": -1}, ValueError, "corrupt grainpack iterator state"),
        ({**VERSION_1, "step": True}, ValueError, "corrupt grainpack iterator state"),
        ({**VERSION_2, "counts": [-1, 2]}, ValueError, r"counts: a list of ints >= 0"),
        ({**VERSION_1, "version": 2}, ValueError, "a version 2 state has 'counts'"),
        ({**VERSION_2, "version": 1}, ValueError, "a version 1 state has no 'counts'"),
        ({**VERSION_1, "version": 0}, ValueError, "iterator state version 0 is not 1"),
        ({**VERSION_2, "counts": [2**62 + 1, 0]}, ValueError, r"pass 2\*\*62 slots"),
    ],
)
def test_from_dict_refuses_what_no_release_wrote(state, error, match):
    with pytest.raises(error, match=match):
        IteratorState.from_dict(state)
