"""grainpack.index.schedule: stages, ramps, segments and mean weights (exact values)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from grainpack.index.schedule import (
    MixtureSchedule,
    Segment,
    Stage,
    mean_probabilities,
    probabilities_at,
    segment_probabilities,
)

# Weights exact in binary, so every ramp value below is exact too.
SCHEDULE = MixtureSchedule([(0, (0.75, 0.25)), Stage(10, (0.25, 0.75), ramp=4), (20, (0.5, 0.5))])


def test_weights_by_step_golden():
    # steps 10..13 ramp from (0.75, 0.25) by a quarter of (-0.5, 0.5) per step; 14 arrives
    expected = {
        0: (0.75, 0.25),
        9: (0.75, 0.25),
        10: (0.75, 0.25),
        11: (0.625, 0.375),
        12: (0.5, 0.5),
        13: (0.375, 0.625),
        14: (0.25, 0.75),
        19: (0.25, 0.75),
        20: (0.5, 0.5),
        10**12: (0.5, 0.5),
    }
    assert {t: SCHEDULE.probabilities(t) for t in expected} == expected


def test_segments_cover_exactly_the_steps_asked():
    ramp = Segment(10, 14, (0.25, 0.75), (0.75, 0.25))
    assert SCHEDULE.segments(0, 100) == [
        Segment(0, 10, (0.75, 0.25)),
        ramp,
        Segment(14, 20, (0.25, 0.75)),
        Segment(20, None, (0.5, 0.5)),
    ]
    assert SCHEDULE.segments(11, 12) == [ramp]
    assert SCHEDULE.segments(9, 11) == [Segment(0, 10, (0.75, 0.25)), ramp]
    assert SCHEDULE.segments(13, 14) == [ramp]
    assert SCHEDULE.segments(500, 900) == [Segment(20, None, (0.5, 0.5))]


@pytest.mark.parametrize("ramp", [1, 3, 7, 1000, 1_000_003])
def test_vectorized_ramp_weights_equal_the_scalar_ones_bit_for_bit(ramp):
    rng = np.random.default_rng(ramp)
    for _ in range(5):
        a, b = (tuple(float(x) for x in rng.dirichlet(np.ones(4))) for _ in range(2))
        segment = Segment(123_456, 123_456 + ramp, b, a)
        steps = np.unique(rng.integers(segment.start, segment.stop, size=300))
        got = segment_probabilities(segment, steps)
        for step, row in zip(steps.tolist(), got.tolist()):
            assert tuple(row) == probabilities_at(segment, step)


def test_mean_weights_over_ranges():
    # [0, 20): 10 steps of 0.75, the ramp 0.75 + 0.625 + 0.5 + 0.375, 6 steps of 0.25
    assert mean_probabilities(SCHEDULE, 0, 20) == (0.5625, 0.4375)
    assert mean_probabilities(SCHEDULE, 3, 3) == (0.75, 0.25)  # empty: the weights of 3
    assert mean_probabilities(SCHEDULE, 20, 10**9) == (0.5, 0.5)  # constant: exactly
    for start, stop in [(5, 12), (11, 13), (12, 31), (0, 1000)]:
        brute = [
            math.fsum(SCHEDULE.probabilities(t)[j] for t in range(start, stop)) / (stop - start)
            for j in range(2)
        ]
        assert mean_probabilities(SCHEDULE, start, stop) == pytest.approx(brute, abs=1e-15)


def test_stages_with_unchanged_weights_merge_into_fixed_weights():
    probs = (0.3, 0.7)
    merged = MixtureSchedule([(0, probs), (50, probs), Stage(90, probs, ramp=5)])
    assert merged.constant == probs
    assert merged.stages == (Stage(0, probs, 0),)
    assert merged == MixtureSchedule([(0, probs)])
    assert SCHEDULE.constant is None
    assert SCHEDULE.description() == [
        {"start": 0, "probabilities": [0.75, 0.25], "ramp": 0},
        {"start": 10, "probabilities": [0.25, 0.75], "ramp": 4},
        {"start": 20, "probabilities": [0.5, 0.5], "ramp": 0},
    ]


@pytest.mark.parametrize(
    ("stages", "error", "match"),
    [
        ([], TypeError, "non-empty list of stages"),
        ("ab", TypeError, "non-empty list of stages"),
        ([(0, (1.0,)), 5], TypeError, r"stage 1 must be \(start_step, weights\)"),
        ([(0, (1.0,), 0, 1)], TypeError, r"stage 0 must be \(start_step, weights\)"),
        ([(5, (1.0,))], ValueError, "first stage must start at step 0"),
        ([(0, (1.0,), 3)], ValueError, "without a ramp"),
        ([(0, (1.0, 0.0)), (0, (0.0, 1.0))], ValueError, "stage starts must increase"),
        ([(0, (1.0, 0.0)), (7, (0.5, 0.5)), (3, (0.0, 1.0))], ValueError, "must increase"),
        (  # out of order, not a ramp past the next stage
            [(0, (1.0, 0.0)), (7, (0.5, 0.5), 8), (3, (0.0, 1.0))],
            ValueError,
            r"stage 2 \(start 3\): stage starts must increase",
        ),
        ([(0, (1.0, 0.0)), (7, (1.0,))], ValueError, "stage 1 .*1 weights, but stage 0 has 2"),
        (
            [(0, (1.0, 0.0)), (7, (0.5, 0.5), 10), (12, (0.0, 1.0))],
            ValueError,
            "ramp of 10 steps runs past the next stage's start",
        ),
        (  # a numpy start is an int too
            [(0, (1.0, 0.0)), (7, (0.5, 0.5), 10), (np.int64(12), (0.0, 1.0))],
            ValueError,
            "ramp of 10 steps runs past the next stage's start",
        ),
        ([(0, (0.6, 0.6))], ValueError, r"stage 0 \(start 0\): probs must sum to 1"),
        ([(0, (1.0, 0.0)), (4, (-0.5, 1.5))], ValueError, r"stage 1 \(start 4\).*>= 0"),
        ([(0, "ab")], TypeError, "weights must be a sequence of probabilities"),
        ([(-1, (1.0,))], ValueError, "stage 0 start must be >= 0"),
        ([(True, (1.0,))], TypeError, "stage 0 start must be an int"),
        ([(0, (1.0, 0.0)), (2**53, (0.0, 1.0))], ValueError, "must be < 2\\*\\*53"),
    ],
)
def test_bad_schedules_are_refused_naming_the_stage(stages, error, match):
    with pytest.raises(error, match=match):
        MixtureSchedule(stages)
