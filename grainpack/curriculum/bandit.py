"""``LengthBandit``: keep rates per length bucket that adapt from training rewards.

Exponential weights with uniform exploration (EXP3 where every bucket is observed every
epoch), used as the ``rates`` of a :class:`~grainpack.curriculum.LengthBuckets`. Rewards of
epoch ``e`` decide the rates of epoch ``e + delay`` (``delay >= 1``, default 2), and epochs
``< delay`` keep everything. Decided rates are kept per epoch and never change, so the order
of epoch ``e`` is a pure function of (seed, epoch, rewards of epochs ``<= e - delay``),
whenever the pipeline computes it; an epoch that is not decided yet raises
:class:`UndecidedEpochError` instead of guessing. The training-loop contract is in
:mod:`grainpack.curriculum.online`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from grainpack.curriculum.online import UndecidedEpochError
from grainpack.index.checks import check_float, check_floats, check_int, check_rates

_STATE_FORMAT = "grainpack.LengthBandit/1"


def exponential_policy(preferences: Sequence[float], exploration: float) -> tuple[float, ...]:
    """``(1 - exploration) * softmax(preferences) + exploration / k``: sums to 1.

    Example:
        >>> exponential_policy([0.0, 0.0], 0.5)
        (0.5, 0.5)
    """
    top = max(preferences)
    weights = [math.exp(h - top) for h in preferences]
    total = sum(weights)
    k = len(preferences)
    return tuple((1.0 - exploration) * w / total + exploration / k for w in weights)


def learn_preferences(
    preferences: Sequence[float], rewards: Sequence[float], learning_rate: float, decay: float
) -> list[float]:
    """``(1 - decay) * h + learning_rate * reward`` per arm (NaN reward: arm not observed,
    left alone), shifted so that the largest is 0.

    Example:
        >>> learn_preferences([0.0, 0.0], [1.0, float("nan")], 2.0, 0.0)
        [0.0, -2.0]
    """
    keep = 1.0 - decay
    prefs = [
        h if math.isnan(r) else keep * h + learning_rate * r
        for h, r in zip(preferences, rewards, strict=True)
    ]
    if all(math.isfinite(h) for h in prefs):
        top = max(prefs)
        prefs = [h - top for h in prefs]  # the shift itself can overflow
    if not all(math.isfinite(h) for h in prefs):
        raise ValueError(
            f"rewards {list(rewards)} times learning_rate={learning_rate} overflow the "
            "preferences; report rewards on a bounded scale (for example losses, or their "
            "differences, not their exponentials)"
        )
    return prefs


def check_saved_preferences(values: Sequence[float]) -> None:
    """Raises ``ValueError`` unless ``values`` (finite, checked before) are preferences as a
    bandit stores them: shifted so that the largest is exactly 0. Preferences further
    apart than a float can hold (1e308 and -1e308) would overflow the next update, which
    would then blame the rewards.

    Example:
        >>> check_saved_preferences([0.0, -3.5])
        >>> check_saved_preferences([1e308, -1e308])
        Traceback (most recent call last):
        ...
        ValueError: state preferences=[1e+308, -1e+308] are not a saved bandit's: the largest must be exactly 0 (a bandit stores them shifted so), got 1e+308; restore an undamaged state
    """  # noqa: E501
    if max(values) != 0.0:
        raise ValueError(
            f"state preferences={list(values)} are not a saved bandit's: the largest must be "
            f"exactly 0 (a bandit stores them shifted so), got {max(values)}; restore an "
            "undamaged state"
        )


def check_explored(
    field: str, rows: Sequence[Sequence[float]], first: int, least: float, *, per: str
) -> None:
    """Raises ``ValueError`` naming ``field[k][i]`` if a decided row (``k >= first``) gives
    a ``per`` (source, bucket) less than ``least``, which exploration guarantees each.

    Example:
        >>> check_explored("weights", [(0.5, 0.5), (1.0, 0.0)], 1, 0.05, per="source")
        Traceback (most recent call last):
        ...
        ValueError: state weights[1][1]=0.0: every decided row keeps each source at least exploration / sources = 0.05; the state is damaged or was saved by a bandit with another exploration: restore an undamaged state, or build the bandit with the saved configuration
    """  # noqa: E501
    for k, row in enumerate(rows[first:], first):
        for i, value in enumerate(row):
            if not value >= least:
                raise ValueError(
                    f"state {field}[{k}][{i}]={value!r}: every decided row keeps each {per} "
                    f"at least exploration / {per}s = {least!r}; the state is damaged or was "
                    "saved by a bandit with another exploration: restore an undamaged state, "
                    "or build the bandit with the saved configuration"
                )


class LengthBandit:
    """Keep rates per length bucket learned from rewards (a :class:`RateSchedule`).

    Preferences ``h`` start at 0. ``update(e, rewards)`` sets
    ``h = (1 - decay) * h + learning_rate * reward`` per bucket (NaN: bucket not observed,
    left alone; ``decay > 0`` forgets old rewards, for non-stationary rewards such as
    learning progress). It then decides the rates of epoch ``e + delay``:
    ``p = (1 - exploration) * softmax(h) + exploration / num_buckets`` and
    ``rate = p / max(p)``. The favoured bucket keeps every document, and every bucket keeps
    at least ``exploration / num_buckets``. Epochs ``< delay`` keep everything. Rates of
    decided epochs never change (the contract is in :mod:`grainpack.curriculum.online`).

    Args:
      num_buckets: buckets of the :class:`LengthBuckets` it drives (``len(edges) + 1``).
      learning_rate: step on the preferences per unit of reward, > 0.
      exploration: uniform mixing in ``(0, 1]``.
      delay: epochs between the rewards of an epoch and the first rates they change, >= 1.
      decay: fraction of the preferences forgotten at each update, in ``[0, 1)``.

    Example:
      >>> bandit = LengthBandit(2, learning_rate=1.0, exploration=0.2, delay=1)
      >>> bandit.rates(0)
      (1.0, 1.0)
      >>> [round(r, 3) for r in bandit.update(0, [0.0, -2.0])]
      [1.0, 0.243]
      >>> bandit.rates(1) == bandit.history[1]
      True
    """

    def __init__(
        self,
        num_buckets: int,
        *,
        learning_rate: float = 1.0,
        exploration: float = 0.1,
        delay: int = 2,
        decay: float = 0.0,
    ) -> None:
        self._num_buckets = check_int("num_buckets", num_buckets, minimum=1)
        self._learning_rate = check_float("learning_rate", learning_rate, 0.0, math.inf)
        self._exploration = check_float("exploration", exploration, 0.0, 1.0, closed_high=True)
        self._delay = check_int("delay", delay, minimum=1)
        self._decay = check_float("decay", decay, 0.0, 1.0, closed_low=True)
        self._preferences = [0.0] * self._num_buckets
        self._history = [(1.0,) * self._num_buckets] * self._delay
        self.revision = 0  # bumped when load_state_dict replaces decided epochs

    def __repr__(self) -> str:
        # Configuration only: the repr is in the pipeline fingerprint, which must not change
        # while the bandit learns. Checkpoints carry the state (state_dict).
        return (
            f"LengthBandit(num_buckets={self._num_buckets}, learning_rate="
            f"{self._learning_rate!r}, exploration={self._exploration!r}, delay={self._delay}, "
            f"decay={self._decay!r})"
        )

    @property
    def num_buckets(self) -> int:
        """Number of length buckets."""
        return self._num_buckets

    @property
    def delay(self) -> int:
        """Epochs between the rewards of an epoch and the rates they decide."""
        return self._delay

    @property
    def updates(self) -> int:
        """Epochs rewarded so far; the next ``update`` is for this epoch."""
        return len(self._history) - self._delay

    @property
    def history(self) -> tuple[tuple[float, ...], ...]:
        """Decided rates, one row per epoch ``0 .. decided - 1``."""
        return tuple(self._history)

    def probabilities(self) -> tuple[float, ...]:
        """The current policy ``p`` (sums to 1)."""
        return exponential_policy(self._preferences, self._exploration)

    def rates(self, epoch: int) -> tuple[float, ...]:
        """Decided rates of ``epoch``.

        Raises:
          UndecidedEpochError: ``epoch`` is not decided yet.
        """
        epoch = check_int("epoch", epoch, minimum=0)
        if epoch < len(self._history):
            return self._history[epoch]
        raise UndecidedEpochError(
            f"LengthBandit has decided the rates of epochs 0..{len(self._history) - 1} only, "
            f"but epoch {epoch} is needed; call update({self.updates}, rewards) earlier, "
            f"at the latest before the pipeline reaches epoch {len(self._history)}. If the data "
            "comes from Grain workers, call iterator.close() after update() so that they "
            "restart with the new state, or restore the bandit's state before the iterator"
        )

    def update(self, epoch: int, rewards: Sequence[float]) -> tuple[float, ...]:
        """Report per-bucket rewards of ``epoch`` (higher is better; NaN: not observed).

        Epochs are reported once each, in order. Rewards of about unit scale work with the
        default ``learning_rate`` (e.g. normalised loss improvement per bucket).

        Returns:
          The rates decided for epoch ``epoch + delay``.
        """
        if check_int("epoch", epoch) != self.updates:
            raise ValueError(
                f"expected the rewards of epoch {self.updates}; got {epoch=}. Report every "
                "epoch once, in order (a restored bandit continues where its state ended)"
            )
        values = check_floats("rewards", rewards, self._num_buckets, allow_nan=True)
        self._preferences = learn_preferences(
            self._preferences, values, self._learning_rate, self._decay
        )
        probs = self.probabilities()
        best = max(probs)
        rates = tuple(min(1.0, p / best) for p in probs)
        self._history.append(rates)
        return rates

    def state_dict(self) -> dict[str, Any]:
        """The learned state as plain JSON data (for ``ocp.args.JsonSave``).

        Example:
          >>> import orbax.checkpoint as ocp
          >>> bandit = LengthBandit(3)
          >>> args = ocp.args.Composite(curriculum=ocp.args.JsonSave(bandit.state_dict()))
          >>> sorted(bandit.state_dict())
          ['delay', 'format', 'num_buckets', 'preferences', 'rates']
        """
        return {
            "format": _STATE_FORMAT,
            "num_buckets": self._num_buckets,
            "delay": self._delay,
            "preferences": list(self._preferences),
            "rates": [list(r) for r in self._history],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict` (from a bandit with the same buckets and delay)."""
        keys = {"format", "num_buckets", "delay", "preferences", "rates"}
        if not isinstance(state, Mapping) or set(state) != keys:
            raise ValueError(
                f"not a LengthBandit state: expected keys {sorted(keys)}; got {state!r}"
            )
        if state["format"] != _STATE_FORMAT:
            raise ValueError(f"state format {state['format']!r} is not {_STATE_FORMAT!r}")
        mine = {"num_buckets": self._num_buckets, "delay": self._delay}
        theirs = {k: state[k] for k in mine}
        if mine != theirs:
            raise ValueError(
                f"the state was saved by a bandit with {theirs}, this one has {mine}; build "
                "the bandit with the saved configuration"
            )
        prefs = check_floats("preferences", state["preferences"], self._num_buckets)
        check_saved_preferences(prefs)
        rows = state["rates"]
        if not isinstance(rows, Sequence) or len(rows) < self._delay:
            raise ValueError(f"state rates must hold >= {self._delay} epochs; got {rows!r}")
        history = [check_rates("rates", check_floats("rates", r, self._num_buckets)) for r in rows]
        # rate = p / max(p) >= p >= exploration / num_buckets
        least = self._exploration / self._num_buckets
        check_explored("rates", history, self._delay, least, per="bucket")
        self._preferences, self._history = list(prefs), history
        self.revision += 1
