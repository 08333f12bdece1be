"""Batches with Grain workers are those of no workers, in both layouts, across Grain
elements (the first element of each of two workers, and a third)."""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest

import grainpack as gp
from grainpack.pipeline.batches import PipelineBatches


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    rng = np.random.default_rng(36)
    docs = [rng.integers(1, 60_000, size=rng.integers(1, 50)) for _ in range(300)]
    path = tmp_path_factory.mktemp("workers") / "c"
    gp.write_corpus(path, docs, shard_tokens=1000)
    return gp.PipelineConfig(
        sources={"c": str(path)}, block=8, global_batch_size=4, seed=9, boundary_id=0
    )


def _digest(batches) -> str:
    h = hashlib.sha256()
    for batch in batches:
        for key in sorted(batch):
            h.update(key.encode() + np.ascontiguousarray(batch[key]).tobytes())
    return h.hexdigest()[:16]


# sha256 of 1,100 batches of process 1 of 2 (512 steps a Grain element), keys sorted
GOLDEN = {"full": "a1d14ede8e5b1a0d", "compact": "9248351b24b0b42c"}


@pytest.mark.slow  # two workers start per layout (~5 s on 2 cores)
@pytest.mark.parametrize("layout", ["full", "compact"])
def test_two_workers_give_the_batches_of_none_across_elements(config, layout):
    cfg = dataclasses.replace(config, layout=layout)
    assert PipelineBatches(cfg, process_count=2).steps_per_element == 512
    alone = iter(gp.make_dataset(cfg, process_index=1, process_count=2))
    want = _digest(next(alone) for _ in range(1100))
    with iter(gp.make_dataset(cfg, process_index=1, process_count=2, worker_count=2)) as it:
        got = _digest(next(it) for _ in range(1100))
    assert (got, want) == (GOLDEN[layout], GOLDEN[layout])
