"""Bad restores: another config, a tampered state, a step far away: refused or bounded.

Part of the bad-input catalogue; helpers in ``tests/bad_inputs.py``.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import orbax.checkpoint as ocp
import pytest
from bad_inputs import (  # noqa: F401
    DOCS,
    SOURCES,
    documents_of,
    edit_manifest,
    first_batch,
    fresh,
    pipeline,
    restamp,
    small_corpus,
    state_after,
    write_megatron_int64,
)

import grainpack as gp
from grainpack.cli.main import main as cli_main
from grainpack.index.stream import MIN_EPOCH_COST
from grainpack.pipeline.state import state_check

# -- restore --------------------------------------------------------------------------------------


ANOTHER_CONFIG = "another pipeline config or corpus.*ignore_fingerprint_mismatch=True"


def test_restore_refuses_another_config_or_corpus_unless_overridden(tmp_path, corpus):
    config = pipeline(corpus, block=8, global_batch_size=4)
    state = state_after(config, 3)
    for other in (
        pipeline(corpus, block=8, global_batch_size=4, seed=1),
        pipeline(corpus, block=8, global_batch_size=4, boundary_id=0),
        pipeline(corpus, block=9, global_batch_size=4),
    ):
        with pytest.raises(ValueError, match=ANOTHER_CONFIG):
            fresh(other).set_state(state)
    # the same path rewritten with one token changed: another corpus
    src = gp.open_corpus(corpus)
    docs = [src[i] for i in range(len(src))]
    docs[7][0] += 1
    gp.write_corpus(corpus, docs, overwrite=True)
    with pytest.raises(ValueError, match=ANOTHER_CONFIG):
        fresh(config).set_state(state)
    # explicitly accepted: continues at the saved step with the new data
    forced = fresh(config, ignore_fingerprint_mismatch=True)
    forced.set_state(state)
    expected = fresh(config)
    for _ in range(3):
        next(expected)
    got, want = next(forced), next(expected)
    assert forced.get_state()["step"] == 4
    for key in want:
        np.testing.assert_array_equal(got[key], want[key])


def test_restore_through_orbax_refuses_another_config(tmp_path, corpus):
    config = pipeline(corpus, block=8, global_batch_size=4)
    it = fresh(config)
    next(it)
    options = ocp.CheckpointManagerOptions(create=True)
    with ocp.CheckpointManager(tmp_path / "ckpt", options=options) as manager:
        manager.save(1, args=ocp.args.Composite(data=gp.CheckpointSave(it)))
        manager.wait_until_finished()
        other = fresh(pipeline(corpus, block=8, global_batch_size=4, seed=1))
        with pytest.raises(ValueError, match=ANOTHER_CONFIG):
            manager.restore(1, args=ocp.args.Composite(data=gp.CheckpointRestore(other)))


def test_restore_of_a_data_loader_refuses_another_config(corpus):
    config = pipeline(corpus, block=8, global_batch_size=4)
    loader = iter(gp.pipeline.make_data_loader(config, process_index=0, process_count=1))
    next(loader)
    state = loader.get_state()
    other = pipeline(corpus, block=8, global_batch_size=4, seed=1)
    with pytest.raises(ValueError, match="DataSource in checkpoint does not match"):
        iter(gp.pipeline.make_data_loader(other, process_index=0, process_count=1)).set_state(state)


def test_restore_detects_corpus_bytes_changed_behind_the_manifest(corpus):
    config = pipeline(corpus, block=8, global_batch_size=4)
    state = state_after(config, 3)
    tokens = corpus / "tokens-00000.bin"
    ids = np.fromfile(tokens, "<u2")
    ids.tofile(tokens)
    fresh(config).set_state(state)  # same bytes rewritten: fine
    ids[:] = ids[::-1]  # same manifest, same fingerprint, different tokens
    ids.tofile(tokens)
    with pytest.raises(ValueError, match="resume verification failed: batch 2 recomputed"):
        fresh(config).set_state(state)
    with pytest.raises(gp.CorpusError, match="sha256 mismatch"):
        gp.verify_corpus(corpus)


CURRICULUM = {"keep": 30}


def changing_selector(order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """A selector that reads outside state: not deterministic across runs."""
    return order[order < CURRICULUM["keep"]]


def test_restore_detects_a_selector_that_changed_between_runs(corpus, monkeypatch):
    config = pipeline(corpus, block=8, global_batch_size=4, sequence_selector=changing_selector)
    state = state_after(config, 3)
    monkeypatch.setitem(CURRICULUM, "keep", 20)  # same name, same fingerprint, other documents
    with pytest.raises(ValueError, match="resume verification failed"):
        fresh(config).set_state(state)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"digest": "flip"}, "resume verification failed: batch 2 recomputed"),
        ({"step": 4}, "resume verification failed: batch 3 recomputed"),
        ({"step": 1}, "resume verification failed: batch 0 recomputed"),
        ({"fingerprint": 12345}, ANOTHER_CONFIG),
        ({"version": 2}, "corrupt grainpack iterator state .*: a version 2 state has 'counts'"),
        ({"version": 3}, "a version 3 state has 'counts' and 'anchors', this one no 'counts'"),
        ({"version": 4}, "iterator state version 4 is not 1.*another grainpack release"),
        ({"version": 0}, "iterator state version 0 is not 1"),
        ({"version": 1, "counts": [4]}, "a version 1 state has no 'counts'"),
        ({"step": -1}, "corrupt grainpack iterator state"),
        ({"step": "3"}, "corrupt grainpack iterator state"),
        ({"fingerprint": "abc"}, "corrupt grainpack iterator state"),
        ({"process_index": 1}, "corrupt grainpack iterator state"),
        ({"extra": 1}, "not a grainpack iterator state: expected keys"),
    ],
    ids=lambda v: str(v),
)
def test_restore_refuses_a_tampered_state(corpus, change, message):
    config = pipeline(corpus, block=8, global_batch_size=4)
    state = state_after(config, 3)
    if change == {"digest": "flip"}:
        change = {"digest": state["digest"] ^ 1}
    it = fresh(config)
    with pytest.raises(ValueError, match=message):
        it.set_state(state | change)
    assert it.get_state()["step"] == 0  # a refused state changes nothing


def test_restore_refuses_a_state_without_keys(corpus):
    config = pipeline(corpus, block=8, global_batch_size=4)
    with pytest.raises(ValueError, match="not a grainpack iterator state"):
        fresh(config).set_state({"step": 3})
    with pytest.raises(ValueError, match="not a grainpack iterator state"):
        fresh(config).set_state({"next_index": 3})  # a plain Grain MapDataset state


def test_restore_refuses_a_zeroed_digest(corpus):
    config = pipeline(corpus, block=8, global_batch_size=4)
    state = state_after(config, 3)
    with pytest.raises(
        ValueError, match=r"digest is 0, .* but its step is 7: the state was edited"
    ):
        fresh(config).set_state(state | {"digest": 0, "step": 7})
    with pytest.raises(ValueError, match=r"step 0 with digest .* the state was edited"):
        fresh(config).set_state(state | {"step": 0})  # would restart the data silently


def test_restore_accepts_toggling_provenance(corpus):
    state = state_after(pipeline(corpus, block=8, global_batch_size=4, provenance=True), 3)
    it = fresh(pipeline(corpus, block=8, global_batch_size=4))
    it.set_state(state)
    assert it.get_state()["step"] == 3


# -- bounded work on any state --------------------------------------------------------------


FAR = 10**12


def two_sources(tmp_path: pathlib.Path, **fields: Any) -> gp.PipelineConfig:
    small_corpus(tmp_path / "a")
    small_corpus(tmp_path / "b")
    sources = {"a": str(tmp_path / "a"), "b": str(tmp_path / "b")}
    return gp.PipelineConfig(sources=sources, block=4, global_batch_size=2, **fields)


def within_a_second(call: Callable[[], Any]) -> Any:
    """Runs ``call``; the bound is about 1000 times what it takes (a hang takes hours)."""
    start = time.perf_counter()
    try:
        return call()
    finally:
        assert time.perf_counter() - start < 1.0


def test_far_step_with_one_source_is_cheap(tmp_path):
    """One source: the occurrence is the slot, so step 10**12 costs what step 0 costs."""
    config = pipeline(small_corpus(tmp_path / "c"))
    account = within_a_second(lambda: gp.mixing.mixture_accounting(config, FAR))["a"]
    assert account.rows == 2 * FAR  # every slot took the only source
    assert (account.epoch, account.epoch_fraction) == (2 * FAR // 3, 2 / 3)  # 3 rows an epoch
    state = state_after(config, 2) | {"step": FAR}
    state["digest"] = gp.pipeline.dataset.batch_digest(
        gp.pipeline.batches.PipelineBatches(config).batch(FAR - 1, 0)
    )
    state["check"] = state_check(state)  # a state made here, not damaged
    it = fresh(config)
    within_a_second(lambda: it.set_state(state))
    assert it.get_state()["step"] == FAR and next(it)["inputs"].shape == (2, 4)


def test_far_step_with_several_sources_is_refused_stating_the_cost(tmp_path):
    config = two_sources(tmp_path)
    cost = r"hashes every one of them: about [\d,]+ s and [\d,]+ MiB; grainpack refuses more "
    with pytest.raises(ValueError, match=cost):
        within_a_second(lambda: gp.mixing.mixture_accounting(config, FAR))
    state = state_after(config, 2) | {"step": FAR}
    it = fresh(config)
    with pytest.raises(ValueError, match=cost):
        within_a_second(lambda: it.set_state(state))
    assert it.get_state()["step"] == 0
    batches = gp.pipeline.batches.PipelineBatches(config)
    with pytest.raises(ValueError, match=cost):
        within_a_second(lambda: batches.batch(FAR, 0))


def keep_all(order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    return order


def test_far_step_with_a_selector_is_refused_stating_the_cost(tmp_path):
    config = pipeline(small_corpus(tmp_path / "c"), sequence_selector=keep_all)
    message = r"lies in about epoch [\d,]+ of source 'a', whose sequence_selector decides"
    with pytest.raises(ValueError, match=message):
        within_a_second(lambda: gp.mixing.mixture_accounting(config, FAR))
    state, it = state_after(config, 1) | {"step": FAR}, fresh(config)
    with pytest.raises(ValueError, match=message):
        within_a_second(lambda: it.set_state(state))


def keep_few_in_epoch_0(order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    return order[:1] if epoch == 0 else order


def test_replay_bound_counts_only_epochs_planned_at_once(tmp_path, monkeypatch):
    # The bound is on the work of one plan: a run planning a few epochs at a time passes any
    # number of epochs, and a small epoch 0 does not make the far epochs look more numerous
    # (epochs hold at most every document); a restore far ahead is refused before any work.
    path = tmp_path / "c"
    gp.write_corpus(path, [np.arange(1, 9)] * 6)  # 6 documents of 8 tokens: 10 rows of 5
    # an element plans about 100 epochs here; allow 150 at once (each costs MIN_EPOCH_COST)
    limit = 150 * MIN_EPOCH_COST
    monkeypatch.setattr(gp.pipeline.batches, "MAX_REPLAY_DOCUMENTS", limit)
    config = pipeline(path, sequence_selector=keep_few_in_epoch_0)
    it = fresh(config)
    assert it._batches.steps_per_element == 512  # a Grain element: about 100 epochs here
    for _ in range(3 * 512):
        next(it)
    rows = it._batches.rows(0)
    assert rows.planned_epochs >= 300 and rows.most_rows_per_epoch == 10
    state = it.get_state()
    restored = fresh(config)
    message = r"lies in about epoch [\d,]+ of source 'a', whose sequence_selector decides"
    with pytest.raises(ValueError, match=message):  # 300 epochs of 6 documents at once
        within_a_second(lambda: restored.set_state(state))
    replay = r"plans epochs 0..150 and more at once, over 2,457,600 document shuffles"
    with pytest.raises(ValueError, match=replay):  # the plan's own bound
        fresh(config)._batches.rows(0).locate(np.array([3000]))


def test_a_small_source_bounds_the_epochs_replayed_too(tmp_path):
    # 4 documents of 8 tokens, one row an epoch: 2**32 document shuffles would be 10**9
    # epochs of about 0.5 ms each; every epoch counts as MIN_EPOCH_COST documents.
    path = tmp_path / "c"
    gp.write_corpus(path, [np.arange(1, 9)] * 4)
    keep_all = gp.curriculum.LengthBuckets(edges=(100,), rates=(1.0, 1.0))
    config = pipeline(path, block=31, global_batch_size=1, sequence_selector=keep_all)
    message = r"lies in about epoch [\d,]+ of source 'a'.*at least [\d,]+ document shuffles"
    with pytest.raises(ValueError, match=message):
        within_a_second(lambda: gp.mixing.mixture_accounting(config, 10_000_000))
    assert gp.mixing.mixture_accounting(config, 3000)["a"].epoch == 3000  # allowed: about 2 s


def test_step_beyond_int64_slots_is_refused(tmp_path):
    config = pipeline(small_corpus(tmp_path / "c"))
    state, it = state_after(config, 1) | {"step": 2**62}, fresh(config)
    message = r"step [\d,]+ is no step of any run: its slots pass 2\*\*62"
    with pytest.raises(ValueError, match=message):
        within_a_second(lambda: it.set_state(state))


@pytest.mark.parametrize("sources", [1, 2])
def test_show_step_far_future_answers_or_refuses_quickly(tmp_path, sources):
    small_corpus(tmp_path / "a")
    small_corpus(tmp_path / "b")
    flags = [f"--source=a={tmp_path / 'a'}"] + [f"--source=b={tmp_path / 'b'}"] * (sources - 1)
    argv = ["show-step", str(FAR), *flags, "--block", "4", "--batch-size", "2", "--json"]
    code = within_a_second(lambda: cli_main(argv))
    assert code == (0 if sources == 1 else 1)
