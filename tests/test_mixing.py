"""Tests for grainpack.mixing: slot -> source choice, occurrence counts, probabilities."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grainpack.index.hashing import splitmix64
from grainpack.index.mixing import (
    BLOCK_SLOTS,
    SlotMixer,
    choose_source,
    choose_sources,
    cumulative_probabilities,
    occurrences_from,
    source_thresholds,
)
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
