"""Bandit states no bandit writes are refused at load, naming the field (issue 37, point 4)."""

from __future__ import annotations

import re

import pytest

import grainpack as gp


def _mixture() -> gp.curriculum.MixtureBandit:
    return gp.curriculum.MixtureBandit(["a", "b"], stage_steps=5, delay=1, exploration=0.1)


def _length() -> gp.curriculum.LengthBandit:
    return gp.curriculum.LengthBandit(2, delay=1, exploration=0.1)


@pytest.mark.parametrize("make", [_mixture, _length], ids=["mixture", "length"])
@pytest.mark.parametrize(
    "preferences", [[1e308, -1e308], [-1e308, 1e308], [0.5, 0.0], [-1.0, -2.0]]
)
def test_preferences_not_shifted_to_a_largest_of_0_are_refused(make, preferences):
    # [1e308, -1e308] loaded, and the next update overflowed and blamed the rewards.
    bandit = make()
    bandit.update(0, [1.0, 0.0])
    state = {**bandit.state_dict(), "preferences": preferences}
    restored = make()
    message = re.escape(
        f"state preferences={preferences} are not a saved bandit's: the largest must be "
        f"exactly 0 (a bandit stores them shifted so), got {max(preferences)}"
    )
    with pytest.raises(ValueError, match=message):
        restored.load_state_dict(state)
    assert restored.history == make().history  # a refused state changes nothing
    restored.load_state_dict(bandit.state_dict())  # a saved one loads
    assert restored.update(1, [0.0, 1.0]) == bandit.update(1, [0.0, 1.0])


def test_mixture_weights_of_0_under_exploration_are_refused():
    bandit = _mixture()
    bandit.update(0, [1.0, 0.0])
    state = bandit.state_dict()
    decided = {**state, "weights": [[0.5, 0.5], [1.0, 0.0]]}
    with pytest.raises(ValueError, match=re.escape(
        "state weights[1][1]=0.0: every decided row keeps each source at least exploration / "
        "sources = 0.05"
    )):  # fmt: skip
        _mixture().load_state_dict(decided)
    below = {**state, "weights": [[0.5, 0.5], [0.96, 0.04]]}
    with pytest.raises(ValueError, match=re.escape("state weights[1][1]=0.04")):
        _mixture().load_state_dict(below)
    initial = {**state, "weights": [[1.0, 0.0], *state["weights"][1:]]}
    with pytest.raises(ValueError, match=re.escape(
        "state weights[:1]=[(1.0, 0.0)]: the initial weights must all be > 0"
    )):  # fmt: skip
        _mixture().load_state_dict(initial)


def test_length_rates_of_0_under_exploration_are_refused():
    bandit = _length()
    bandit.update(0, [1.0, 0.0])
    state = {**bandit.state_dict(), "rates": [[1.0, 1.0], [1.0, 0.0]]}
    with pytest.raises(ValueError, match=re.escape(
        "state rates[1][1]=0.0: every decided row keeps each bucket at least exploration / "
        "buckets = 0.05"
    )):  # fmt: skip
        _length().load_state_dict(state)
