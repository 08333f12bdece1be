"""grainpack.bandit: LengthBandit's rates, by hand, frozen per epoch, with decay."""

from __future__ import annotations

import math

import pytest

from grainpack.curriculum.bandit import LengthBandit, UndecidedEpochError


def test_bandit_rates_hand_computed_and_frozen_per_epoch():
    bandit = LengthBandit(2, learning_rate=1.0, exploration=0.2, delay=2)
    assert bandit.rates(0) == bandit.rates(1) == (1.0, 1.0)
    with pytest.raises(UndecidedEpochError, match="epoch 2 is needed; call update"):
        bandit.rates(2)
    rates = bandit.update(0, [0.0, -2.0])
    # softmax(0, -2) = (1, e**-2) / (1 + e**-2); p = 0.8 * softmax + 0.1; rate = p / max(p)
    small = 0.8 / (1 + math.e**2) + 0.1
    assert rates == bandit.rates(2) == (1.0, pytest.approx(small / (1.0 - small), 1e-12))
    assert rates[1] == pytest.approx(0.2427954, abs=1e-7)
    assert bandit.rates(1) == (1.0, 1.0)  # decided epochs never change
    bandit.update(1, [float("nan"), 5.0])  # NaN: bucket 0 not observed, left alone
    assert bandit.rates(3)[0] < 1.0 and bandit.rates(3)[1] == 1.0
    assert bandit.history[2] == rates and bandit.updates == 2
    assert repr(bandit) == (
        "LengthBandit(num_buckets=2, learning_rate=1.0, exploration=0.2, delay=2, decay=0.0)"
    )


def test_bandit_decay_forgets_old_rewards():
    # h: (0, 0) -> +(1, 0) -> (0, -1) after shifting the max to 0; then rewards (0, 1):
    # without decay (0, -1) + (0, 1) = (0, 0): equal rates; with decay 0.5,
    # 0.5 * (0, -1) + (0, 1) = (0, 0.5): the second bucket is now favoured.
    plain = LengthBandit(2, delay=1)
    forgetful = LengthBandit(2, delay=1, decay=0.5)
    for bandit in (plain, forgetful):
        bandit.update(0, [1.0, 0.0])
        bandit.update(1, [0.0, 1.0])
    assert plain.rates(2) == (1.0, 1.0)
    assert forgetful.rates(2)[1] == 1.0 and forgetful.rates(2)[0] < 1.0
    assert forgetful.state_dict()["preferences"] == [-0.5, 0.0]


def test_rewards_that_overflow_the_preferences_are_refused():
    bandit = LengthBandit(2, learning_rate=10.0, delay=1)
    with pytest.raises(ValueError, match=r"rewards \[1e\+308, 0.0\] times learning_rate=10.0"):
        bandit.update(0, [1e308, 0.0])
    assert bandit.updates == 0
    # each preference finite, their difference not: the shift to a top of 0 overflows
    with pytest.raises(ValueError, match="overflow the preferences"):
        bandit.update(0, [1e307, -1e307])
    with pytest.raises(TypeError, match="epoch must be an int"):
        bandit.update(0.0, [0.0, 0.0])
    assert bandit.updates == 0 and bandit.state_dict()["preferences"] == [0.0, 0.0]
