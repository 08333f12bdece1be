"""Mixture accounting, telemetry and repeat caps against brute-force counts."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import grainpack as gp


@pytest.fixture(scope="session")
def paths(tmp_path_factory):
    root = tmp_path_factory.mktemp("paths")  # read-only: shared by the tests
    rng = np.random.default_rng(3)
    docs = lambda n, hi: [rng.integers(1, 500, size=rng.integers(1, hi)) for _ in range(n)]  # noqa: E731
    gp.write_corpus(root / "big", docs(60, 40))
    gp.write_corpus(root / "small", docs(6, 15))
    return {"big": str(root / "big"), "small": str(root / "small")}


def real_tokens_per_row(batch):
    # a row's real tokens: real inputs plus its last target when that one is real
    return (batch["segment_ids"] > 0).sum(axis=1) + batch["loss_mask"][:, -1]


def counted(paths, weights, unit, count, steps):
    """The config (provenance on) and, per step 1..``steps``, what its batches on ``count``
    processes hold, counted from provenance: ``(step, rows, real, taken, last_epoch)``,
    cumulative rows and real tokens per source, this step's rows and the last epoch seen."""
    cfg = gp.PipelineConfig(
        sources=paths,
        block=8,
        global_batch_size=4,
        seed=5,
        unit=unit,
        weights=weights,
        provenance=True,
    )

    def steps_counted():
        iterators = [
            iter(gp.make_dataset(cfg, process_index=p, process_count=count)) for p in range(count)
        ]
        rows, real, last_epoch = (dict.fromkeys(paths, 0) for _ in range(3))
        for step in range(1, steps + 1):
            taken = dict.fromkeys(paths, 0)
            for it in iterators:
                batch = next(it)
                per_row = real_tokens_per_row(batch)
                for r, j in enumerate(batch["source"].tolist()):
                    name = list(paths)[j]
                    rows[name] += 1
                    taken[name] += 1
                    real[name] += int(per_row[r])
                    last_epoch[name] = int(batch["epoch"][r])
            yield step, rows, real, taken, last_epoch

    return cfg, steps_counted()


@pytest.mark.parametrize("unit", ["documents", "windows"])
@pytest.mark.parametrize("weights", [None, {"big": 0.9, "small": 0.1}])
@pytest.mark.parametrize("count", [1, 2])
def test_accounting_equals_brute_force_count(paths, unit, weights, count):
    cfg, steps = counted(paths, weights, unit, count, 30)
    for step, rows, real, _, last_epoch in steps:
        if step % 10:
            continue
        accounts = gp.mixing.mixture_accounting(cfg, step)
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
    assert gp.mixing.mixture_accounting(cfg, fresh.step) == gp.mixing.mixture_accounting(cfg, 7)


def test_accounting_golden_single_source(tmp_path):
    gp.write_corpus(tmp_path / "c", [list(range(1, 10))] * 2)  # 18 tokens -> 4 rows of 5
    cfg = gp.PipelineConfig(sources={"c": str(tmp_path / "c")}, block=4, global_batch_size=2)
    acc = gp.mixing.mixture_accounting(cfg, 3)["c"]  # 6 rows: epoch 0 (18 real) + 2 rows (10 real)
    assert (acc.rows, acc.tokens, acc.real_tokens) == (6, 30, 28)
    assert (acc.epoch, acc.epoch_fraction, acc.repeats, acc.epochs) == (1, 0.5, 1, 1.5)


def test_monitor_flags_starved_source(paths):
    cfg = gp.PipelineConfig(
        sources=paths, block=8, global_batch_size=4, weights={"big": 1 - 1e-7, "small": 1e-7}
    )
    with pytest.warns(gp.mixing.MixtureWarning, match="'small' is starved"):
        monitor = gp.mixing.MixtureMonitor(cfg, window_steps=100)
    assert monitor.starved == ["small"]


def test_monitor_repeat_cap_warns_or_raises(paths):
    cfg = gp.PipelineConfig(sources=paths, block=8, global_batch_size=4, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        monitor = gp.mixing.MixtureMonitor(cfg, window_steps=10, max_repeats=1)
        report = monitor.check(2)
    assert set(report) == {"big", "small"}
    assert abs(sum(r["window_share"] for r in report.values()) - 1) < 1e-12
    with pytest.warns(gp.mixing.MixtureWarning) as caught:
        monitor.check(200)
    repeated = sorted(str(w.message).split("'")[1] for w in caught)
    assert repeated == ["big", "small"]  # both sources passed the cap by step 200
    strict = gp.mixing.MixtureMonitor(cfg, window_steps=10, max_repeats=1, hard_cap=np.True_)
    with pytest.raises(gp.mixing.RepeatCapExceeded, match="max_repeats=1"):
        strict.check(200)


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"window_steps": "5"}, TypeError, "window_steps must be an int, got '5'"),
        ({"window_steps": 2.5}, TypeError, "window_steps must be an int, got 2.5"),
        ({"window_steps": 0}, ValueError, "window_steps must be >= 1"),
        ({"max_repeats": -1}, ValueError, "max_repeats must be >= 0"),
        ({"max_repeats": "2"}, TypeError, "max_repeats must be an int"),
        ({"hard_cap": 1}, TypeError, "hard_cap must be True or False"),
        ({"min_expected_rows": "1"}, TypeError, "min_expected_rows must be a number"),
    ],
)
def test_monitor_bad_options_are_refused(paths, options, error, match):
    cfg = gp.PipelineConfig(sources=paths, block=8, global_batch_size=4)
    with pytest.raises(error, match=match):
        gp.mixing.MixtureMonitor(cfg, **options)


def test_accounting_needs_a_config():
    for call in (
        lambda: gp.mixing.target_shares(None, 0, 3),
        lambda: gp.mixing.mixture_accounting({}, 3),
    ):
        with pytest.raises(TypeError, match=r"config must be a gp\.PipelineConfig; got"):
            call()


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
    shares = gp.mixing.window_shares(cfg, 20, 50)
    assert shares["small"] == np.mean(sources[80:] == 1)
    assert gp.mixing.window_shares(cfg, np.int64(20), np.int64(50)) == shares
    assert gp.mixing.mixture_accounting(cfg, np.int64(3)) == gp.mixing.mixture_accounting(cfg, 3)
    with pytest.raises(ValueError, match="stop_step must be >= 50, got stop_step=20"):
        gp.mixing.window_shares(cfg, 50, 20)
    with pytest.raises(TypeError, match="step must be an int"):
        gp.mixing.mixture_accounting(cfg, 3.0)
    with pytest.raises(TypeError, match="start_step must be an int"):
        gp.mixing.target_shares(cfg, "x", 3)
    with pytest.raises(ValueError, match="stop_step must be >= 5"):
        gp.mixing.target_shares(cfg, 5, 3)


# -- schedules ------------------------------------------------------------------------------

SCHEDULE = [
    (0, {"big": 0.875, "small": 0.125}),
    gp.Stage(8, {"big": 0.375, "small": 0.625}, ramp=4),  # steps 8..11 ramp, 12 on arrived
    (20, {"big": 0.5, "small": 0.5}),
]


@pytest.mark.parametrize("unit", ["documents", "windows"])
@pytest.mark.parametrize("count", [1, 2])
def test_accounting_with_a_schedule_equals_brute_force_count(paths, unit, count):
    cfg, steps = counted(paths, SCHEDULE, unit, count, 26)
    per_step = []
    checked = (5, 8, 10, 12, 15, 20, 26)  # inside stage 0, at the ramp, in it, after, ...
    for step, rows, real, taken, _ in steps:
        per_step.append(taken)
        if step not in checked:
            continue
        accounts = gp.mixing.mixture_accounting(cfg, step)
        targets = [cfg.probabilities_at(t) for t in range(step)]
        for j, (name, acc) in enumerate(accounts.items()):
            assert acc.rows == rows[name] and acc.real_tokens == real[name]
            assert acc.realized_share == rows[name] / (4 * step)
            assert acc.target_share == pytest.approx(np.mean([w[j] for w in targets]), abs=1e-15)
        for start in {0, min(6, step - 1), min(9, step - 1), step - 1}:
            shares = gp.mixing.window_shares(cfg, start, step)
            window = sum(s["small"] for s in per_step[start:step])
            assert shares["small"] == window / (4 * (step - start))
    # golden targets: (8 steps of 0.125, the ramp 0.125 + 0.25 + 0.375 + 0.5, 8 steps of
    # 0.625) / 20 = 7.25 / 20
    assert gp.mixing.target_shares(cfg, 0, 20)["small"] == pytest.approx(0.3625, abs=1e-15)
    assert gp.mixing.target_shares(cfg, 9, 11) == {"big": 0.6875, "small": 0.3125}


def test_monitor_with_a_schedule(paths):
    # small is nearly absent in stage 0 but has half the rows later: not starved.
    schedule = [(0, {"big": 1 - 1e-9, "small": 1e-9}), (50, {"big": 0.5, "small": 0.5})]
    cfg = gp.PipelineConfig(sources=paths, block=8, global_batch_size=4, weights=schedule)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        monitor = gp.mixing.MixtureMonitor(cfg, window_steps=10)
    assert monitor.starved == []
    report = monitor.check(55)  # the window [45, 55) straddles the stage boundary
    assert report["small"]["target_share"] == pytest.approx((5 * 1e-9 + 5 * 0.5) / 10)
    assert report["small"]["window_share"] == gp.mixing.window_shares(cfg, 45, 55)["small"]
    never = [(0, {"big": 1 - 1e-9, "small": 1e-9}), (50, {"big": 1 - 2e-9, "small": 2e-9})]
    with pytest.warns(gp.mixing.MixtureWarning, match="'small' is starved: with weight 2e-09"):
        gp.mixing.MixtureMonitor(
            gp.PipelineConfig(sources=paths, block=8, global_batch_size=4, weights=never)
        )
