"""Mixture accounting, telemetry and repeat caps against brute-force counts."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import grainpack as gp


@pytest.fixture
def paths(tmp_path):
    rng = np.random.default_rng(3)
    docs = lambda n, hi: [rng.integers(1, 500, size=rng.integers(1, hi)) for _ in range(n)]  # noqa: E731
    gp.write_corpus(tmp_path / "big", docs(60, 40))
    gp.write_corpus(tmp_path / "small", docs(6, 15))
    return {"big": str(tmp_path / "big"), "small": str(tmp_path / "small")}


def real_tokens_per_row(batch):
    # a row's real tokens: real inputs plus its last target when that one is real
    return (batch["segment_ids"] > 0).sum(axis=1) + batch["loss_mask"][:, -1]


@pytest.mark.parametrize("unit", ["documents", "windows"])
@pytest.mark.parametrize("weights", [None, {"big": 0.9, "small": 0.1}])
@pytest.mark.parametrize("count", [1, 2])
def test_accounting_equals_brute_force_count(paths, unit, weights, count):
    cfg = gp.PipelineConfig(
        sources=paths,
        block=8,
        global_batch_size=4,
        seed=5,
        unit=unit,
        weights=weights,
        provenance=True,
    )
    iterators = [
        iter(gp.make_dataset(cfg, process_index=p, process_count=count)) for p in range(count)
    ]
    rows = {"big": 0, "small": 0}
    real = {"big": 0, "small": 0}
    last_epoch = {"big": 0, "small": 0}
    for step in range(1, 31):
        for it in iterators:
            batch = next(it)
            per_row = real_tokens_per_row(batch)
            for r, j in enumerate(batch["source"].tolist()):
                name = list(paths)[j]
                rows[name] += 1
                real[name] += int(per_row[r])
                last_epoch[name] = int(batch["epoch"][r])
        if step % 10:
            continue
        accounts = gp.mixture_accounting(cfg, step)
        for name, acc in accounts.items():
            assert acc.rows == rows[name]
            assert acc.tokens == rows[name] * 9
            assert acc.real_tokens == real[name]
            assert acc.epoch >= last_epoch[name]
            assert acc.realized_share == rows[name] / (4 * step)
        assert accounts["small"].repeats > 0  # the small source was repeated


def test_accounting_survives_save_restore(paths):
    cfg = gp.PipelineConfig(sources=paths, block=8, global_batch_size=4, seed=1)
    it = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    for _ in range(7):
        next(it)
    state = it.get_state()
    fresh = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    fresh.set_state(state)
    assert gp.mixture_accounting(cfg, fresh.step) == gp.mixture_accounting(cfg, 7)


def test_accounting_golden_single_source(tmp_path):
    gp.write_corpus(tmp_path / "c", [list(range(1, 10))] * 2)  # 18 tokens -> 4 rows of 5
    cfg = gp.PipelineConfig(sources={"c": str(tmp_path / "c")}, block=4, global_batch_size=2)
    acc = gp.mixture_accounting(cfg, 3)["c"]  # 6 rows: epoch 0 (18 real) + 2 rows (10 real)
    assert (acc.rows, acc.tokens, acc.real_tokens) == (6, 30, 28)
    assert (acc.epoch, acc.epoch_fraction, acc.repeats, acc.epochs) == (1, 0.5, 1, 1.5)


def test_monitor_flags_starved_source(paths):
    cfg = gp.PipelineConfig(
        sources=paths, block=8, global_batch_size=4, weights={"big": 1 - 1e-7, "small": 1e-7}
    )
    with pytest.warns(gp.MixtureWarning, match="'small' is starved"):
        monitor = gp.MixtureMonitor(cfg, window_steps=100)
    assert monitor.starved == ["small"]


def test_monitor_repeat_cap_warns_or_raises(paths):
    cfg = gp.PipelineConfig(sources=paths, block=8, global_batch_size=4, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        monitor = gp.MixtureMonitor(cfg, window_steps=10, max_repeats=1)
        report = monitor.check(2)
    assert set(report) == {"big", "small"}
    assert abs(sum(r["window_share"] for r in report.values()) - 1) < 1e-12
    with pytest.warns(gp.MixtureWarning) as caught:
        monitor.check(200)
    repeated = sorted(str(w.message).split("'")[1] for w in caught)
    assert repeated == ["big", "small"]  # both sources passed the cap by step 200
    strict = gp.MixtureMonitor(cfg, window_steps=10, max_repeats=1, hard_cap=True)
    with pytest.raises(gp.RepeatCapExceeded, match="max_repeats=1"):
        strict.check(200)


def test_window_shares_match_counts(paths):
    cfg = gp.PipelineConfig(
        sources=paths,
        block=8,
        global_batch_size=4,
        weights={"big": 0.75, "small": 0.25},
        provenance=True,
    )
    it = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    sources = np.concatenate([next(it)["source"] for _ in range(50)])
    shares = gp.window_shares(cfg, 20, 50)
    assert shares["small"] == np.mean(sources[80:] == 1)
