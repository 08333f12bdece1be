"""``make_data_loader``'s iterators with Grain workers: closed, they stop their workers and
continue where they were; restored, they continue exactly (the batches of no workers)."""

from __future__ import annotations

import numpy as np
import pytest

import grainpack as gp
from grainpack.pipeline.dataset import batch_digest

# two Grain worker processes start twice (~20 s on 2 loaded cores)
pytestmark = pytest.mark.slow

# batch_digest % 10**6 of the first 6 batches of the config below, without workers
GOLDEN = [553113, 529661, 935656, 712678, 739565, 426067]


def test_a_loader_iterator_with_workers_closes_continues_and_restores(tmp_path):
    rng = np.random.default_rng(11)
    docs = [rng.integers(1, 500, size=rng.integers(1, 40)) for _ in range(60)]
    gp.write_corpus(tmp_path / "c", docs, shard_tokens=300)
    cfg = gp.PipelineConfig(sources={"c": str(tmp_path / "c")}, block=16, global_batch_size=8)
    alone = iter(gp.pipeline.make_data_loader(cfg, process_index=0, process_count=1))
    assert [batch_digest(next(alone)) % 10**6 for _ in range(6)] == GOLDEN
    loader = gp.pipeline.make_data_loader(cfg, process_index=0, process_count=1, worker_count=2)
    it = iter(loader)
    got = [next(it) for _ in range(2)]
    state = it.get_state()
    got.append(next(it))
    it.close()
    it.close()  # twice is once
    got += [next(it) for _ in range(3)]  # its workers start again, where they were
    assert [batch_digest(b) % 10**6 for b in got] == GOLDEN
    it.set_state(state)
    assert [batch_digest(next(it)) % 10**6 for _ in range(4)] == GOLDEN[2:]
    it.close()
