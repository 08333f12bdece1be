"""``MixtureBandit``: source weights learned online from rewards the training loop reports.

Online data mixing as an EXP3-style bandit over sources (exponential weights with uniform
exploration, every source observed every stage, as
:class:`~grainpack.curriculum.LengthBandit` does over length buckets). The run is cut into
stages of ``stage_steps`` global steps; the rewards of stage ``k`` decide the weights of
stage ``k + delay`` (``delay >= 1``, default 2), and stages ``< delay`` use the initial
weights. Decided weights are kept per stage and never change, so the source of every slot is
a pure function of (seed, slot, rewards of the stages ``<= stage - delay``), whenever and
wherever the pipeline computes it; a stage that is not decided yet raises
:class:`~grainpack.curriculum.UndecidedEpochError` instead of guessing. The training-loop
contract is in :mod:`grainpack.curriculum.online`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from grainpack.curriculum.bandit import (
    check_explored,
    check_saved_preferences,
    exponential_policy,
    learn_preferences,
)
from grainpack.curriculum.online import UndecidedEpochError
from grainpack.index.checks import check_float, check_floats, check_int
from grainpack.index.schedule import Segment
from grainpack.index.weights import normalize_probabilities

__all__ = ["MixtureBandit"]

_STATE_FORMAT = "grainpack.MixtureBandit/1"


class MixtureBandit:
    """Mixture weights per stage of ``stage_steps`` steps, learned from per-source rewards.

    Pass it as ``PipelineConfig(weights=bandit)``. Preferences ``h`` start at
    ``log(initial)`` (0 for equal weights). ``update(k, rewards)`` sets
    ``h = (1 - decay) * h + learning_rate * reward`` per source (NaN: source not observed in
    stage ``k``, left alone) and decides the weights of stage ``k + delay``:
    ``p = (1 - exploration) * softmax(h) + exploration / num_sources``, so every source keeps
    at least ``exploration / num_sources``. With the per-source training loss as the reward,
    sources the model finds hard get more of the mix (online data mixing); with the loss
    *improvement*, sources it is learning fastest from.

    Args:
      sources: the pipeline's source names, in its order (``list(config.sources)``).
      stage_steps: global steps per stage, >= 1.
      initial: name -> weight of the stages before the first decision (default equal);
        every weight > 0, summing to 1.
      learning_rate: step on the preferences per unit of reward, > 0.
      exploration: uniform mixing in ``(0, 1]``.
      delay: stages between the rewards of a stage and the first weights they change, >= 1.
        Weights of stage ``k + delay`` are needed at step ``(k + delay) * stage_steps``;
        the rewards of stage ``k`` are complete at step ``(k + 1) * stage_steps``: with
        ``delay=2`` the loop has a whole stage to report them (and the pipeline may read
        ahead up to that).
      decay: fraction of the preferences forgotten at each update, in ``[0, 1)``.

    Example:
      >>> bandit = MixtureBandit(["web", "code"], stage_steps=100, delay=1, exploration=0.2)
      >>> bandit.weights(0)
      {'web': 0.5, 'code': 0.5}
      >>> {k: round(v, 3) for k, v in bandit.update(0, {"web": 2.0, "code": 3.0}).items()}
      {'web': 0.315, 'code': 0.685}
      >>> bandit.probabilities(1) == bandit.history[1]
      True
    """

    def __init__(
        self,
        sources: Sequence[str],
        *,
        stage_steps: int,
        initial: Mapping[str, float] | None = None,
        learning_rate: float = 1.0,
        exploration: float = 0.1,
        delay: int = 2,
        decay: float = 0.0,
    ) -> None:
        if isinstance(sources, str) or not isinstance(sources, Sequence) or not sources:
            raise TypeError(
                f"sources must be a non-empty list of the pipeline's source names; got {sources!r}"
            )
        names = tuple(sources)
        if not all(isinstance(n, str) for n in names) or len(set(names)) != len(names):
            raise ValueError(f"sources must be distinct names (str); got {list(names)}")
        self._sources = names
        self._stage_steps = check_int("stage_steps", stage_steps, minimum=1)
        self._learning_rate = check_float("learning_rate", learning_rate, 0.0, math.inf)
        self._exploration = check_float("exploration", exploration, 0.0, 1.0, closed_high=True)
        self._delay = check_int("delay", delay, minimum=1)
        self._decay = check_float("decay", decay, 0.0, 1.0, closed_low=True)
        n = len(names)
        if initial is None:
            probs = normalize_probabilities(None, n)
        else:
            if not isinstance(initial, Mapping) or set(initial) != set(names):
                raise ValueError(
                    f"initial must map exactly the sources {list(names)} to weights; got "
                    f"{initial!r}"
                )
            probs = normalize_probabilities([initial[k] for k in names], n)
            if min(probs) <= 0.0:
                raise ValueError(
                    f"initial weights must be > 0 (exploration keeps every source); got "
                    f"{dict(initial)}"
                )
        self._initial = probs
        logs = [math.log(p) for p in probs]
        self._preferences = [h - max(logs) for h in logs]
        self._history: list[tuple[float, ...]] = [probs] * self._delay
        self.revision = 0  # bumped when load_state_dict replaces decided stages

    def __repr__(self) -> str:
        # Configuration only: the repr is in the pipeline fingerprint, which must not change
        # while the bandit learns. Checkpoints carry the state (state_dict).
        return (
            f"MixtureBandit(sources={list(self._sources)}, stage_steps={self._stage_steps}, "
            f"initial={list(self._initial)}, learning_rate={self._learning_rate!r}, "
            f"exploration={self._exploration!r}, delay={self._delay}, decay={self._decay!r})"
        )

    @property
    def sources(self) -> tuple[str, ...]:
        """Source names, in the pipeline's order."""
        return self._sources

    @property
    def num_sources(self) -> int:
        """Number of sources."""
        return len(self._sources)

    @property
    def stage_steps(self) -> int:
        """Global steps per stage."""
        return self._stage_steps

    @property
    def delay(self) -> int:
        """Stages between the rewards of a stage and the weights they decide."""
        return self._delay

    @property
    def updates(self) -> int:
        """Stages rewarded so far; the next ``update`` is for this stage."""
        return len(self._history) - self._delay

    @property
    def history(self) -> tuple[tuple[float, ...], ...]:
        """Decided weights (probabilities in source order), one row per stage."""
        return tuple(self._history)

    def stage_of(self, step: int) -> int:
        """The stage of global step ``step``."""
        return check_int("step", step) // self._stage_steps

    def policy(self) -> tuple[float, ...]:
        """The current policy ``p`` (what the next update starts from; sums to 1)."""
        return exponential_policy(self._preferences, self._exploration)

    def probabilities(self, stage: int) -> tuple[float, ...]:
        """Decided weights of ``stage``, in source order.

        Raises:
          UndecidedEpochError: ``stage`` is not decided yet.
        """
        stage = check_int("stage", stage)
        if stage < len(self._history):
            return self._history[stage]
        decided = len(self._history)
        raise UndecidedEpochError(
            f"MixtureBandit has decided the weights of stages 0..{decided - 1} (steps < "
            f"{decided * self._stage_steps}) only, but stage {stage} (from step "
            f"{stage * self._stage_steps}) is needed; call update({self.updates}, rewards) "
            f"earlier, at the latest before the pipeline reaches step "
            f"{decided * self._stage_steps}. If the data comes from Grain workers, call "
            "iterator.close() after update() so that they restart with the new state, or "
            "restore the bandit's state before the iterator"
        )

    def weights(self, stage: int) -> dict[str, float]:
        """Decided weights of ``stage`` as name -> weight (see :meth:`probabilities`)."""
        return dict(zip(self._sources, self.probabilities(stage)))

    def segments(self, start: int, stop: int) -> list[Segment]:
        """The stages overlapping steps ``[start, stop)`` as the mixer's segments.

        Raises:
          UndecidedEpochError: one of them is not decided yet.
        """
        start = check_int("start", start)
        stop = check_int("stop", stop, minimum=start)
        size = self._stage_steps
        first, last = start // size, (max(stop, start + 1) - 1) // size
        self.probabilities(last)  # raises when undecided
        return [Segment(k * size, (k + 1) * size, self._history[k]) for k in range(first, last + 1)]

    def update(
        self, stage: int, rewards: Mapping[str, float] | Sequence[float]
    ) -> dict[str, float]:
        """Report per-source rewards of ``stage`` (higher is better; NaN: not observed).

        Stages are reported once each, in order, with the same rewards on every process
        (reduce them over processes first). Rewards of about unit scale work with the
        default ``learning_rate``.

        Returns:
          The weights decided for stage ``stage + delay``.
        """
        if check_int("stage", stage) != self.updates:
            raise ValueError(
                f"expected the rewards of stage {self.updates}; got {stage=}. Report every "
                "stage once, in order (a restored bandit continues where its state ended)"
            )
        if isinstance(rewards, Mapping):
            if set(rewards) != set(self._sources):
                raise ValueError(
                    f"rewards must name exactly the sources {list(self._sources)} (NaN for a "
                    f"source not observed); got {list(rewards)}"
                )
            rewards = [rewards[k] for k in self._sources]
        values = check_floats("rewards", rewards, self.num_sources, allow_nan=True, per="source")
        self._preferences = learn_preferences(
            self._preferences, values, self._learning_rate, self._decay
        )
        self._history.append(self.policy())
        return self.weights(len(self._history) - 1)

    def state_dict(self) -> dict[str, Any]:
        """The learned state as plain JSON data (for ``ocp.args.JsonSave``).

        Example:
          >>> sorted(MixtureBandit(["a", "b"], stage_steps=10).state_dict())
          ['delay', 'format', 'preferences', 'sources', 'stage_steps', 'weights']
        """
        return {
            "format": _STATE_FORMAT,
            "sources": list(self._sources),
            "stage_steps": self._stage_steps,
            "delay": self._delay,
            "preferences": list(self._preferences),
            "weights": [list(w) for w in self._history],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict` (from a bandit with the same sources, stages and
        delay)."""
        keys = {"format", "sources", "stage_steps", "delay", "preferences", "weights"}
        if not isinstance(state, Mapping) or set(state) != keys:
            raise ValueError(
                f"not a MixtureBandit state: expected keys {sorted(keys)}; got {state!r}"
            )
        if state["format"] != _STATE_FORMAT:
            raise ValueError(f"state format {state['format']!r} is not {_STATE_FORMAT!r}")
        mine = {
            "sources": list(self._sources),
            "stage_steps": self._stage_steps,
            "delay": self._delay,
        }
        theirs = {k: state[k] for k in mine}
        if mine != theirs:
            raise ValueError(
                f"the state was saved by a bandit with {theirs}, this one has {mine}; build "
                "the bandit with the saved configuration"
            )
        n = self.num_sources
        prefs = check_floats("preferences", state["preferences"], n, per="source")
        check_saved_preferences(prefs)
        rows = state["weights"]
        if isinstance(rows, str) or not isinstance(rows, Sequence) or len(rows) < self._delay:
            raise ValueError(f"state weights must hold >= {self._delay} stages; got {rows!r}")
        for row in rows:
            if isinstance(row, str) or not isinstance(row, Sequence):
                raise ValueError(
                    f"state weights must be a list of {n} weights per stage; got {row!r}"
                )
        history = [normalize_probabilities(row, n) for row in rows]
        check_explored("weights", history, self._delay, self._exploration / n, per="source")
        if min(min(row) for row in history[: self._delay]) <= 0.0:  # the initial weights
            raise ValueError(
                f"state weights[:{self._delay}]={history[: self._delay]}: the initial weights "
                "must all be > 0 (as MixtureBandit(initial=...) requires); restore an "
                "undamaged state"
            )
        self._preferences, self._history = list(prefs), history
        self.revision += 1
