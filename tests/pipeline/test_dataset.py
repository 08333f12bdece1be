"""Contracts of the Grain pipeline: slot model, mixing, packing, sharding, resume."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
import warnings

import grain
import numpy as np
import pytest

import grainpack as gp
from grainpack.index.mixing import choose_source, cumulative_probabilities
from grainpack.pipeline.batches import PipelineBatches
from grainpack.pipeline.state import state_check


def identity_selector(order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    return np.sort(order)


def random_documents(rng: np.random.Generator, n: int, low: int, high: int) -> list[np.ndarray]:
    return [rng.integers(1, 1000, size=rng.integers(low, high)) for _ in range(n)]


@pytest.fixture(scope="session")
def two_sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("two_sources")  # read-only: shared by the tests
    rng = np.random.default_rng(7)
    en = gp.write_corpus(root / "en", random_documents(rng, 40, 0, 30), shard_tokens=200)
    fr = gp.write_corpus(root / "fr", random_documents(rng, 9, 1, 12))
    return {"en": str(root / "en"), "fr": str(root / "fr")}, (en, fr)


def take(iterator, n):
    return [next(iterator) for _ in range(n)]


def rows_of(batch):
    return np.concatenate([batch["inputs"], batch["targets"][:, -1:]], axis=1)


def test_documents_rows_golden_hand_computed(tmp_path):
    gp.write_corpus(tmp_path / "c", [[1, 2, 3], [4, 5], [6, 7, 8, 9]])
    cfg = gp.PipelineConfig(
        sources={"c": str(tmp_path / "c")},
        block=4,
        global_batch_size=4,
        boundary_id=99,
        sequence_selector=identity_selector,
    )
    b = next(iter(gp.make_dataset(cfg, process_index=0, process_count=1)))
    # stream 1 2 3 99 | 4 5 99 | 6 7 8 9 -> rows [1 2 3 99 4] [5 99 6 7 8] [9 0 0 0 0], then
    # epoch 1 starts again (the selector keeps the stored order).
    assert b["inputs"].tolist() == [[1, 2, 3, 99], [5, 99, 6, 7], [9, 0, 0, 0], [1, 2, 3, 99]]
    assert b["targets"].tolist() == [[2, 3, 99, 4], [99, 6, 7, 8], [0, 0, 0, 0], [2, 3, 99, 4]]
    assert b["segment_ids"].tolist() == [[1, 1, 1, 1], [1, 1, 2, 2], [1, 0, 0, 0], [1, 1, 1, 1]]
    assert b["positions"].tolist() == [[0, 1, 2, 3], [0, 1, 0, 1], [0, 0, 0, 0], [0, 1, 2, 3]]
    assert b["loss_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1]]
    assert all(v.dtype == np.int32 for v in b.values())


def test_documents_single_source_equals_pack_documents_epoch_after_epoch(two_sources):
    paths, (en, _) = two_sources
    cfg = gp.PipelineConfig(
        sources={"en": paths["en"]}, block=16, global_batch_size=4, seed=3, boundary_id=1000
    )
    expected = np.concatenate(
        [
            gp.pack_documents(
                en, gp.global_document_order(len(en), seed=3, epoch=e), 16, boundary_id=1000
            ).rows
            for e in range(3)
        ]
    )
    it = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    got = np.concatenate([rows_of(b) for b in take(it, len(expected) // 4)])
    np.testing.assert_array_equal(got, expected[: len(got)])


@pytest.mark.parametrize("weights", [None, {"en": 0.8, "fr": 0.2}])
def test_documents_mix_follows_seed_choice_and_per_source_epochs(two_sources, weights):
    paths, sources = two_sources
    cfg = gp.PipelineConfig(sources=paths, block=8, global_batch_size=6, seed=11, weights=weights)
    probs = cfg.probabilities
    cumulative = np.cumsum(probs).tolist()
    streams = [
        np.concatenate(
            [
                gp.pack_documents(
                    src, gp.global_document_order(len(src), seed=11 + j, epoch=e), 8
                ).rows
                for e in range(40)
            ]
        )
        for j, src in enumerate(sources)
    ]
    seen = [0, 0]
    expected = []
    for slot in range(60):
        j = choose_source(11, slot, cumulative)
        expected.append(streams[j][seen[j]])
        seen[j] += 1
    it = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    got = np.concatenate([rows_of(b) for b in take(it, 10)])
    np.testing.assert_array_equal(got, np.stack(expected))
    assert seen[1] > len(streams[1]) // 40  # the small source repeated: new epochs were used


def test_windows_unit_equals_mixed_stream_bit_for_bit(two_sources):
    paths, _ = two_sources
    cfg = gp.PipelineConfig(
        sources=paths,
        block=7,
        global_batch_size=4,
        seed=5,
        unit="windows",
        weights={"en": 0.6, "fr": 0.4},
    )
    stream = gp.MixedStream(paths, 7, 5, probs=[0.6, 0.4])
    it = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    for _ in range(25):
        rows, _counts = stream.next_batch(4)
        np.testing.assert_array_equal(rows_of(next(it)), rows.astype(np.int64))


@pytest.mark.parametrize("unit", ["documents", "windows"])
def test_world_size_independence(two_sources, unit):
    paths, _ = two_sources
    cfg = gp.PipelineConfig(sources=paths, block=8, global_batch_size=8, seed=2, unit=unit)
    reference = take(iter(gp.make_dataset(cfg, process_index=0, process_count=1)), 6)
    for count in (2, 4):
        per_process = [
            take(iter(gp.make_dataset(cfg, process_index=p, process_count=count)), 6)
            for p in range(count)
        ]
        for t in range(6):
            for key, value in reference[t].items():
                interleaved = np.empty_like(value)
                for p in range(count):
                    interleaved[p::count] = per_process[p][t][key]
                np.testing.assert_array_equal(interleaved, value, err_msg=f"{key} step {t}")


@pytest.mark.slow
def test_a_killed_worker_raises_then_the_stream_goes_on_exactly(two_sources):
    import multiprocessing
    import signal

    paths, _ = two_sources
    cfg = gp.PipelineConfig(sources=paths, block=8, global_batch_size=64, seed=1)
    # 12 Grain elements of 512 steps: the killed worker must make elements past the 2 it
    # may hold ready (with 2000 steps it could have made all of its own before the kill)
    expected = take(iter(gp.make_dataset(cfg, process_index=0, process_count=1)), 12 * 512)
    with iter(gp.make_dataset(cfg, process_index=0, process_count=1, worker_count=2)) as it:
        got = take(it, 5)
        workers = [p for p in multiprocessing.active_children() if "tracker" not in p.name]
        os.kill(workers[0].pid, signal.SIGKILL)
        errors = 0
        while len(got) < len(expected):
            try:
                got.append(next(it))
            except RuntimeError as err:  # the dead worker, once; the workers are restarted
                assert "terminated unexpectedly" in str(err)
                errors += 1
    assert errors == 1
    for step, (a, b) in enumerate(zip(got, expected)):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"{key} of step {step}")


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_dataset_and_data_loader_agree(two_sources, workers):
    paths, _ = two_sources
    cfg = gp.PipelineConfig(sources=paths, block=8, global_batch_size=4, seed=1)
    reference = take(iter(gp.make_dataset(cfg, process_index=1, process_count=2)), 5)
    ds_iter = iter(gp.make_dataset(cfg, process_index=1, process_count=2, worker_count=workers))
    loader = gp.pipeline.make_data_loader(
        cfg, process_index=1, process_count=2, worker_count=workers
    )
    for got in (take(ds_iter, 5), take(iter(loader), 5)):
        for a, b in zip(got, reference):
            assert a.keys() == b.keys()
            for k in a:
                np.testing.assert_array_equal(a[k], b[k])
    ds_iter.close()


@pytest.mark.slow
def test_closing_workers_mid_stream_is_prompt(two_sources):
    # One Grain element plans 512 steps here (hundreds of KB): a pickled element larger than
    # a pipe's buffer used to block the worker's exit, and close() waited Grain's 25 s.
    paths, _ = two_sources
    cfg = gp.PipelineConfig(sources=paths, block=32, global_batch_size=16, seed=2)
    reference = take(iter(gp.make_dataset(cfg, process_index=0, process_count=1)), 3)
    it = iter(gp.make_dataset(cfg, process_index=0, process_count=1, worker_count=2))
    for got, want in zip(take(it, 3), reference):
        np.testing.assert_array_equal(got["inputs"], want["inputs"])
    time.sleep(1)  # the workers fill their queues
    start = time.perf_counter()
    it.close()
    assert time.perf_counter() - start < 20  # 1-2 s; over 10 s once on a loaded machine


def test_grain_elements_plan_about_8m_tokens(two_sources):
    paths, _ = two_sources

    def steps(**options):
        cfg = gp.PipelineConfig(sources=paths, **options)
        return PipelineBatches(cfg, process_count=2).steps_per_element

    assert steps(block=8, global_batch_size=4) == 512  # capped
    assert steps(block=2047, global_batch_size=64) == 128  # 32 rows of 2048: 2**16 a step
    assert steps(block=8191, global_batch_size=4096) == 1  # one step is 16M tokens
    # Selectors are pure functions of (order, seed, epoch): planned ahead like no selector.
    assert steps(block=8, global_batch_size=4, sequence_selector=identity_selector) == 512
    static = gp.curriculum.LengthBuckets(edges=(4,), rates=(1.0, 0.5))
    assert steps(block=8, global_batch_size=4, sequence_selector=static) == 512
    # One that adapts online is planned one step at a time, after the loop's updates.
    bandit = gp.curriculum.LengthBuckets(edges=(4,), rates=gp.curriculum.LengthBandit(2))
    assert steps(block=8, global_batch_size=4, sequence_selector=bandit) == 1
    assert (
        steps(block=8, global_batch_size=4, sequence_selector=gp.curriculum.Chain(static, bandit))
        == 1
    )


@pytest.mark.slow
def test_workers_carry_provenance_exactly(two_sources):
    paths, _ = two_sources
    cfg = gp.PipelineConfig(
        sources=paths, block=8, global_batch_size=4, seed=3, boundary_id=999, provenance=True
    )
    reference = take(iter(gp.make_dataset(cfg, process_index=1, process_count=2)), 6)
    it = iter(gp.make_dataset(cfg, process_index=1, process_count=2, worker_count=2))
    try:
        for got, want in zip(take(it, 6), reference):
            assert got.keys() == want.keys() and "segment_document" in got
            for k in got:
                np.testing.assert_array_equal(got[k], want[k])
    finally:
        it.close()


def test_batch_size_must_divide_by_process_count(two_sources):
    paths, _ = two_sources
    cfg = gp.PipelineConfig(sources=paths, block=8, global_batch_size=6)
    with pytest.raises(ValueError, match="not divisible by process_count=4"):
        gp.make_dataset(cfg, process_index=0, process_count=4)


def test_make_dataset_arguments_are_checked(two_sources):
    paths, _ = two_sources
    cfg = gp.PipelineConfig(sources=paths, block=8, global_batch_size=4)
    with pytest.raises(TypeError, match=r"expected a gp\.PipelineConfig, got \{'en'"):
        gp.make_dataset(paths)
    # one of the two given, the other from JAX (one process here): they must agree
    with pytest.raises(ValueError, match="process_count=2 was given alone, but JAX says"):
        gp.make_dataset(cfg, process_count=2)
    assert len(next(iter(gp.make_dataset(cfg, process_count=1)))["inputs"]) == 4
    it = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    with pytest.raises(TypeError, match=r"parse saved JSON first: set_state\(json.loads"):
        it.set_state(json.dumps(it.get_state()))


def test_state_is_json_of_ints_and_resumes_exactly(two_sources):
    paths, _ = two_sources
    cfg = gp.PipelineConfig(sources=paths, block=8, global_batch_size=4, seed=9)
    it = iter(gp.make_dataset(cfg, process_index=0, process_count=2))
    take(it, 3)
    state = json.loads(json.dumps(it.get_state()))
    assert state["step"] == 3
    assert all(type(v) is int for v in state.values())
    expected = take(it, 4)
    fresh = iter(gp.make_dataset(cfg, process_index=0, process_count=2))
    fresh.set_state(state)
    for a, b in zip(take(fresh, 4), expected):
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])


def test_restore_refuses_another_config_unless_asked(two_sources):
    paths, _ = two_sources
    cfg = gp.PipelineConfig(sources=paths, block=8, global_batch_size=4, seed=9)
    other = gp.PipelineConfig(sources=paths, block=8, global_batch_size=4, seed=10)
    it = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    take(it, 2)
    state = it.get_state()
    with pytest.raises(ValueError, match="another pipeline config or corpus"):
        iter(gp.make_dataset(other, process_index=0, process_count=1)).set_state(state)
    forced = iter(
        gp.make_dataset(other, process_index=0, process_count=1, ignore_fingerprint_mismatch=True)
    )
    forced.set_state(state)
    assert forced.get_state()["step"] == 2


def test_restore_on_another_process_count_continues_global_batches(two_sources):
    paths, _ = two_sources
    cfg = gp.PipelineConfig(sources=paths, block=8, global_batch_size=4, seed=4)
    single = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    take(single, 3)
    state = single.get_state()
    expected = next(single)
    halves = []
    for p in range(2):
        it = iter(gp.make_dataset(cfg, process_index=p, process_count=2))
        it.set_state(state)
        halves.append(next(it))
    for key, value in expected.items():
        np.testing.assert_array_equal(value[0::2], halves[0][key])
        np.testing.assert_array_equal(value[1::2], halves[1][key])


def test_eval_pass_yields_every_row_once_then_padding(two_sources):
    paths, (en, _) = two_sources
    cfg = gp.PipelineConfig(sources=paths, block=8, global_batch_size=4, seed=3)
    rows = gp.pack_documents(en, gp.global_document_order(len(en), seed=3, epoch=0), 8).rows
    for count in (1, 2, 4):
        per_process = [
            list(gp.make_eval_dataset(cfg, source="en", process_index=p, process_count=count))
            for p in range(count)
        ]
        steps = -(-len(rows) // 4)
        assert all(len(batches) == steps for batches in per_process)
        got = np.empty((steps * 4, 9), dtype=np.int64)
        mask = np.empty((steps * 4, 8), dtype=np.int64)
        for p in range(count):
            got[p::count] = np.concatenate([rows_of(b) for b in per_process[p]])
            mask[p::count] = np.concatenate([b["loss_mask"] for b in per_process[p]])
        np.testing.assert_array_equal(got[: len(rows)], rows)
        assert not got[len(rows) :].any() and not mask[len(rows) :].any()


def test_source_shorter_than_one_row_is_an_error(tmp_path):
    gp.write_corpus(tmp_path / "tiny", [[1, 2, 3]])
    cfg = gp.PipelineConfig(sources={"t": str(tmp_path / "tiny")}, block=8, global_batch_size=2)
    with pytest.raises(ValueError, match="fewer than one row"):
        next(iter(gp.make_dataset(cfg, process_index=0, process_count=1)))


def test_grain_data_loader_state_resumes(two_sources):
    paths, _ = two_sources
    cfg = gp.PipelineConfig(sources=paths, block=8, global_batch_size=4, seed=1)
    loader = gp.pipeline.make_data_loader(cfg, process_index=0, process_count=2)
    it = iter(loader)
    take(it, 2)
    state = it.get_state()
    expected = take(it, 2)
    it2 = iter(gp.pipeline.make_data_loader(cfg, process_index=0, process_count=2))
    it2.set_state(state)
    for a, b in zip(take(it2, 2), expected):
        np.testing.assert_array_equal(a["inputs"], b["inputs"])
    assert isinstance(loader, grain.DataLoader)


@pytest.mark.parametrize("bad", [{"step": "3"}, {"step": -2}, {"step": 2.0}, {"digest": None}])
def test_set_state_rejects_a_corrupt_state(two_sources, bad):
    paths, _ = two_sources
    cfg = gp.PipelineConfig(sources=paths, block=8, global_batch_size=4)
    it = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    next(it)
    with pytest.raises(ValueError, match="corrupt grainpack iterator state"):
        it.set_state({**it.get_state(), **bad})


def test_set_state_checks_the_process_layout_at_step_zero(two_sources):
    paths, _ = two_sources
    cfg = gp.PipelineConfig(sources=paths, block=8, global_batch_size=4)
    it = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    edited = {**it.get_state(), "process_count": 3, "process_index": 1}
    with pytest.raises(ValueError, match="process_count=3 does not divide global_batch_size=4"):
        it.set_state(edited)


def test_a_refused_blocked_state_leaves_the_iterator_as_it_was(two_sources):
    # Past the mixer's first count block (2**16 slots): a state with edited counts (still
    # summing to the slot) is refused, and neither the true state nor the iterator's own
    # next batch suffer from it.
    paths, _ = two_sources
    cfg = gp.PipelineConfig(
        sources=paths, block=8, global_batch_size=8, seed=3, order=gp.BlockedOrder()
    )
    state = iter(gp.make_dataset(cfg, process_index=0, process_count=1)).state_after(9000)
    assert sum(state["counts"]) == 72_000
    counts = [state["counts"][0] + 1, state["counts"][1] - 1]
    edited = {**state, "counts": counts, "check": state_check({**state, "counts": counts})}
    first = next(iter(gp.make_dataset(cfg, process_index=0, process_count=1)))
    restored = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    restored.set_state(state)
    expected = next(restored)

    it = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    with pytest.raises(ValueError, match="field 'counts' disagrees with the slot hash"):
        it.set_state(edited)
    assert it.get_state()["step"] == 0
    for key, value in next(it).items():
        np.testing.assert_array_equal(value, first[key], err_msg=key)
    with pytest.raises(ValueError, match="field 'counts' disagrees with the slot hash"):
        it.set_state(edited)
    it.set_state(state)
    for key, value in next(it).items():
        np.testing.assert_array_equal(value, expected[key], err_msg=key)


def test_a_refused_state_keeps_the_anchor_of_an_online_schedule(two_sources):
    # With a bandit's weights, set_state drops the cached plans first (they may come from
    # rolled-back decisions): a refused state must bring them back, the anchor included.
    paths, _ = two_sources

    def config():
        bandit = gp.curriculum.MixtureBandit(list(paths), stage_steps=10_000)
        return gp.PipelineConfig(
            sources=paths,
            block=8,
            global_batch_size=8,
            seed=3,
            order=gp.BlockedOrder(),
            weights=bandit,
        )

    state = iter(gp.make_dataset(config(), process_index=0, process_count=1)).state_after(9000)
    it = iter(gp.make_dataset(config(), process_index=0, process_count=1))
    it.set_state(state)
    next(it)
    anchor = it._batches.anchor
    assert anchor is not None and anchor[0] == 72_000
    with pytest.raises(ValueError, match="resume verification failed"):
        it.set_state({**state, "digest": state["digest"] ^ 1})
    assert it._batches.anchor == anchor and it.get_state()["step"] == 9001


@pytest.mark.parametrize("make", [gp.make_dataset, gp.pipeline.make_data_loader])
def test_a_negative_worker_count_is_refused_in_our_words(two_sources, make):
    cfg = gp.PipelineConfig(sources=two_sources[0], block=8, global_batch_size=4)
    with pytest.raises(ValueError, match="worker_count must be >= 0"):
        make(cfg, process_index=0, process_count=1, worker_count=-1)


def test_make_data_loader_refuses_workers_with_an_online_schedule(two_sources):
    paths, _ = two_sources
    bandit = gp.curriculum.MixtureBandit(list(paths), stage_steps=10)
    cfg = gp.PipelineConfig(sources=paths, block=8, global_batch_size=4, weights=bandit)
    with pytest.raises(ValueError, match=r"use make_dataset \(its iterator's close\(\) restarts"):
        gp.pipeline.make_data_loader(cfg, process_index=0, process_count=1, worker_count=1)
    assert next(iter(gp.pipeline.make_data_loader(cfg, process_index=0, process_count=1)))


def test_make_dataset_evaluation_mode_is_the_eval_pass(two_sources):
    paths, _ = two_sources
    cfg = gp.PipelineConfig(sources=paths, block=8, global_batch_size=4, seed=3)
    finite = list(gp.make_dataset(cfg, process_index=1, process_count=2, evaluation="fr"))
    expected = list(gp.make_eval_dataset(cfg, source="fr", process_index=1, process_count=2))
    assert len(finite) == len(expected) > 0
    for a, b in zip(finite, expected):
        np.testing.assert_array_equal(a["inputs"], b["inputs"])
    with pytest.raises(ValueError, match="name the one to evaluate"):
        gp.make_dataset(cfg, process_index=0, process_count=1, evaluation=True)


WORKER_SCRIPT = """
import sys
import grainpack as gp

def main():
    cfg = gp.PipelineConfig(sources={"en": sys.argv[1]}, block=8, global_batch_size=4)
    {body}

{entry}
"""


def run_script(tmp_path, body, guarded=True):
    entry = 'if __name__ == "__main__":\n    main()' if guarded else "main()"
    gp.write_corpus(tmp_path / "c", [np.arange(1, 200)] * 50)
    script = tmp_path / "script.py"
    script.write_text(WORKER_SCRIPT.replace("{body}", body).replace("{entry}", entry))
    return subprocess.run(
        [sys.executable, str(script), str(tmp_path / "c")],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_workers_stop_with_the_context_manager_or_quietly_at_exit(tmp_path):
    # one script: the first iterator's workers stop when its with-block ends, the second's
    # (never closed) at interpreter exit, without a word on stderr
    out = run_script(
        tmp_path,
        "with iter(gp.make_dataset(cfg, worker_count=2)) as it:\n"
        "        next(it)\n"
        "    print(it._inner is None)\n"
        "    it = iter(gp.make_dataset(cfg, worker_count=2))\n"
        "    print([int(next(it)['inputs'][0, 0]) for _ in range(3)])",
    )
    # Grain's own notice, at every import with jaxlib older than its profiling hooks
    notice = "WARNING:absl:Grain multiprocess worker profiling requires jaxlib extension"
    stderr = [line for line in out.stderr.splitlines() if not line.startswith(notice)]
    assert (out.returncode, stderr) == (0, [])
    assert out.stdout.split() == ["True", "[1,", "37,", "73]"]


@pytest.mark.slow
def test_workers_without_a_main_guard_say_so(tmp_path):
    out = run_script(tmp_path, "next(iter(gp.make_dataset(cfg, worker_count=1)))", guarded=False)
    assert out.returncode != 0
    assert 'under `if __name__ == "__main__":`' in out.stderr


@pytest.mark.slow
def test_compact_layout_through_workers_the_data_loader_and_checkpoints(two_sources):
    paths, _ = two_sources
    full = gp.PipelineConfig(sources=paths, block=8, global_batch_size=4, seed=1, boundary_id=999)
    compact = dataclasses.replace(full, layout="compact")
    reference = take(iter(gp.make_dataset(compact, process_index=1, process_count=2)), 6)
    assert sorted(reference[0]) == ["filled", "segment_starts", "tokens"]
    it = iter(gp.make_dataset(compact, process_index=1, process_count=2, worker_count=2))
    loader = gp.pipeline.make_data_loader(compact, process_index=1, process_count=2)
    try:
        for got in (take(it, 6), take(iter(loader), 6)):
            for a, b in zip(got, reference):
                assert a.keys() == b.keys()
                for k in a:
                    np.testing.assert_array_equal(a[k], b[k])
    finally:
        it.close()
    # the layout is not part of the fingerprint and the digest is the full layout's: a
    # checkpoint of either layout resumes in the other
    for saved, resumed in ((full, compact), (compact, full)):
        source = iter(gp.make_dataset(saved, process_index=0, process_count=1))
        take(source, 3)
        target = iter(gp.make_dataset(resumed, process_index=0, process_count=1))
        target.set_state(source.get_state())
        want = iter(gp.make_dataset(resumed, process_index=0, process_count=1))
        take(want, 3)
        got, expected = next(target), next(want)
        assert got.keys() == expected.keys()
        for k, v in expected.items():
            np.testing.assert_array_equal(got[k], v)
        assert target.get_state() == want.get_state()


# -- mixture schedules --------------------------------------------------------------------


@pytest.fixture(scope="session")
def larger_sources(tmp_path_factory):
    """Sources with many rows per epoch: plans of 512 steps span few epochs (fast)."""
    root = tmp_path_factory.mktemp("larger_sources")  # read-only: shared by the tests
    rng = np.random.default_rng(19)
    en = gp.write_corpus(root / "en", random_documents(rng, 300, 10, 200), shard_tokens=5000)
    fr = gp.write_corpus(root / "fr", random_documents(rng, 100, 10, 100))
    return {"en": str(root / "en"), "fr": str(root / "fr")}, (en, fr)


SCHEDULE = [
    (0, {"en": 0.9, "fr": 0.1}),
    gp.Stage(4, {"en": 0.2, "fr": 0.8}, ramp=3),  # steps 4, 5, 6 ramp; 7 on: 0.2 / 0.8
    (10, {"en": 0.5, "fr": 0.5}),
]


def assert_same_global_batches(reference, per_process):
    count = len(per_process)
    for t, want in enumerate(reference):
        for key, value in want.items():
            interleaved = np.empty_like(value)
            for p in range(count):
                interleaved[p::count] = per_process[p][t][key]
            np.testing.assert_array_equal(interleaved, value, err_msg=f"{key} step {t}")


@pytest.mark.parametrize("unit", ["documents", "windows"])
def test_one_stage_schedule_gives_the_fixed_weights_batches(larger_sources, unit):
    paths, _ = larger_sources
    options = dict(sources=paths, block=8, global_batch_size=6, seed=9, unit=unit)
    fixed = gp.PipelineConfig(**options, weights={"en": 0.7, "fr": 0.3})
    staged = gp.PipelineConfig(**options, weights=[(0, {"en": 0.7, "fr": 0.3})])
    assert PipelineBatches(fixed).fingerprint == PipelineBatches(staged).fingerprint
    for count in (1, 3):
        for p in range(count):
            a = take(iter(gp.make_dataset(fixed, process_index=p, process_count=count)), 12)
            b = take(iter(gp.make_dataset(staged, process_index=p, process_count=count)), 12)
            for x, y in zip(a, b):
                assert x.keys() == y.keys()
                for key in x:
                    np.testing.assert_array_equal(x[key], y[key])


def test_schedule_mix_follows_each_steps_weights(larger_sources):
    # Exact reference: slot s picks choose_source with the cumulative weights of step s // B
    # and takes its source's next row of pack_documents over per-source epochs.
    paths, sources = larger_sources
    cfg = gp.PipelineConfig(sources=paths, block=8, global_batch_size=6, seed=11, weights=SCHEDULE)
    streams = [
        np.concatenate(
            [
                gp.pack_documents(
                    src, gp.global_document_order(len(src), seed=11 + j, epoch=e), 8
                ).rows
                for e in range(3)
            ]
        )
        for j, src in enumerate(sources)
    ]
    seen, expected, chosen = [0, 0], [], []
    for slot in range(6 * 14):
        cumulative = cumulative_probabilities(cfg.probabilities_at(slot // 6))
        j = choose_source(11, slot, cumulative)
        expected.append(streams[j][seen[j]])
        chosen.append(j)
        seen[j] += 1
    it = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    got = np.concatenate([rows_of(b) for b in take(it, 14)])
    np.testing.assert_array_equal(got, np.stack(expected))
    assert chosen[:24].count(1) < chosen[24:60].count(1)  # the second stage favours fr


@pytest.mark.parametrize("unit", ["documents", "windows"])
def test_schedule_world_size_independence_across_stage_boundaries(larger_sources, unit):
    paths, _ = larger_sources
    cfg = gp.PipelineConfig(
        sources=paths, block=8, global_batch_size=6, seed=2, unit=unit, weights=SCHEDULE
    )
    reference = take(iter(gp.make_dataset(cfg, process_index=0, process_count=1)), 13)
    for count in (2, 3):
        per_process = [
            take(iter(gp.make_dataset(cfg, process_index=p, process_count=count)), 13)
            for p in range(count)
        ]
        assert_same_global_batches(reference, per_process)


@pytest.mark.parametrize("order", ["exact", gp.BlockedOrder(block_docs=4, window_blocks=2)])
@pytest.mark.parametrize("save_step", [3, 5, 10])  # before the ramp, inside it, at a stage
def test_schedule_elastic_restore_across_stage_boundaries(larger_sources, order, save_step):
    paths, _ = larger_sources
    cfg = gp.PipelineConfig(
        sources=paths, block=8, global_batch_size=6, seed=4, weights=SCHEDULE, order=order
    )
    reference = take(iter(gp.make_dataset(cfg, process_index=0, process_count=1)), 14)
    saved = []
    for p in range(2):
        it = iter(gp.make_dataset(cfg, process_index=p, process_count=2))
        take(it, save_step)
        saved.append(json.loads(json.dumps(it.get_state())))
    if order != "exact":  # version 2: the per-source counts at the step travel with it
        assert saved[0]["version"] == 2 and sum(saved[0]["counts"]) == 6 * save_step
    for count in (3, 1):
        per_process = []
        for p in range(count):
            it = iter(gp.make_dataset(cfg, process_index=p, process_count=count))
            it.set_state(saved[p % 2])
            per_process.append(take(it, 14 - save_step))
        assert_same_global_batches(reference[save_step:], per_process)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"weights": {"a": 0.5, "b": 0.5}},
            "weights: {'a': 0.25, 'b': 0.75} -> {'a': 0.5, 'b': 0.5}",
        ),
        ({"block": 16}, "block: 8 -> 16"),
        ({"seed": 10}, "seed: 9 -> 10"),
        (
            {"order": gp.BlockedOrder(block_docs=4, window_blocks=2)},
            "order: exact -> {'kind': 'blocked', 'block_docs': 4, 'window_blocks': 2}",
        ),
        ({"order": "reversed"}, "the order of the sources: ['a', 'b'] -> ['b', 'a']"),
        ({"corpus": "b"}, "the corpus of source 'b' changed (its content)"),
        ({"drop": "b"}, "source 'b' was removed"),
        # Before: "packing: None -> best_fit" (the default concat has no entry).
        ({"packing": "best_fit"}, "packing: concat -> best_fit"),
        (
            {"packing": "best_fit", "max_segments": 2},
            "packing: concat -> best_fit with max_segments=2",
        ),
    ],
)
def test_a_refused_restore_names_what_changed(tmp_path, change, message):
    from etils import epath

    from grainpack.orbax import DataCheckpointHandler

    rng = np.random.default_rng(0)
    paths = {}
    for name in ("a", "b", "c"):
        paths[name] = str(tmp_path / name)
        gp.write_corpus(paths[name], random_documents(rng, 30, 1, 40))
    base = {"sources": {"a": paths["a"], "b": paths["b"]}, "block": 8, "global_batch_size": 4}
    saved = dict(base, weights={"a": 0.25, "b": 0.75}, seed=9)
    it = iter(gp.make_dataset(gp.PipelineConfig(**saved)))
    take(it, 2)
    (tmp_path / "data").mkdir()
    DataCheckpointHandler().save(epath.Path(tmp_path / "data"), args=gp.CheckpointSave(it))
    now = dict(saved)
    if change.get("order") == "reversed":
        now["sources"] = dict(reversed(list(base["sources"].items())))
        now["weights"] = dict(reversed(list(saved["weights"].items())))
    elif "corpus" in change:
        now["sources"] = {"a": paths["a"], "b": paths["c"]}  # same name, other content
    elif "drop" in change:
        now["sources"], now["weights"] = {"a": paths["a"]}, None
    else:
        now.update(change)
    restored = iter(gp.make_dataset(gp.PipelineConfig(**now)))
    with pytest.raises(ValueError, match="another pipeline config or corpus") as refused:
        DataCheckpointHandler().restore(
            epath.Path(tmp_path / "data"), args=gp.CheckpointRestore(restored)
        )
    assert "What changed: " in str(refused.value) and message in str(refused.value)
    if change in ({"block": 16}, {"packing": "best_fit", "max_segments": 2}):
        assert str(refused.value).endswith(f"What changed: {message}.")  # only that
    (tmp_path / "data" / "pipeline_0-of-1.json").write_text('{"sources": 3}')  # damaged
    with pytest.raises(ValueError, match="another pipeline config or corpus") as refused:
        DataCheckpointHandler().restore(  # the mismatch alone (was a TypeError)
            epath.Path(tmp_path / "data"), args=gp.CheckpointRestore(restored)
        )
    assert "What changed" not in str(refused.value)
    state = it.get_state()
    assert all(type(v) is int for v in state.values())  # the state itself stays ints


def test_packing_changes_name_the_packing_and_both_values(tmp_path):
    # Before: "max_segments: 2 -> None; packing: best_fit -> None".
    from grainpack.pipeline.dataset import describe_changes

    gp.write_corpus(str(tmp_path / "a"), random_documents(np.random.default_rng(0), 30, 1, 40))
    base = {"sources": {"a": str(tmp_path / "a")}, "block": 8, "global_batch_size": 4}
    concat, best_fit, limited = (
        iter(gp.make_dataset(gp.PipelineConfig(**base, **packing))).describe()
        for packing in ({}, {"packing": "best_fit"}, {"packing": "best_fit", "max_segments": 2})
    )
    assert describe_changes(limited, concat) == "packing: best_fit with max_segments=2 -> concat"
    assert describe_changes(best_fit, concat) == "packing: best_fit -> concat"
    assert describe_changes(best_fit, limited) == "max_segments (documents a row): no limit -> 2"
    assert describe_changes(limited, best_fit) == "max_segments (documents a row): 2 -> no limit"


def test_warnings_for_doubled_or_missing_boundaries_and_mixed_tokenizers(tmp_path, tokenizer_files):
    from grainpack.ingest.build import build_corpus

    (tmp_path / "a.jsonl").write_text("".join(f'{{"text": "doc {i}"}}\n' for i in range(50)))
    eos, plain, other = (str(tmp_path / name) for name in ("eos", "plain", "bpe"))
    build_corpus(tmp_path / "a.jsonl", eos, tokenizer="bytes", eos=256, workers=1)
    build_corpus(tmp_path / "a.jsonl", plain, tokenizer="bytes", workers=1)
    build_corpus(tmp_path / "a.jsonl", other, tokenizer=tokenizer_files["tiktoken"], workers=1)
    config = {"block": 8, "global_batch_size": 2}
    with pytest.warns(UserWarning, match="built with eos 256 appended to every document"):
        gp.make_dataset(gp.PipelineConfig(sources={"e": eos}, boundary_id=256, **config))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gp.make_dataset(gp.PipelineConfig(sources={"a": plain, "b": other}, **config))
    messages = sorted(str(w.message) for w in caught)
    assert len(messages) == 3
    assert re.match(r"source 'a' was built without an end-of-document token", messages[0])
    assert re.match(r"source 'b' was built without an end-of-document token", messages[1])
    assert re.search(r"different tokenizers \('a': bytes , 'b': tiktoken", messages[2])
    with pytest.warns(UserWarning, match="'a' was built without an end-of-document token"):
        gp.make_dataset(gp.PipelineConfig(sources={"a": plain, "e": eos}, **config))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one separator between documents: no warning
        gp.make_dataset(gp.PipelineConfig(sources={"e": eos}, **config))
        gp.make_dataset(gp.PipelineConfig(sources={"a": plain}, boundary_id=10, **config))
        gp.make_dataset(gp.PipelineConfig(sources={"a": plain}, unit="windows", **config))


@pytest.mark.slow
def test_a_stream_and_a_counted_state_go_past_max_slots(two_sources, monkeypatch):
    # MAX_SLOTS bounds counting from scratch; a live stream counts as it goes, and a state
    # with its counts (blocked order) restores past it. Lowered here to reach it quickly.
    from grainpack.index import mixing

    monkeypatch.setattr(mixing, "MAX_SLOTS", 1 << 16)
    paths, _ = two_sources
    cfg = gp.PipelineConfig(
        sources=paths, block=8, global_batch_size=64, order=gp.BlockedOrder(64, 4)
    )
    it = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    for _ in range(1_100):  # slot 70,400 > 2**16
        next(it)
    state = it.get_state()
    expected = next(it)
    fresh = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    fresh.set_state(state)
    for key, value in next(fresh).items():
        np.testing.assert_array_equal(value, expected[key], err_msg=key)
    uncounted = {k: v for k, v in state.items() if k != "counts"}
    with pytest.raises(ValueError, match="refuses more than MAX_SLOTS"):  # v1: from 0
        iter(gp.make_dataset(cfg, process_index=0, process_count=1)).set_state(
            {**uncounted, "version": 1}
        )


def test_an_exception_inside_next_skips_nothing(two_sources, monkeypatch):
    # Ctrl-C (or any error) while rows are read: the next call gives that same step.
    from grainpack.pipeline.gather import RowReader

    paths, _ = two_sources
    cfg = gp.PipelineConfig(sources=paths, block=8, global_batch_size=4, seed=2)
    expected = take(iter(gp.make_dataset(cfg, process_index=0, process_count=1)), 600)
    it = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    got = take(it, 5)
    read, calls = RowReader.read, []

    def interrupted_once(self, first, stop, **kwargs):
        calls.append(first)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return read(self, first, stop, **kwargs)

    monkeypatch.setattr(RowReader, "read", interrupted_once)
    while len(got) < 600:
        try:
            got.append(next(it))
        except KeyboardInterrupt:
            assert it.get_state()["step"] == len(got)
    assert len(calls) > 1  # interrupted once, then read again
    for step, (a, b) in enumerate(zip(got, expected)):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"{key} of step {step}")


@pytest.mark.slow
def test_a_second_interrupt_inside_the_recovery_skips_nothing(two_sources, monkeypatch):
    # Ctrl-C twice: once in next(), again while close() stops the workers. The stopped
    # iterator stayed in place: "Trying to advance a closed iterator", or with the timing
    # of a real Ctrl-C the batches it had read ahead were skipped.
    from grainpack.pipeline.elements import ExpandedBatches

    paths, _ = two_sources
    cfg = gp.PipelineConfig(sources=paths, block=8, global_batch_size=4, seed=2)
    expected = take(iter(gp.make_dataset(cfg, process_index=0, process_count=1)), 40)
    it = iter(gp.make_dataset(cfg, process_index=0, process_count=1, worker_count=2))
    got = take(it, 5)
    step, close = ExpandedBatches.__next__, ExpandedBatches.close

    def interrupted_next(self):  # once
        monkeypatch.setattr(ExpandedBatches, "__next__", step)
        raise KeyboardInterrupt

    def interrupted_close(self):  # once, as the workers have stopped
        monkeypatch.setattr(ExpandedBatches, "close", close)
        close(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(ExpandedBatches, "__next__", interrupted_next)
    monkeypatch.setattr(ExpandedBatches, "close", interrupted_close)
    with pytest.raises(KeyboardInterrupt):
        next(it)
    assert it.get_state()["step"] == 5
    got += take(it, 35)
    it.close()
    for step, (a, b) in enumerate(zip(got, expected)):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"{key} of step {step}")


@pytest.mark.slow
def test_restarted_workers_start_from_the_counts_of_the_step(two_sources):
    # A worker restart (close(), as after an online-schedule update) sent the workers a
    # pipeline without counts, and each counted every earlier slot from 0: O(t) per restart.
    from grainpack.pipeline.batches import PipelineBatches

    paths, _ = two_sources
    cfg = gp.PipelineConfig(
        sources=paths,
        weights={"en": 0.6, "fr": 0.4},
        block=8,
        global_batch_size=4,
        order=gp.BlockedOrder(4, 2),
    )
    expected = take(iter(gp.make_dataset(cfg, process_index=0, process_count=1)), 6)
    it = iter(gp.make_dataset(cfg, process_index=0, process_count=1, worker_count=1))
    got = take(it, 3)
    it.close()
    got += take(it, 3)  # the restarted worker's pipeline is anchored at step 3
    it.close()
    counts = PipelineBatches(cfg).mixer.counts_before(12)
    assert it._batches.anchor == (12, tuple(counts.tolist())) and counts.sum() == 12
    for step, (a, b) in enumerate(zip(got, expected, strict=True)):
        for key in b:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"step {step} {key}")


def test_an_iterator_does_not_pickle_and_says_what_does(two_sources):
    import pickle

    paths, _ = two_sources
    cfg = gp.PipelineConfig(sources=paths, block=8, global_batch_size=4, seed=2)
    dataset = gp.make_dataset(cfg, process_index=0, process_count=1)
    again = pickle.loads(pickle.dumps(dataset))  # the dataset does
    it = iter(dataset)
    first = next(it)
    with pytest.raises(TypeError, match=r"does not pickle .*save it\.get_state\(\) \(JSON\)"):
        pickle.dumps(it)  # was "cannot pickle '_thread.lock' object"
    np.testing.assert_array_equal(next(iter(again))["inputs"], first["inputs"])
