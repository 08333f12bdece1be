"""The demo's rate is the steady state, start-up timed apart (issue 38): with the ``fast``
extra, numba's start-up made the demo report ~8x fewer tokens/s than without it."""

from __future__ import annotations

import math
import time

from grainpack import demo


class _SlowFirstBatch:
    """``make_dataset``'s dataset whose iterator takes ``seconds`` more for its first batch,
    as loading numba's kernels does."""

    def __init__(self, dataset, seconds: float) -> None:
        self.dataset, self.seconds = dataset, seconds

    def __iter__(self):
        return _SlowIterator(iter(self.dataset), self.seconds)


class _SlowIterator:
    def __init__(self, iterator, seconds: float) -> None:
        self.iterator, self.seconds = iterator, seconds

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.iterator.close()

    def __next__(self):
        time.sleep(self.seconds)
        self.seconds = 0
        return next(self.iterator)


def test_the_demo_rate_leaves_out_the_start_up(tmp_path, monkeypatch, capsys):
    make_dataset = demo.make_dataset
    monkeypatch.setattr(
        demo, "make_dataset", lambda *a, **k: _SlowFirstBatch(make_dataset(*a, **k), 0.5)
    )
    result = demo.run_demo(directory=tmp_path, steps=51, block=64, batch_size=4)
    out = capsys.readouterr().out
    assert result["startup_seconds"] >= 0.5
    with_start_up = 50 * 4 * 64 / 0.5  # the rate if the start-up were in it: 25,600 tokens/s
    assert result["tokens_per_second"] > 10 * with_start_up
    assert "tokens/s in steady state (batches 2-51)" in out
    assert f"start-up {result['startup_seconds']:.2f} s, timed apart" in out
    assert result["kernels"] in ("numba", "numpy") and f"{result['kernels']}" in out


def test_one_step_gives_no_steady_state_figure(tmp_path, capsys):
    result = demo.run_demo(directory=tmp_path, steps=1, block=64, batch_size=4)
    assert math.isnan(result["tokens_per_second"]) and result["startup_seconds"] > 0
    assert "no steady-state figure (pass --steps 2 or more)" in capsys.readouterr().out
