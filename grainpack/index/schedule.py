"""Mixture schedules: source weights that change with the global step.

A schedule is a list of stages. Stage ``k`` starts at global step ``start_k`` (the first at
step 0) and holds its weights until the next stage starts. With ``ramp=r > 0`` the weights
move linearly from the previous stage's, at step ``start_k``, to this stage's, at step
``start_k + r``::

    p(t) = prev + (cur - prev) * ((t - start_k) / r)     for start_k <= t < start_k + r

(evaluated in float64 in exactly this order, by the scalar and the vectorized form alike,
so every step's weights are the same bits wherever they are computed). The mixer splits a
schedule into :class:`Segment` s of constant weights or of one ramp, which is all it needs
from any schedule (:class:`WeightSchedule`); an online schedule decides its segments as
the training loop reports rewards (:mod:`grainpack.curriculum.mixture`).

Pure: numpy and the standard library only.
"""

from __future__ import annotations

import bisect
import numbers
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from grainpack.index.checks import check_int
from grainpack.index.weights import normalize_probabilities

__all__ = [
    "MAX_STEP",
    "MixtureSchedule",
    "Segment",
    "Stage",
    "WeightSchedule",
    "mean_probabilities",
    "probabilities_at",
    "segment_probabilities",
]

MAX_STEP = 1 << 53  # steps are exact in float64 below this (the ramp's (t - start) / r)


class Stage(NamedTuple):
    """One stage of a schedule: from global step ``start`` on, ``weights``.

    ``weights`` is a tuple of probabilities in source order here, and a mapping
    name -> weight (or premium) in :class:`~grainpack.PipelineConfig`. With ``ramp > 0`` the
    weights move linearly from the previous stage's at step ``start`` to these at
    ``start + ramp``.

    Attributes:
        start: First global step of the stage (the first stage starts at 0).
        weights: The stage's weights (see above).
        ramp: Steps over which the weights move from the previous stage's (0: at once).

    Example:
        >>> Stage(50_000, {"web": 0.3, "math": 0.7}, ramp=1_000).ramp
        1000
    """

    start: int
    weights: Any
    ramp: int = 0


class Segment(NamedTuple):
    """Steps ``[start, stop)`` (``stop`` None: no end) of one schedule: constant ``probs``, or,
    with ``ramp_from``, weights moving linearly from ``ramp_from`` at ``start`` to ``probs``
    at ``stop``."""

    start: int
    stop: int | None
    probs: tuple[float, ...]
    ramp_from: tuple[float, ...] | None = None


@runtime_checkable
class WeightSchedule(Protocol):
    """What the mixer needs from a schedule: the segments that cover a range of steps."""

    @property
    def num_sources(self) -> int: ...

    def segments(self, start: int, stop: int) -> Sequence[Segment]:
        """The segments overlapping steps ``[start, stop)`` (``start < stop``), in order."""
        ...


def probabilities_at(segment: Segment, step: int) -> tuple[float, ...]:
    """Weights of ``step`` (inside ``segment``): the scalar reference of
    :func:`segment_probabilities`.

    Example:
        >>> probabilities_at(Segment(10, 14, (0.0, 1.0), ramp_from=(1.0, 0.0)), 11)
        (0.75, 0.25)
    """
    if segment.ramp_from is None or segment.stop is None:
        return segment.probs
    x = (step - segment.start) / (segment.stop - segment.start)
    return tuple(a + (b - a) * x for a, b in zip(segment.ramp_from, segment.probs, strict=True))


def segment_probabilities(segment: Segment, steps: np.ndarray) -> np.ndarray:
    """float64 ``(len(steps), num_sources)``: the weights of each step of ``segment``, bit
    for bit those of :func:`probabilities_at`.

    Example:
        >>> seg = Segment(10, 14, (0.0, 1.0), ramp_from=(1.0, 0.0))
        >>> segment_probabilities(seg, np.arange(10, 14)).tolist()
        [[1.0, 0.0], [0.75, 0.25], [0.5, 0.5], [0.25, 0.75]]
    """
    steps = np.asarray(steps, dtype=np.int64)
    probs = np.array(segment.probs, dtype=np.float64)
    if segment.ramp_from is None or segment.stop is None:
        return np.broadcast_to(probs, (len(steps), len(probs))).copy()
    start = np.array(segment.ramp_from, dtype=np.float64)
    # (t - s) and r are exact in float64 (< 2**53), so the division is Python's int / int.
    x = (steps - segment.start) / float(segment.stop - segment.start)
    return start + (probs - start) * x[:, None]


def mean_probabilities(schedule: WeightSchedule, start: int, stop: int) -> tuple[float, ...]:
    """Mean weight per source over steps ``[start, stop)`` (the expected share of their rows);
    the weights of ``start`` when the range is empty; exactly the weights when constant.

    Example:
        >>> schedule = MixtureSchedule([(0, (1.0, 0.0)), (10, (0.0, 1.0))])
        >>> mean_probabilities(schedule, 5, 15)
        (0.5, 0.5)
    """
    start = check_int("start", start)
    stop = check_int("stop", stop, minimum=start)
    if stop == start:
        return probabilities_at(schedule.segments(start, start + 1)[0], start)
    segments = schedule.segments(start, stop)
    if len(segments) == 1 and segments[0].ramp_from is None:
        return segments[0].probs
    total = np.zeros(schedule.num_sources)
    for seg in segments:
        lo, hi = max(start, seg.start), stop if seg.stop is None else min(stop, seg.stop)
        probs = np.array(seg.probs)
        if seg.ramp_from is None or seg.stop is None:
            total += probs * (hi - lo)
        else:  # sum of a linear function over lo..hi-1
            first, width = np.array(seg.ramp_from), seg.stop - seg.start
            offsets = (lo - seg.start + hi - 1 - seg.start) * (hi - lo) / 2
            total += first * (hi - lo) + (probs - first) * (offsets / width)
    return tuple(float(x) for x in total / (stop - start))


class MixtureSchedule:
    """A validated schedule of stages (see the module docstring), in source order.

    Consecutive stages with equal weights are merged (their ramp would change nothing), so a
    schedule whose weights never change is :attr:`constant`: it chooses exactly as fixed
    weights do.

    Args:
        stages: :class:`Stage` s or tuples ``(start, probs)`` / ``(start, probs, ramp)``:
            starts strictly increasing from 0, each ``probs`` valid mixing probabilities
            (:func:`~grainpack.index.weights.normalize_probabilities`), the same number of
            sources in every stage, the first stage without a ramp and every ramp over
            before the next stage starts.

    Raises:
        TypeError, ValueError: naming the stage and what is wrong with it.

    Example:
        >>> schedule = MixtureSchedule([(0, (0.8, 0.2)), (100, (0.2, 0.8), 10)])
        >>> schedule.probabilities(0), schedule.probabilities(105), schedule.probabilities(110)
        ((0.8, 0.2), (0.5, 0.5), (0.2, 0.8))
    """

    def __init__(self, stages: Sequence[Stage | tuple[Any, ...]]) -> None:
        if isinstance(stages, str | bytes) or not isinstance(stages, Sequence) or not stages:
            raise TypeError(
                f"a schedule is a non-empty list of stages (start_step, weights[, ramp]); "
                f"got {stages!r}"
            )
        parsed: list[Stage] = []
        for k, stage in enumerate(stages):
            stage = _stage(k, stage)
            previous = parsed[-1] if parsed else None
            where = f"stage {k} (start {stage.start})"
            if previous is None and (stage.start != 0 or stage.ramp):
                raise ValueError(
                    f"{where}: the first stage must start at step 0 without a ramp; got "
                    f"start={stage.start}, ramp={stage.ramp}"
                )
            if previous is not None:
                if stage.start <= previous.start:
                    raise ValueError(
                        f"{where}: stage starts must increase; it starts at or before the "
                        f"previous stage (step {previous.start}): list stages in step order"
                    )
                if len(stage.weights) != len(previous.weights):
                    raise ValueError(
                        f"{where}: {len(stage.weights)} weights, but stage 0 has "
                        f"{len(previous.weights)}; give every stage one weight per source"
                    )
            following = stages[k + 1] if k + 1 < len(stages) else None
            end = _start_of(following) if following is not None else None
            if (  # a next stage at or before this one is refused at its turn, as out of order
                stage.ramp
                and isinstance(end, numbers.Integral)
                and stage.start < end < stage.start + stage.ramp
            ):
                raise ValueError(
                    f"{where}: its ramp of {stage.ramp} steps runs past the next stage's start "
                    f"(step {end}); shorten the ramp or move the next stage"
                )
            if previous is not None and stage.weights == previous.weights:
                continue  # merged: nothing changes at this stage
            parsed.append(stage)
        self.stages: tuple[Stage, ...] = tuple(parsed)
        self._num_sources = len(parsed[0].weights)
        self._segments: list[Segment] = []
        for k, stage in enumerate(parsed):
            stop = parsed[k + 1].start if k + 1 < len(parsed) else None
            if stage.ramp:
                ramp_stop = stage.start + stage.ramp
                prev = parsed[k - 1].weights
                self._segments.append(Segment(stage.start, ramp_stop, stage.weights, prev))
                if ramp_stop != stop:
                    self._segments.append(Segment(ramp_stop, stop, stage.weights))
            else:
                self._segments.append(Segment(stage.start, stop, stage.weights))
        self._starts = [s.start for s in self._segments]

    @property
    def num_sources(self) -> int:
        """Number of sources (weights per stage)."""
        return self._num_sources

    @property
    def constant(self) -> tuple[float, ...] | None:
        """The weights if they never change (one stage), else ``None``."""
        return self.stages[0].weights if len(self.stages) == 1 else None

    def segments(self, start: int, stop: int) -> list[Segment]:
        """The segments overlapping steps ``[start, stop)``, in order."""
        first = bisect.bisect_right(self._starts, start) - 1
        last = bisect.bisect_left(self._starts, stop)
        return self._segments[first:last]

    def probabilities(self, step: int) -> tuple[float, ...]:
        """The weights of global step ``step``."""
        step = check_int("step", step)
        return probabilities_at(self.segments(step, step + 1)[0], step)

    def description(self) -> list[dict[str, Any]]:
        """The stages as JSON-able data (for a pipeline's fingerprint)."""
        return [
            {"start": s.start, "probabilities": list(s.weights), "ramp": s.ramp}
            for s in self.stages
        ]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MixtureSchedule) and self.stages == other.stages

    def __hash__(self) -> int:
        return hash(self.stages)

    def __repr__(self) -> str:
        return f"MixtureSchedule({[tuple(s) for s in self.stages]})"


def _start_of(stage: object) -> object:
    return stage[0] if isinstance(stage, Sequence) and len(stage) else None


def _stage(k: int, stage: object) -> Stage:
    """Stage ``k`` validated: int start and ramp, probabilities in source order."""
    bad = isinstance(stage, str | bytes) or not isinstance(stage, Sequence)
    if bad or len(stage) not in (2, 3):
        raise TypeError(
            f"stage {k} must be (start_step, weights) or (start_step, weights, ramp); got {stage!r}"
        )
    start = check_int(f"stage {k} start", stage[0])
    ramp = check_int(f"stage {k} ramp", stage[2] if len(stage) == 3 else 0)
    if start + ramp >= MAX_STEP:
        raise ValueError(f"stage {k}: start + ramp must be < 2**53; got {start} + {ramp}")
    weights = stage[1]
    if isinstance(weights, str | bytes) or not isinstance(weights, Sequence | np.ndarray):
        raise TypeError(
            f"stage {k} weights must be a sequence of probabilities in source order; "
            f"got {weights!r}"
        )
    try:
        probs = normalize_probabilities(weights, len(weights))
    except (TypeError, ValueError) as err:
        raise type(err)(f"stage {k} (start {start}): {err}") from None
    return Stage(start, probs, ramp)
