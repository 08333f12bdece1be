"""grainpack.curriculum.mixture: MixtureBandit's weights by hand, frozen per stage, and its
training-loop contract in the pipeline (several processes, Orbax, fresh processes)."""

from __future__ import annotations

import functools
import json
import math
import pathlib

import loopback
import numpy as np
import orbax.checkpoint as ocp
import pytest

import grainpack as gp
from grainpack.index.mixing import choose_source, cumulative_probabilities
from grainpack.index.schedule import Segment
from grainpack.pipeline.batches import PipelineBatches
from grainpack.pipeline.dataset import batch_digest

STAGE = 3  # steps per stage in the pipeline tests


def test_weights_hand_computed_and_frozen_per_stage():
    bandit = gp.curriculum.MixtureBandit(["a", "b"], stage_steps=10, exploration=0.2, delay=2)
    assert bandit.weights(0) == bandit.weights(1) == {"a": 0.5, "b": 0.5}
    with pytest.raises(
        gp.curriculum.UndecidedEpochError, match=r"stage 2 \(from step 20\) is needed"
    ):
        bandit.weights(2)
    decided = bandit.update(0, [0.0, -2.0])
    # softmax(0, -2) = (1, e**-2) / (1 + e**-2); p = 0.8 * softmax + 0.2 / 2
    small = 0.8 / (1 + math.e**2) + 0.1
    assert decided == bandit.weights(2) == pytest.approx({"a": 1 - small, "b": small}, 1e-15)
    assert decided["b"] == pytest.approx(0.1953623, abs=1e-7)
    assert bandit.weights(1) == {"a": 0.5, "b": 0.5}  # decided stages never change
    bandit.update(1, {"a": math.nan, "b": 5.0})  # NaN: a not observed, left alone
    assert bandit.probabilities(3)[1] > 0.5 and bandit.updates == 2
    assert bandit.history[2] == tuple(decided.values())
    assert bandit.stage_of(29) == 2 and bandit.stage_of(30) == 3
    assert bandit.segments(15, 31) == [
        Segment(10, 20, (0.5, 0.5)),
        Segment(20, 30, bandit.history[2]),
        Segment(30, 40, bandit.history[3]),
    ]
    with pytest.raises(gp.curriculum.UndecidedEpochError, match=r"call update\(2, rewards\)"):
        bandit.segments(39, 41)
    assert repr(bandit) == (
        "MixtureBandit(sources=['a', 'b'], stage_steps=10, initial=[0.5, 0.5], "
        "learning_rate=1.0, exploration=0.2, delay=2, decay=0.0)"
    )


def test_initial_weights_are_the_prior():
    bandit = gp.curriculum.MixtureBandit(
        ["a", "b"], stage_steps=5, initial={"b": 0.2, "a": 0.8}, exploration=0.5, delay=1
    )
    assert bandit.weights(0) == {"a": 0.8, "b": 0.2}
    # no information: softmax(log 0.8, log 0.2) is the prior, mixed with the uniform
    assert bandit.update(0, [0.0, 0.0]) == pytest.approx({"a": 0.65, "b": 0.35}, abs=1e-15)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: gp.curriculum.MixtureBandit([], stage_steps=1), TypeError, "non-empty list"),
        (lambda: gp.curriculum.MixtureBandit("ab", stage_steps=1), TypeError, "non-empty list"),
        (
            lambda: gp.curriculum.MixtureBandit(["a", "a"], stage_steps=1),
            ValueError,
            "distinct names",
        ),
        (
            lambda: gp.curriculum.MixtureBandit(["a"], stage_steps=0),
            ValueError,
            "stage_steps must be >= 1",
        ),
        (
            lambda: gp.curriculum.MixtureBandit(["a"], stage_steps=1, delay=0),
            ValueError,
            "delay must",
        ),
        (
            lambda: gp.curriculum.MixtureBandit(["a", "b"], stage_steps=1, exploration=0.0),
            ValueError,
            "exploration must lie",
        ),
        (
            lambda: gp.curriculum.MixtureBandit(["a", "b"], stage_steps=1, initial={"a": 1.0}),
            ValueError,
            "initial must map exactly",
        ),
        (
            lambda: gp.curriculum.MixtureBandit(
                ["a", "b"], stage_steps=1, initial={"a": 1.0, "b": 0.0}
            ),
            ValueError,
            "initial weights must be > 0",
        ),
        (
            lambda: gp.curriculum.MixtureBandit(["a", "b"], stage_steps=1).update(1, [0.0, 0.0]),
            ValueError,
            "rewards of stage 0; got stage=1",
        ),
        (
            lambda: gp.curriculum.MixtureBandit(["a", "b"], stage_steps=1).update(0, [0.0]),
            ValueError,
            r"one value per source \(2\)",
        ),
        (
            lambda: gp.curriculum.MixtureBandit(["a", "b"], stage_steps=1).update(0, {"a": 1.0}),
            ValueError,
            "rewards must name exactly",
        ),
        (
            lambda: gp.curriculum.MixtureBandit(["a", "b"], stage_steps=1).update(
                0, [math.inf, 0.0]
            ),
            ValueError,
            "finite",
        ),
        (
            lambda: gp.curriculum.MixtureBandit(["a", "b"], stage_steps=10).segments(-10, 5),
            ValueError,
            "start must be >= 0",
        ),
    ],
)
def test_bad_input_is_refused(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_state_json_round_trip_keeps_its_choices():
    bandit = gp.curriculum.MixtureBandit(["a", "b", "c"], stage_steps=4, learning_rate=2.0)
    for k in range(5):
        bandit.update(k, [0.1 * k, 0.5, -0.3])
    restored = gp.curriculum.MixtureBandit(["a", "b", "c"], stage_steps=4, learning_rate=2.0)
    restored.load_state_dict(json.loads(json.dumps(bandit.state_dict())))
    assert restored.history == bandit.history and restored.updates == 5
    assert restored.update(5, [0.3, 0.2, 0.1]) == bandit.update(5, [0.3, 0.2, 0.1])
    with pytest.raises(ValueError, match="saved by a bandit with"):
        gp.curriculum.MixtureBandit(["a", "b", "c"], stage_steps=5).load_state_dict(
            bandit.state_dict()
        )
    with pytest.raises(ValueError, match="not a MixtureBandit state"):
        restored.load_state_dict({"weights": []})
    corrupt = {**bandit.state_dict(), "weights": [[0.5, 0.6, 0.1]] * 3}
    with pytest.raises(ValueError, match="sum to 1"):
        restored.load_state_dict(corrupt)
    missing = bandit.state_dict()
    missing["weights"][2] = None  # not "equal weights": a damaged state
    with pytest.raises(ValueError, match="3 weights per stage; got None"):
        restored.load_state_dict(missing)
    assert restored.history == bandit.history  # a refused state changes nothing


def test_rewards_that_overflow_the_preferences_are_refused():
    bandit = gp.curriculum.MixtureBandit(["a", "b"], stage_steps=10, learning_rate=10.0)
    with pytest.raises(ValueError, match="overflow the preferences"):
        bandit.update(0, [1e308, 0.0])
    with pytest.raises(ValueError, match="overflow the preferences"):  # in the shift to 0
        bandit.update(0, [1e308, -1e308])
    with pytest.raises(TypeError, match="stage must be an int"):
        bandit.update(True, [0.0, 0.0])
    assert bandit.updates == 0 and bandit.policy() == (0.5, 0.5)


# -- in the pipeline ------------------------------------------------------------------------


@pytest.fixture(scope="session")
def sources(tmp_path_factory):
    """Two sources a model tells apart: small token ids and large ones."""
    root = tmp_path_factory.mktemp("sources")  # read-only: shared by the tests
    rng = np.random.default_rng(5)
    low = [rng.integers(1, 100, size=rng.integers(20, 200)) for _ in range(120)]
    high = [rng.integers(500, 1000, size=rng.integers(20, 200)) for _ in range(120)]
    gp.write_corpus(root / "low", low)
    gp.write_corpus(root / "high", high)
    return {"low": str(root / "low"), "high": str(root / "high")}


def make_bandit(**options):
    return gp.curriculum.MixtureBandit(
        ["low", "high"], stage_steps=STAGE, learning_rate=8.0, exploration=0.1, **options
    )


def make_config(paths, bandit):
    return gp.PipelineConfig(
        sources=paths, block=16, global_batch_size=8, seed=3, weights=bandit, provenance=True
    )


def train(iterators, bandits, steps, first=0):
    """The training loop's side of the contract. The reward of a source is the mean target
    id of its real targets over the stage / 1000 (a stand-in for a per-source loss), from
    the global batch (the rows of every process, as an all-gather gives every process), in
    exact integer sums: every bandit gets the same rewards."""
    sums, counts = np.zeros(2, np.int64), np.zeros(2, np.int64)
    out = []
    for step in range(first, first + steps):
        local = [next(it) for it in iterators]
        for batch in local:
            real = batch["loss_mask"].sum(axis=1)
            ids = (batch["targets"] * batch["loss_mask"]).sum(axis=1)
            sums += np.bincount(batch["source"], weights=ids, minlength=2).astype(np.int64)
            counts += np.bincount(batch["source"], weights=real, minlength=2).astype(np.int64)
        out.append(local)
        if (step + 1) % STAGE == 0:
            with np.errstate(invalid="ignore"):
                rewards = (sums / counts / 1000).tolist()
            for bandit in bandits:
                bandit.update(step // STAGE, rewards)
            sums[:], counts[:] = 0, 0
    return out


def test_the_bandit_moves_the_mixture_stage_by_stage(sources):
    bandit = make_bandit(delay=1)
    cfg = make_config(sources, bandit)
    assert PipelineBatches(cfg).steps_per_element == 1  # planned after each update
    steps = 8 * STAGE
    batches = [
        b
        for (b,) in train(
            [iter(gp.make_dataset(cfg, process_index=0, process_count=1))], [bandit], steps
        )
    ]
    assert bandit.updates == 8
    high = [bandit.probabilities(k)[1] for k in range(9)]
    assert high[0] == 0.5 and high[8] > 0.9  # the larger ids earn the larger reward
    # Every slot chose with the weights of its stage: the scalar reference, exactly.
    chosen = np.concatenate([b["source"] for b in batches])
    expected = [
        choose_source(3, s, cumulative_probabilities(bandit.probabilities(s // 8 // STAGE)))
        for s in range(8 * steps)
    ]
    assert chosen.tolist() == expected
    accounts = gp.mixing.mixture_accounting(cfg, steps)
    assert accounts["high"].rows == int((chosen == 1).sum())
    assert accounts["high"].target_share == pytest.approx(np.mean(high[:8]), abs=1e-15)


def one_process_run(sources, steps):
    """A fresh bandit and the batches of ``steps`` steps trained on one process."""
    bandit = make_bandit()
    it = iter(gp.make_dataset(make_config(sources, bandit), process_index=0, process_count=1))
    return bandit, train([it], [bandit], steps)


def test_two_processes_fed_the_same_rewards_decide_the_same_weights(sources):
    steps = 7 * STAGE
    reference_bandit, reference = one_process_run(sources, steps)
    bandits = [make_bandit(), make_bandit()]
    iterators = [
        iter(gp.make_dataset(make_config(sources, b), process_index=p, process_count=2))
        for p, b in enumerate(bandits)
    ]
    got = train(iterators, bandits, steps)
    assert bandits[0].history == bandits[1].history == reference_bandit.history
    assert len(reference_bandit.history) == 9 and len(set(reference_bandit.history)) > 2
    for t, ((want,), local) in enumerate(zip(reference, got)):
        for key in ("inputs", "targets", "loss_mask", "source"):
            interleaved = np.empty_like(want[key])
            interleaved[0::2], interleaved[1::2] = local[0][key], local[1][key]
            np.testing.assert_array_equal(interleaved, want[key], err_msg=f"{key} step {t}")


def test_a_rollback_in_the_same_process_accounts_and_restores_as_a_fresh_one(sources):
    # Load an earlier bandit state and iterator state into live objects, then learn other
    # weights: accounting, the monitor and a later restore must use the new decisions, not
    # counts cached from the rolled-back ones.
    bandit = make_bandit(delay=1)
    cfg = make_config(sources, bandit)
    it = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    monitor = gp.mixing.MixtureMonitor(cfg, window_steps=STAGE)
    for step in range(6 * STAGE):
        next(it)
        if (step + 1) % STAGE == 0:
            bandit.update(step // STAGE, [1.0, 0.0])
            monitor.check(step + 1)
        if step + 1 == 2 * STAGE:
            saved = bandit.state_dict(), it.get_state()
    bandit.load_state_dict(saved[0])
    it.set_state(saved[1])
    for step in range(2 * STAGE, 5 * STAGE):
        next(it)
        if (step + 1) % STAGE == 0:
            bandit.update(step // STAGE, [0.0, 3.0])
    state = it.get_state()
    fresh_bandit = make_bandit(delay=1)
    fresh_bandit.load_state_dict(bandit.state_dict())
    fresh_cfg = make_config(sources, fresh_bandit)
    truth = gp.mixing.mixture_accounting(fresh_cfg, 5 * STAGE)
    assert monitor.check(5 * STAGE)["low"]["epochs"] == truth["low"].epochs
    it.set_state(state)  # refused before the fix: the cached counts gave another batch
    fresh = iter(gp.make_dataset(fresh_cfg, process_index=0, process_count=1))
    fresh.set_state(state)
    for _ in range(STAGE):
        np.testing.assert_array_equal(next(it)["inputs"], next(fresh)["inputs"])


def test_the_pipeline_refuses_a_stage_that_is_not_decided(sources):
    bandit = make_bandit()  # stages 0 and 1 decided; nobody reports rewards
    it = iter(gp.make_dataset(make_config(sources, bandit), process_index=0, process_count=1))
    for _ in range(2 * STAGE):
        next(it)
    with pytest.raises(
        gp.curriculum.UndecidedEpochError, match=r"stage 2 \(from step 6\) is needed"
    ):
        next(it)


def test_orbax_save_at_a_stage_boundary_continues_identically(sources, tmp_path):
    steps, cut = 8 * STAGE, 4 * STAGE
    reference_bandit, reference = one_process_run(sources, steps)
    bandit = make_bandit()
    it = iter(gp.make_dataset(make_config(sources, bandit), process_index=0, process_count=1))
    train([it], [bandit], cut)
    options = ocp.CheckpointManagerOptions(create=True)
    with ocp.CheckpointManager(tmp_path / "ckpt", options=options) as mngr:
        args = ocp.args.Composite(
            data=gp.CheckpointSave(it), mix=ocp.args.JsonSave(bandit.state_dict())
        )
        mngr.save(cut, args=args)
        mngr.wait_until_finished()
    fresh = make_bandit()
    fresh_it = iter(gp.make_dataset(make_config(sources, fresh), process_index=0, process_count=1))
    with ocp.CheckpointManager(tmp_path / "ckpt", options=options) as mngr:
        # The bandit first: the iterator's set_state recomputes the last batch to verify it.
        saved = mngr.restore(cut, args=ocp.args.Composite(mix=ocp.args.JsonRestore()))
        fresh.load_state_dict(saved.mix)
        mngr.restore(cut, args=ocp.args.Composite(data=gp.CheckpointRestore(fresh_it)))
    rest = train([fresh_it], [fresh], steps - cut, first=cut)
    assert fresh.history == reference_bandit.history
    for t, ((a,), (b,)) in enumerate(zip(rest, reference[cut:])):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"{key} step {cut + t}")


# -- two real JAX processes, then two fresh ones restoring the checkpoint --------------------

WORKER = pathlib.Path(__file__).parents[1] / "mixing_train.py"
LAUNCH_TIMEOUT = 90  # seconds per launch (all its processes)
launch = functools.partial(loopback.launch, WORKER, timeout=LAUNCH_TIMEOUT)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_jax_processes_agree_and_fresh_processes_continue_identically(tmp_path):
    # Two sources a tiny LM tells apart: a few frequent ids, and every id uniformly.
    rng = np.random.default_rng(2)
    easy = [rng.choice([1, 2, 3], size=rng.integers(10, 60)) for _ in range(60)]
    hard = [rng.integers(1, 64, size=rng.integers(10, 60)) for _ in range(60)]
    gp.write_corpus(tmp_path / "easy", easy)
    gp.write_corpus(tmp_path / "hard", hard)
    sources = {"easy": str(tmp_path / "easy"), "hard": str(tmp_path / "hard")}
    (tmp_path / "config.json").write_text(
        json.dumps({"sources": sources, "block": 8, "global_batch_size": 8, "seed": 1})
    )
    (tmp_path / "bandit.json").write_text(
        json.dumps({"stage_steps": 3, "learning_rate": 4.0, "exploration": 0.1})
    )
    common = ["--config", str(tmp_path / "config.json"), "--bandit", str(tmp_path / "bandit.json")]
    common += ["--checkpoints", str(tmp_path / "ckpt")]
    save, steps = 9, 18  # the save is at the boundary of stages 2 and 3
    launch(2, [*common, "--out", str(tmp_path / "A"), "--steps", str(steps), "--save-step",
               str(save)], tmp_path / "logs_A")  # fmt: skip
    launch(2, [*common, "--out", str(tmp_path / "B"), "--steps", str(steps), "--restore-step",
               str(save)], tmp_path / "logs_B")  # fmt: skip
    a = [json.loads((tmp_path / "A" / f"process_{p}.json").read_text()) for p in (0, 1)]
    b = [json.loads((tmp_path / "B" / f"process_{p}.json").read_text()) for p in (0, 1)]
    assert [r["process_count"] for r in a + b] == [2, 2, 2, 2]
    # The two processes reported the same rewards and decided the same weights, bit for bit.
    assert a[0]["rewards"] == a[1]["rewards"] and a[0]["history"] == a[1]["history"]
    history = a[0]["history"]
    assert len(history) == 2 + steps // 3 and history[-1][1] > 0.6  # the hard source gains
    # Fresh processes restored at the stage boundary continue exactly as the first run did.
    for p in (0, 1):
        assert b[p]["steps"] == list(range(save, steps))
        assert b[p]["digests"] == a[p]["digests"][save:]
        assert b[p]["rewards"] == a[p]["rewards"][save // 3 :]
        assert b[p]["history"] == history
    # The same global batches as one process planning with the decided weights.
    bandit = gp.curriculum.MixtureBandit(
        list(sources), stage_steps=3, learning_rate=4.0, exploration=0.1
    )
    bandit.load_state_dict({**bandit.state_dict(), "weights": history})
    cfg = gp.PipelineConfig(**json.loads((tmp_path / "config.json").read_text()),
                            weights=bandit, provenance=True)  # fmt: skip
    for p in (0, 1):
        it = iter(gp.make_dataset(cfg, process_index=p, process_count=2))
        assert [batch_digest(next(it)) for _ in range(steps)] == a[p]["digests"]
