"""Tests for grainpack.mixing: slot -> source choice, occurrence counts, probabilities."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grainpack.index.hashing import splitmix64
from grainpack.index.mixing import (
    BLOCK_SLOTS,
    MAX_SLOTS,
    SlotMixer,
    choose_source,
    choose_sources,
    cumulative_probabilities,
    cumulative_thresholds,
    occurrences_from,
    source_thresholds,
)
from grainpack.index.schedule import MixtureSchedule, Stage
from grainpack.index.weights import content_probabilities, normalize_probabilities, token_premiums

MASK = 2**64 - 1
K = 0x100000001
PROBS = [
    (0.1, 0.2, 0.7),
    (1 / 3, 1 / 3, 1 / 3),
    (0.5, 0.5),
    (1e-12, 1 - 1e-12),
    (0.25, 0.0, 0.75),  # a disabled source
    (0.3, 0.3, 0.3, 0.1 - 5e-7),  # sums to 1 - 5e-7: the top of [0, 1) falls to the last
]
SEEDS = [0, 1, 7, 2**32 - 1, 2**63, 2**64 - 1, 2**64 + 3, 12345678901234567890]


def unsplitmix64(z: int) -> int:
    """Inverse of splitmix64 (each step is a bijection on 64-bit words)."""

    def unxorshift(y: int, s: int) -> int:
        x = y
        for _ in range(64 // s + 1):
            x = y ^ (x >> s)
        return x

    z = unxorshift(z, 31)
    z = (z * pow(0x94D049BB133111EB, -1, 2**64)) & MASK
    z = unxorshift(z, 27)
    z = (z * pow(0xBF58476D1CE4E5B9, -1, 2**64)) & MASK
    z = unxorshift(z, 30)
    return (z - 0x9E3779B97F4A7C15) & MASK


def slot_with_hash(seed: int, z: int) -> int:
    """The slot in [0, 2**64) whose hash under `seed` is exactly `z`."""
    return (unsplitmix64(z) - seed * K) & MASK


def test_unsplitmix64_inverts():
    for x in [0, 1, 2**63, MASK, 0xDEADBEEF]:
        assert unsplitmix64(splitmix64(x)) == x


@pytest.mark.parametrize(
    ("seed", "probs", "expected"),
    [
        # Hashes of slots 0..7 under seed 0 start e2, 91, 97, 1d, 6e, 63, bd, 63 (hex):
        # u >= 0.5 exactly when the first hex digit is >= 8.
        (0, (0.5, 0.5), [1, 1, 1, 0, 0, 0, 1, 0]),
        # Cuts at 0.1 (0x19..) and 0.3 (0x4c..): only 0x1d.. lands in the middle source.
        (0, (0.1, 0.2, 0.7), [2, 2, 2, 1, 2, 2, 2, 2]),
        # Seed 1 hashes 0x100000001 + s: first digits 2, b, a, 6, 5, 1, 2, 8.
        (1, (0.5, 0.5), [0, 1, 1, 0, 0, 0, 0, 1]),
        # One source: always 0, whatever the hash.
        (5, (1.0,), [0] * 8),
    ],
)
def test_choose_source_golden(seed, probs, expected):
    cum = cumulative_probabilities(probs)
    assert [choose_source(seed, s, cum) for s in range(8)] == expected
    assert choose_sources(seed, 0, 8, cum).tolist() == expected


def test_cumulative_probabilities_is_python_running_sum():
    # 0.1 + 0.2 in floats is 0.30000000000000004, not 0.3: the running sum keeps it.
    assert cumulative_probabilities((0.1, 0.2, 0.7)) == (0.1, 0.30000000000000004, 1.0)


def test_source_thresholds_are_exact_cuts():
    # (2**63 - 1) / 2**64 rounds to 0.5 in double precision (ties to even), so the cut for
    # 0.5 is 2**63 - 2**9, not 2**63; likewise 1.0 cuts at 2**64 - 2**10.
    assert source_thresholds((0.5, 1.0)) == (2**63 - 2**9, 2**64 - 2**10)
    assert source_thresholds((0.0, 2.0)) == (0, 2**64)
    for probs in PROBS:
        cum = cumulative_probabilities(probs)
        for c, t in zip(cum, source_thresholds(cum), strict=True):
            if t > 0:
                assert (t - 1) / 2**64 < c
            if t < 2**64:
                assert not t / 2**64 < c


@pytest.mark.parametrize("probs", PROBS)
@pytest.mark.parametrize("seed", SEEDS)
def test_choose_sources_matches_scalar_at_threshold_edges(seed, probs):
    # Build slots whose hashes sit exactly at, just below and just above every cut.
    cum = cumulative_probabilities(probs)
    zs = {0, 1, MASK - 1, MASK}
    for t in source_thresholds(cum):
        zs.update(z for z in range(t - 3, t + 3) if 0 <= z <= MASK)
    for z in sorted(zs):
        slot = slot_with_hash(seed, z)
        got = choose_sources(seed, slot, slot + 1, cum).tolist()
        assert got == [choose_source(seed, slot, cum)], (seed, probs, hex(z))


@pytest.mark.parametrize("probs", PROBS)
def test_choose_sources_matches_scalar_over_many_slots(probs):
    cum = cumulative_probabilities(probs)
    for seed in SEEDS[:4]:
        start = seed % 1000 * 1_000_003
        expected = [choose_source(seed, s, cum) for s in range(start, start + 3000)]
        assert choose_sources(seed, start, start + 3000, cum).tolist() == expected


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**70),
    st.integers(0, 2**66),
    st.lists(st.floats(1e-9, 1.0), min_size=1, max_size=5),
)
def test_choose_sources_equals_scalar_property(seed, start, weights):
    total = sum(weights)
    probs = normalize_probabilities([w / total for w in weights], len(weights))
    cum = cumulative_probabilities(probs)
    got = choose_sources(seed, start, start + 64, cum)
    assert got.dtype == np.int64
    assert got.tolist() == [choose_source(seed, s, cum) for s in range(start, start + 64)]


def test_choose_sources_empty_range_and_validation():
    assert choose_sources(0, 5, 5, (0.5, 1.0)).tolist() == []
    with pytest.raises(ValueError, match="stop must be >= 5"):
        choose_sources(0, 5, 4, (0.5, 1.0))
    with pytest.raises(ValueError, match="non-decreasing"):
        choose_sources(0, 0, 4, (0.7, 0.2, 1.0))


@pytest.mark.parametrize("probs", [(0.5, 0.5), (0.1, 0.2, 0.7), (1.0,)])
def test_slot_mixer_counts_before_matches_bincount(probs):
    mixer = SlotMixer(3, probs)
    cum = cumulative_probabilities(probs)
    n = len(probs)
    for slot in [0, 1, BLOCK_SLOTS - 1, BLOCK_SLOTS, 3 * BLOCK_SLOTS + 123, 2 * BLOCK_SLOTS]:
        expected = np.bincount(choose_sources(3, 0, slot, cum), minlength=n)
        assert mixer.counts_before(slot).tolist() == expected.tolist()


def test_slot_mixer_counts_between_matches_difference():
    mixer = SlotMixer(9, (0.3, 0.7))
    cum = cumulative_probabilities((0.3, 0.7))
    # A short range past the cache, then a long one through it, then a cached one.
    for a, b in [(10 * BLOCK_SLOTS + 5, 10 * BLOCK_SLOTS + 999), (17, 5 * BLOCK_SLOTS + 1), (3, 9)]:
        expected = np.bincount(choose_sources(9, a, b, cum), minlength=2)
        assert mixer.counts_between(a, b).tolist() == expected.tolist()


def test_slot_mixer_draws_occurrences_match_naive_walk():
    probs = (0.2, 0.5, 0.3)
    mixer = SlotMixer(42, probs)
    cum = cumulative_probabilities(probs)
    start, stop = BLOCK_SLOTS - 700, BLOCK_SLOTS + 900
    counts = [0, 0, 0]
    expected_src, expected_occ = [], []
    for s in range(stop):
        j = choose_source(42, s, cum)
        if s >= start:
            expected_src.append(j)
            expected_occ.append(counts[j])
        counts[j] += 1
    sources, occurrences = mixer.draws(start, stop)
    assert sources.tolist() == expected_src
    assert occurrences.tolist() == expected_occ


def test_slot_mixer_golden_draws():
    # Seed 0, (0.5, 0.5): sources 1, 1, 1, 0, 0, 0, 1, 0 (see the choice golden test), so the
    # occurrences count up separately per source.
    sources, occurrences = SlotMixer(0, (0.5, 0.5)).draws(0, 8)
    assert sources.tolist() == [1, 1, 1, 0, 0, 0, 1, 0]
    assert occurrences.tolist() == [0, 1, 2, 0, 1, 2, 3, 3]


def test_slot_mixer_rejects_bad_probs():
    with pytest.raises(TypeError, match="one probability per source"):
        SlotMixer(0, None)
    with pytest.raises(ValueError, match="sum to 1"):
        SlotMixer(0, (0.5, 0.6))


def test_occurrences_from_golden():
    assert occurrences_from(np.array([1, 1, 0]), np.array([0, 4])).tolist() == [4, 5, 0]


def test_normalize_probabilities_none_is_equal():
    assert normalize_probabilities(None, 3) == (1 / 3, 1 / 3, 1 / 3)


@pytest.mark.parametrize(
    ("probs", "error", "match"),
    [
        ((0.5,), ValueError, "one value per source"),  # wrong length
        ((float("nan"), 1.0), ValueError, "finite"),  # NaN
        ((-0.5, 1.5), ValueError, r">= 0.*\[-0.5\]"),  # negative, named
        ((0.5, 0.4), ValueError, "divide each weight by their sum"),  # sum 0.9
        (("a", 1.0), TypeError, "real numbers"),  # not a number
        ("ab", TypeError, "sequence"),  # a string is not a list of probabilities
    ],
)
def test_normalize_probabilities_rejects(probs, error, match):
    with pytest.raises(error, match=match):
        normalize_probabilities(probs, 2)


def test_normalize_probabilities_keeps_values_within_tolerance():
    # The window loader's check: |sum - 1| < 1e-6, values unchanged (they feed the running sum).
    assert normalize_probabilities([0.5, 0.5 - 5e-7], 2) == (0.5, 0.5 - 5e-7)


def test_content_probabilities_worked_example():
    # English: 1.0 byte premium / 4.0 bytes per token = 0.25 tokens per unit of content;
    # Arabic: 1.4 / 2.8 = 0.5. Shares 0.25 : 0.5 = 1 : 2.
    premiums = token_premiums([1.0, 1.4], [4.0, 2.8])
    assert premiums == (0.25, 0.5)
    probs = content_probabilities(premiums)
    assert probs == pytest.approx((1 / 3, 2 / 3), rel=1e-15)
    # Content per language for 3000 tokens, in reference bytes: equal.
    assert 3000 * probs[0] * 4.0 / 1.0 == pytest.approx(3000 * probs[1] * 2.8 / 1.4)
    normalize_probabilities(probs, 2)  # usable as mixing probabilities


@pytest.mark.parametrize("premiums", [[1.0, 0.0], [1.0, -2.0], [float("inf"), 1.0]])
def test_content_probabilities_rejects_non_positive(premiums):
    with pytest.raises(ValueError, match="finite and > 0"):
        content_probabilities(premiums)


def test_content_probabilities_of_premiums_summing_past_the_float_range():
    # only the ratios count (was OverflowError from fsum)
    assert content_probabilities([1e308, 1e308]) == (0.5, 0.5)
    assert content_probabilities({"a": 1e308, "b": 1e308 / 4}) == {"a": 0.8, "b": 0.2}


def test_token_premiums_length_mismatch():
    with pytest.raises(ValueError, match="one value per language"):
        token_premiums([1.0, 1.2], [4.0])


def test_slot_mixer_consecutive_draws_equal_one_draw():
    # Batches of one stream, then queries that go backwards inside a block (memo not usable).
    whole = SlotMixer(4, (0.6, 0.4)).draws(BLOCK_SLOTS - 300, BLOCK_SLOTS + 500)
    mixer = SlotMixer(4, (0.6, 0.4))
    parts = [mixer.draws(a, a + 200) for a in range(BLOCK_SLOTS - 300, BLOCK_SLOTS + 500, 200)]
    assert np.array_equal(np.concatenate([p[0] for p in parts]), whole[0])
    assert np.array_equal(np.concatenate([p[1] for p in parts]), whole[1])
    fresh = SlotMixer(4, (0.6, 0.4))
    for slot in [BLOCK_SLOTS + 400, BLOCK_SLOTS + 10, 5, BLOCK_SLOTS + 499]:
        assert mixer.counts_before(slot).tolist() == fresh.counts_before(slot).tolist()


def test_slot_mixer_pickle_drops_cache():
    mixer = SlotMixer(1, (0.5, 0.5))
    expected = mixer.counts_before(40 * BLOCK_SLOTS + 3)
    data = pickle.dumps(mixer)
    assert len(data) < 1000
    assert pickle.loads(data).counts_before(40 * BLOCK_SLOTS + 3).tolist() == expected.tolist()


def test_content_probabilities_keep_the_names_of_a_mapping():
    # en needs 0.25 tokens per unit of content, ar 0.5: ar gets twice the token share
    assert content_probabilities({"en": 0.25, "ar": 0.5}) == {"en": 1 / 3, "ar": 2 / 3}


def test_anchor_starts_the_count_cache_at_a_restored_slot():
    probs = (0.2, 0.3, 0.5)
    fresh, anchored = SlotMixer(3, probs), SlotMixer(3, probs)
    slot = 10**7 + 12_345
    counts = fresh.counts_before(slot)
    anchored.anchor(slot, counts.tolist())
    for s in (slot, slot - 5_000, slot + 1, slot + 3 * BLOCK_SLOTS + 7):
        assert anchored.counts_before(s).tolist() == fresh.counts_before(s).tolist()
    assert anchored._prefix.shape[0] <= 5  # blocks cached from the anchor, not from slot 0
    assert anchored.counts_before(5).tolist() == fresh.counts_before(5).tolist()  # far before
    with pytest.raises(ValueError, match="summing to the slot"):
        SlotMixer(3, probs).anchor(slot, [1, 2, 3])
    with pytest.raises(ValueError, match="disagree with the slot hash"):
        fresh.anchor(slot, (counts + np.array([1, -1, 0])).tolist())  # cached counts: compared


# -- schedules: weights by step -----------------------------------------------------------


def cumulative_edge_values() -> list[float]:
    """Cumulative weights where the thresholds are delicate: powers of two (a shorter
    predecessor), their neighbours, odd and even significands, tiny, 1.0 and above it."""
    rng = np.random.default_rng(0)
    values = [0.0, 1e-300, 5e-324, 0.1, 0.3, 1 / 3, 0.5, 1.0, 1.0 + 2**-52, 1.0 + 1e-7]
    values += [2.0**-e for e in range(70)] + [3 * 2.0**-e for e in range(2, 70)]
    values += rng.random(500).tolist()
    values += (rng.random(500) * np.ldexp(1.0, -rng.integers(0, 70, 500))).tolist()
    return values + [math.nextafter(v, d) for v in values for d in (0.0, 2.0)]


def test_cumulative_thresholds_equal_the_scalar_binary_search():
    values = cumulative_edge_values()
    thresholds, never = cumulative_thresholds(np.array(values))
    got = [1 << 64 if n else t for t, n in zip(thresholds.tolist(), never.tolist())]
    assert got == [source_thresholds((v,))[0] for v in values]


@pytest.mark.parametrize("probs", PROBS)
def test_one_stage_schedule_is_fixed_weights_bit_for_bit(probs):
    fixed = SlotMixer(5, probs)
    normalized = normalize_probabilities(probs, len(probs))
    for schedule in (
        MixtureSchedule([(0, normalized)]),
        MixtureSchedule([(0, normalized), (40, normalized), Stage(90, normalized, ramp=9)]),
    ):
        staged = SlotMixer(5, schedule, slots_per_step=7)
        for a, b in [(0, 500), (BLOCK_SLOTS - 3, BLOCK_SLOTS + 700), (3 * BLOCK_SLOTS + 1, 4)]:
            b = max(a, b)
            for x, y in zip(fixed.draws(a, b), staged.draws(a, b)):
                assert np.array_equal(x, y)
            assert fixed.counts_before(b).tolist() == staged.counts_before(b).tolist()


def scalar_choices(seed, schedule, slots_per_step, start, stop):
    """The reference: each slot's step's weights, their running sums, the scalar choice."""
    return [
        choose_source(
            seed, s, cumulative_probabilities(schedule.probabilities(s // slots_per_step))
        )
        for s in range(start, stop)
    ]


SCHEDULES = [
    MixtureSchedule([(0, (0.5, 0.3, 0.2)), (5, (0.1, 0.1, 0.8), 3), (12, (0.2, 0.0, 0.8))]),
    MixtureSchedule([(0, (1.0, 0.0)), Stage(2, (0.0, 1.0), ramp=30), (40, (0.3, 0.7))]),
    MixtureSchedule([(0, (0.25, 0.25, 0.25, 0.25)), (1, (0.7, 0.1, 0.1, 0.1), 1)]),
]


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("slots_per_step", [1, 3, 64])
def test_scheduled_choices_equal_the_scalar_reference(schedule, slots_per_step):
    for seed in (0, 7, 2**64 - 1):
        mixer = SlotMixer(seed, schedule, slots_per_step=slots_per_step)
        stop = 50 * slots_per_step
        expected = scalar_choices(seed, schedule, slots_per_step, 0, stop)
        assert mixer.choices(0, stop).tolist() == expected
        for a in range(0, stop, max(1, stop // 23)):
            for b in (a + 1, a + slots_per_step + 2, stop):
                b = min(b, stop)
                assert mixer.choices(a, b).tolist() == expected[a:b]
                counts = np.bincount(expected[a:b], minlength=mixer.num_sources)
                assert mixer.counts_between(a, b).tolist() == counts.tolist()


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 2**64),
    st.integers(1, 50),
    st.lists(
        st.tuples(
            st.integers(1, 30),
            st.integers(0, 40),
            st.lists(st.floats(0.0, 1.0), min_size=3, max_size=3),
        ),
        min_size=1,
        max_size=4,
    ),
    st.integers(0, 3000),
)
def test_scheduled_choices_and_counts_property(seed, slots_per_step, raw, start):
    stages, at = [(0, (0.2, 0.3, 0.5))], 0
    for gap, ramp, weights in raw:
        at += gap + ramp
        total = sum(weights) or 1.0
        probs = tuple(w / total for w in weights) if sum(weights) else (0.0, 0.0, 1.0)
        stages.append(Stage(at - ramp, normalize_probabilities(probs, 3), ramp))
    schedule = MixtureSchedule(stages)
    mixer = SlotMixer(seed, schedule, slots_per_step=slots_per_step)
    stop = start + 200
    expected = scalar_choices(seed, schedule, slots_per_step, 0, stop)
    sources, occurrences = mixer.draws(start, stop)
    assert sources.tolist() == expected[start:]
    counts = np.bincount(expected[:start], minlength=3)
    assert occurrences.tolist() == occurrences_from(np.array(expected[start:]), counts).tolist()


def test_scheduled_counts_through_the_block_cache_and_an_anchor():
    # Stages and a ramp inside and across count blocks (65536 slots = 256 steps of 256).
    size = 256
    schedule = MixtureSchedule(
        [
            (0, (0.6, 0.3, 0.1)),
            (100, (0.1, 0.2, 0.7)),
            Stage(250, (0.3, 0.3, 0.4), ramp=30),
            (300, (0.5, 0.0, 0.5)),
        ]
    )
    mixer = SlotMixer(11, schedule, slots_per_step=size)
    slots = [0, 5, 100 * size - 1, 100 * size + 3, BLOCK_SLOTS + 17, 260 * size, 330 * size]
    stop = max(slots)
    choices = np.array(scalar_choices(11, schedule, size, 0, stop))
    for slot in slots:
        expected = np.bincount(choices[:slot], minlength=3)
        assert mixer.counts_before(slot).tolist() == expected.tolist()
    anchored = SlotMixer(11, schedule, slots_per_step=size)
    inside_ramp = 270 * size + 77  # in block 1
    anchored.anchor(inside_ramp, np.bincount(choices[:inside_ramp], minlength=3).tolist())
    for slot in (inside_ramp, inside_ramp + 5000, stop, inside_ramp - 3000, 200 * size):
        expected = np.bincount(choices[:slot], minlength=3)
        assert anchored.counts_before(slot).tolist() == expected.tolist()
    assert anchored._base == 1  # counted from the anchor (and back from it), never from 0


def test_realized_shares_per_stage_match_the_stage_weights():
    # 2 * 10**5 slots per stage; counts must lie within 5 standard deviations of the
    # expectation (for the ramp: the sum over its steps of the step's weights).
    size = 100
    schedule = MixtureSchedule(
        [(0, (0.6, 0.3, 0.1)), Stage(2000, (0.1, 0.2, 0.7), ramp=2000), (4000, (0.3, 0.0, 0.7))]
    )
    mixer = SlotMixer(2024, schedule, slots_per_step=size)
    for start, stop in [(0, 2000), (2000, 4000), (4000, 6000), (2500, 2700), (3700, 3900)]:
        counts = mixer.counts_between(start * size, stop * size)
        weights = np.array([schedule.probabilities(t) for t in range(start, stop)])
        expected = size * weights.sum(axis=0)
        sigma = np.sqrt(size * (weights * (1 - weights)).sum(axis=0))
        assert np.all(np.abs(counts - expected) <= 5 * sigma + 1e-9), (start, counts, expected)
    assert mixer.counts_between(400_000, 600_000)[1] == 0  # a weight of 0: never chosen


def test_scheduled_mixer_pickles_small_and_refuses_too_many_slots():
    mixer = SlotMixer(1, SCHEDULES[1], slots_per_step=8)
    expected = mixer.counts_before(10 * BLOCK_SLOTS + 3)
    data = pickle.dumps(mixer)
    assert len(data) < 2000
    assert pickle.loads(data).counts_before(10 * BLOCK_SLOTS + 3).tolist() == expected.tolist()
    with pytest.raises(ValueError, match="refuses more than MAX_SLOTS"):
        mixer.counts_before(MAX_SLOTS + 11 * BLOCK_SLOTS + 1)  # counted from block 10 on
    # from a known count (a restored state's, or a stream's cache) only the rest is counted
    anchored = SlotMixer(1, SCHEDULES[1], slots_per_step=8)
    anchored.anchor(MAX_SLOTS + 5, [MAX_SLOTS // 2, MAX_SLOTS // 2 + 5])
    anchored.check_cost(MAX_SLOTS + 5 + 3 * BLOCK_SLOTS)
    anchored.check_cost(2 * MAX_SLOTS)
    with pytest.raises(ValueError, match="refuses more than MAX_SLOTS"):
        anchored.check_cost(3 * MAX_SLOTS)
    assert repr(SlotMixer(0, MixtureSchedule([(0, (0.5, 0.5))]))) == (
        "SlotMixer(seed=0, probs=(0.5, 0.5))"  # a schedule that never changes is fixed weights
    )
