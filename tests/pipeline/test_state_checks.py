"""States that verify themselves (issue 37, point 1): the check value over every field, and
the per-source counts recounted from slot 0, on every process.

    python -m pytest -q tests/pipeline/test_state_checks.py
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import grainpack as gp
from grainpack.pipeline import dataset
from grainpack.pipeline.state import check_damage, state_check

BLOCKED = gp.BlockedOrder(block_docs=4, window_blocks=2)
# a stage that takes only source a from step 1025 (slot 65,600: past the first 2**16-slot
# block, so that b and c have counted rows at the block's start)
A_ONLY = [(0, {"a": 0.2, "b": 0.4, "c": 0.4}), (1025, {"a": 1.0, "b": 0.0, "c": 0.0})]
FIELDS = ("version", "step", "process_index", "process_count", "fingerprint", "digest")


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("sources")
    rng = np.random.default_rng(37)
    paths = {}
    for name in "abc":
        docs = [rng.integers(1, 60, size=rng.integers(2, 30)) for _ in range(40)]
        paths[name] = str(root / name)
        gp.write_corpus(pathlib.Path(paths[name]), docs)
    return paths


def schedule_config(sources: dict[str, str]) -> gp.PipelineConfig:
    return gp.PipelineConfig(
        sources=sources, block=8, global_batch_size=64, order=BLOCKED, weights=A_ONLY
    )


def fixed_config(sources: dict[str, str]) -> gp.PipelineConfig:
    weights = {"a": 0.5, "b": 0.25, "c": 0.25}
    return gp.PipelineConfig(
        sources=sources, block=8, global_batch_size=8, order=BLOCKED, weights=weights
    )


def iterator(config: gp.PipelineConfig, p: int = 0, count: int = 1) -> gp.PipelineIterator:
    return iter(gp.make_dataset(config, process_index=p, process_count=count))


def moved(state: dict, source_from: int, source_to: int, rows: int = 3) -> dict:
    """``rows`` rows moved from one source's count to another's (the total unchanged), and
    the check value computed again: a deliberate edit, not damage."""
    counts = list(state["counts"])
    counts[source_from] -= rows
    counts[source_to] += rows
    edited = {**state, "counts": counts}
    return {**edited, "check": state_check(edited)}


def refused(config, state, p=0, count=1) -> str:
    """The message of the ``ValueError`` that ``set_state(state)`` raises; the iterator is
    left at step 0."""
    it = iterator(config, p, count)
    with pytest.raises(ValueError) as info:
        it.set_state(state)
    assert it.step == 0
    return str(info.value)


def test_counts_moved_between_sources_are_refused_in_a_stage_that_takes_only_a(sources):
    config = schedule_config(sources)
    state = iterator(config).state_after(1030)  # slot 65,920, in the stage of source a only
    assert state["counts"] == [13584, 26369, 25967]
    edited = moved(state, 2, 1)  # 3 rows from c to b, the check value recomputed
    message = refused(config, edited)
    assert message == (
        "corrupt grainpack iterator state: field 'counts' disagrees with the slot hash before "
        "slot 65,920 (step 1,030): source 'b': 26372 in the state, 26369 by the slot hash; "
        "source 'c': 25964 in the state, 25967 by the slot hash; the state was edited or "
        "damaged; restore the state the checkpoint saved (or an earlier checkpoint)"
    )
    # the same edit without its check value recomputed: the counts are named, and the check
    message = refused(config, {**edited, "check": state["check"]})
    assert "source 'b': 26372 in the state, 26369 by the slot hash" in message
    assert message.endswith(
        "(Its check value does not match either: the check value "
        f"{state['check']} is not that of the other fields: more than one bit or digit of them "
        "(or of the check value) changed, so which field is not known.)"
    )


def test_beyond_the_recount_the_edit_is_what_the_block_check_cannot_see(sources, monkeypatch):
    # What RECOUNT_SLOTS bounds (the README says so): past it, counts are only checked
    # against the slots since the start of their 2**16-slot block, and the recomputed batch
    # holds no row of b or c, so an edit that recomputes the check value passes.
    config = schedule_config(sources)
    edited = moved(iterator(config).state_after(1030), 2, 1)
    monkeypatch.setattr(dataset, "RECOUNT_SLOTS", 65_919)
    it = iterator(config)
    it.set_state(edited)
    assert it.step == 1030


@pytest.mark.parametrize("process", range(4))
def test_counts_moved_between_sources_are_refused_on_every_process(sources, process):
    config = fixed_config(sources)
    state = iterator(config, process, 4).state_after(8200)  # slot 65,600
    assert state["counts"] == [33156, 16204, 16240]
    for source_from, source_to in ((2, 1), (1, 2), (0, 1)):
        message = refused(config, moved(state, source_from, source_to), process, 4)
        assert "field 'counts' disagrees with the slot hash before slot 65,600" in message
    # the sources of this process's rows of batch 8199, the one the restore recomputes:
    # process 3 holds no row of b or c, so the anchor and the digest alone let it pass
    mixer = iterator(config, process, 4)._batches.mixer
    rows = mixer.choices(8199 * 8, 8200 * 8)[process::4].tolist()
    assert rows == [[0, 1], [0, 2], [0, 2], [0, 0]][process]


def test_a_state_without_its_check_value_restores_exactly(sources):
    # states written before the check value (no "check") are still read, fully checked else
    config = fixed_config(sources)
    state = iterator(config, 1, 4).state_after(8200)
    older = {k: v for k, v in state.items() if k != "check"}
    it = iterator(config, 1, 4)
    it.set_state(older)
    want = it._batches.batch(8200, 1)
    got = next(it)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key])
    assert it.get_state() == iterator(config, 1, 4).state_after(8201)
    counts = list(older["counts"])
    counts[1], counts[2] = counts[1] + 3, counts[2] - 3
    assert "field 'counts' disagrees" in refused(config, {**older, "counts": counts}, 1, 4)


def flipped(state: dict, field: str, bit: int, index: int | None = None) -> dict:
    if index is None:
        return {**state, field: state[field] ^ (1 << bit)}
    values = list(state[field])
    values[index] ^= 1 << bit
    return {**state, field: values}


def named(field: str, index: int | None, message: str) -> bool:
    """Whether ``message`` names the field (a count by its index and source)."""
    if index is not None:
        return f"field counts[{index}] (source {'abc'[index]!r})" in message
    return f"'{field}'" in message or f"{field} " in message or f"{field}=" in message


CASES = [
    *((field, None) for field in (*FIELDS, "check")),
    *(("counts", j) for j in range(3)),
]


@pytest.mark.parametrize(("field", "index"), CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("bit", [0, 3, 17, 62])
def test_a_bit_flipped_field_is_refused_naming_it_on_every_process(sources, field, index, bit):
    config = fixed_config(sources)
    for process in range(4):
        state = iterator(config, process, 4).state_after(8200)
        bad = flipped(state, field, bit, index)
        message = refused(config, bad, process, 4)
        assert named(field, index, message), message
        assert check_damage(bad, "abc").field == field


@pytest.mark.parametrize("field", [*FIELDS, "check"])
def test_a_bit_flipped_field_of_an_exact_order_state_is_refused(sources, field):
    config = gp.PipelineConfig(sources=sources, block=8, global_batch_size=4, seed=5)
    state = iterator(config, 1, 2).state_after(7)
    assert "counts" not in state and state["version"] == 1
    for bit in (0, 9, 61):
        message = refused(config, flipped(state, field, bit), 1, 2)
        assert named(field, None, message), message


def test_a_changed_digit_is_named_with_the_value_saved(sources):
    config = fixed_config(sources)
    state = iterator(config).state_after(12)
    digest = str(state["digest"])
    edited = {**state, "digest": int(digest[:-1] + str((int(digest[-1]) + 1) % 10))}
    message = refused(config, edited)
    assert message.startswith("resume verification failed: batch 11 recomputed")
    assert message.endswith(
        f"(Its check value does not match either: field 'digest' is {edited['digest']}, but "
        f"the check value was computed with {state['digest']} (one bit or digit changed).)"
    )


def test_a_consistent_edit_of_two_fields_is_refused_by_the_check_value(sources):
    # step 12 -> 20 with the digest of batch 19: every field looks right (the batch, the
    # counts), but the check value was computed over the state saved at step 12
    config = fixed_config(sources)
    state = iterator(config).state_after(12)
    later = iterator(config).state_after(20)
    edited = {**later, "check": state["check"]}
    assert refused(config, edited) == (
        f"corrupt grainpack iterator state: the check value {state['check']} is not that of "
        "the other fields: more than one bit or digit of them (or of the check value) "
        "changed, so which field is not known; restore the state the checkpoint saved (or an "
        "earlier checkpoint)"
    )


def test_a_damaged_fingerprint_is_refused_even_when_mismatches_are_ignored(sources):
    config = fixed_config(sources)
    state = iterator(config).state_after(3)
    bad = flipped(state, "fingerprint", 40)
    it = iter(
        gp.make_dataset(config, process_index=0, process_count=1, ignore_fingerprint_mismatch=True)
    )
    with pytest.raises(ValueError, match=r"corrupt grainpack iterator state: field 'fingerprint'"):
        it.set_state(bad)
    assert it.step == 0


def test_the_check_value_is_written_last_over_every_field(sources):
    state = iterator(fixed_config(sources)).state_after(5)
    assert list(state) == [*FIELDS, "counts", "check"]
    assert state["check"] == state_check(state)
    assert 0 <= state["check"] < 2**63
    assert state_check({**state, "extra": 0}) != state["check"]  # a key added changes it
