"""Mixture accounting and telemetry as pure functions of the global step.

After ``step`` global batches the run has consumed slots ``[0, step * B)``; how many of
them each source took, which epoch each source is in and how much of it was padding all
follow from the slot hash and the document lengths. So the numbers are exact after a
resume and identical on every process, without any state of their own. With a schedule the
counts are sums over its stages (the mixer counts each stage's slots with that stage's
weights) and targets are the mean weights over the steps concerned.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

from grainpack.curriculum.protocols import Reports
from grainpack.index.checks import check_bool, check_float, check_int
from grainpack.index.schedule import MixtureSchedule, mean_probabilities
from grainpack.index.slots import first_slot
from grainpack.pipeline.batches import PipelineBatches
from grainpack.pipeline.config import PipelineConfig


class MixtureWarning(UserWarning):
    """A source is starved by its weight or repeated more than the configured cap."""


class RepeatCapExceeded(RuntimeError):
    """A source was repeated more often than a hard cap allows."""


@dataclasses.dataclass(frozen=True)
class SourceAccount:
    """What one source contributed to the first ``step`` global batches.

    Attributes:
      name: the source's key in ``config.sources``.
      target_share: its expected share of the rows so far: its weight, or with a schedule
        the mean of its weight over steps ``[0, step)`` (that of step 0 at step 0).
      realized_share: the fraction of consumed rows it took.
      rows: rows it contributed (all processes together).
      tokens: ``rows * (block + 1)``, padding included.
      real_tokens: non-padding tokens among them.
      epoch: the epoch its next row comes from (0-based).
      epoch_fraction: fraction of that epoch already consumed: its rows before the next
        one over its rows; under ``packing="best_fit"`` in the blocked order, whose epochs'
        rows are known only by packing every window, by windows instead:
        ``(window + its rows consumed / its rows) / windows``, exact at window starts.
      repeats: completed passes over the source (each pass after the first repeats data).

    Example:
      >>> import tempfile, numpy as np, grainpack as gp
      >>> path = tempfile.mkdtemp()
      >>> _ = gp.write_corpus(path, [np.arange(1, 40)] * 4)
      >>> cfg = gp.PipelineConfig(sources={"en": path}, block=8, global_batch_size=4)
      >>> account = gp.mixing.mixture_accounting(cfg, 10)["en"]
      >>> account.rows, account.tokens, account.epoch, account.repeats
      (40, 360, 2, 2)
    """

    name: str
    target_share: float
    realized_share: float
    rows: int
    tokens: int
    real_tokens: int
    epoch: int
    epoch_fraction: float
    repeats: int

    @property
    def epochs(self) -> float:
        """Passes over the source so far, fractional (the window loader's ``stats()`` number)."""
        return self.epoch + self.epoch_fraction

    @property
    def real_share(self) -> float:
        """Non-padding fraction of the tokens it contributed (NaN before its first row)."""
        return self.real_tokens / self.tokens if self.tokens else math.nan


def _batches(config: PipelineConfig | PipelineBatches) -> PipelineBatches:
    return config if isinstance(config, PipelineBatches) else PipelineBatches(_config(config))


def _config(config: PipelineConfig | PipelineBatches) -> PipelineConfig:
    if isinstance(config, PipelineBatches):
        return config.config
    if not isinstance(config, PipelineConfig):
        raise TypeError(f"config must be a gp.PipelineConfig; got {type(config).__name__}")
    return config


def mixture_accounting(
    config: PipelineConfig | PipelineBatches, step: int
) -> dict[str, SourceAccount]:
    """Per-source accounting after ``step`` global batches.

    Args:
      config: the pipeline (or its :class:`PipelineBatches`, to reuse caches).
      step: global batches consumed (``iterator.step``).

    Returns:
      ``{name: SourceAccount}`` in source order.

    Example:
      >>> import tempfile, numpy as np, grainpack as gp
      >>> path = tempfile.mkdtemp() + "/c"
      >>> _ = gp.write_corpus(path, [np.arange(1, 10)] * 2)  # 18 tokens: 4 rows of 5
      >>> cfg = gp.PipelineConfig(sources={"en": path}, block=4, global_batch_size=2)
      >>> acc = gp.mixing.mixture_accounting(cfg, 3)["en"]  # 6 rows: 1.5 passes
      >>> acc.rows, acc.real_tokens, acc.epoch, acc.epoch_fraction
      (6, 28, 1, 0.5)
    """
    step = check_int("step", step)
    batches = _batches(config)
    batches.check_step(step)  # refuses a step whose accounting would run for hours
    cfg = batches.config
    slots = first_slot(step, cfg.global_batch_size)
    counts = batches.mixer.counts_before(slots)
    targets = target_shares(batches, 0, step)
    out = {}
    for j, name in enumerate(cfg.sources):
        rows = batches.rows(j)
        used = int(counts[j])
        epoch, fraction = rows.epoch_position(used)
        out[name] = SourceAccount(
            name=name,
            target_share=targets[name],
            realized_share=used / slots if slots else 0.0,
            rows=used,
            tokens=used * (cfg.block + 1),
            real_tokens=rows.real_tokens_before(used),
            epoch=epoch,
            epoch_fraction=fraction,
            repeats=epoch,
        )
    return out


def window_shares(
    config: PipelineConfig | PipelineBatches, start_step: int, stop_step: int
) -> dict[str, float]:
    """Realized share of rows per source over global steps ``[start_step, stop_step)``
    (exact counts of the slot hash under each step's weights).

    Args:
      config: The pipeline (or its :class:`PipelineBatches`, which keeps counts cached).
      start_step: First global step of the window.
      stop_step: End of the window (excluded).

    Returns:
      Source name -> fraction of the window's rows it took (all 0.0 for an empty window).

    Example:
      >>> import grainpack as gp
      >>> cfg = gp.PipelineConfig(sources={"a": "/a", "b": "/b"}, block=8, global_batch_size=4,
      ...                         weights={"a": 0.75, "b": 0.25})
      >>> shares = gp.mixing.window_shares(cfg, 0, 1000)
      >>> round(shares["a"] + shares["b"], 9), 0.72 < shares["a"] < 0.78
      (1.0, True)
    """
    start_step = check_int("start_step", start_step)
    stop_step = check_int("stop_step", stop_step, minimum=start_step)
    batches = _batches(config)
    size = batches.config.global_batch_size
    counts = batches.mixer.counts_between(first_slot(start_step, size), first_slot(stop_step, size))
    total = max(int(counts.sum()), 1)
    return {name: int(c) / total for name, c in zip(batches.config.sources, counts)}


def target_shares(
    config: PipelineConfig | PipelineBatches, start_step: int, stop_step: int
) -> dict[str, float]:
    """Expected share of rows per source over global steps ``[start_step, stop_step)``: the
    weights, or with a schedule their mean over those steps (those of ``start_step`` for an
    empty range). Compare with :func:`window_shares`.

    Args:
      config: The pipeline (or its :class:`PipelineBatches`).
      start_step: First global step of the window.
      stop_step: End of the window (excluded).

    Returns:
      Source name -> expected fraction of the window's rows.

    Example:
      >>> import grainpack as gp
      >>> cfg = gp.PipelineConfig(sources={"a": "/a", "b": "/b"}, block=8, global_batch_size=4,
      ...                         weights=[(0, {"a": 1.0, "b": 0.0}), (10, {"a": 0.5, "b": 0.5})])
      >>> gp.mixing.target_shares(cfg, 0, 20)
      {'a': 0.75, 'b': 0.25}
    """
    start_step = check_int("start_step", start_step)
    stop_step = check_int("stop_step", stop_step, minimum=start_step)
    cfg = _config(config)
    probs = cfg.constant_probabilities
    if probs is None:
        probs = mean_probabilities(cfg.schedule, start_step, stop_step)
    return dict(zip(cfg.sources, probs))


def selector_report(config: PipelineConfig | PipelineBatches, source: str, epoch: int) -> Any:
    """What the ``sequence_selector`` kept of ``source`` in ``epoch``, as the pipeline
    applies it: bound to that source's corpus, with its seed (``seed + j`` for source
    ``j``) and, under :class:`~grainpack.BlockedOrder`, per (block, bucket). The selector's
    own ``report`` (a :class:`~grainpack.curriculum.BucketReport` for
    :class:`~grainpack.curriculum.LengthBuckets`, a tuple of them for a
    :class:`~grainpack.curriculum.Chain`), over every document of the corpus.

    Args:
      config: The pipeline (or its :class:`PipelineBatches`).
      source: The source's name in ``config.sources``.
      epoch: The source's epoch (an online schedule must have decided it).

    Returns:
      The selector's report of ``epoch``.

    Raises:
      ValueError: ``source`` is not a source, or has no selector.
      TypeError: its selector has no ``report``.

    Example:
      >>> import tempfile, numpy as np, grainpack as gp
      >>> path = tempfile.mkdtemp() + "/en"
      >>> _ = gp.write_corpus(path, [np.ones(n, int) for n in (3, 5, 50, 70)])
      >>> cfg = gp.PipelineConfig(sources={"en": path}, block=8, global_batch_size=2,
      ...     sequence_selector=gp.curriculum.LengthBuckets(edges=(10,), rates=(1.0, 0.0)))
      >>> report = gp.mixing.selector_report(cfg, "en", 0)
      >>> report.kept_documents, report.kept_tokens
      ((2, 0), (8, 0))
    """
    batches = _batches(config)
    names = list(batches.config.sources)
    if source not in names:
        raise ValueError(f"source {source!r} is not one of {names}")
    j = names.index(source)
    selector = batches.rows(j).selector
    if selector is None:
        raise ValueError(f"source {source!r} has no sequence_selector: it keeps every document")
    if not isinstance(selector, Reports):
        raise TypeError(
            f"the selector of source {source!r}, {selector!r}, has no report(order, seed, "
            "epoch) method"
        )
    epoch = check_int("epoch", epoch)
    return selector.report(None, batches.config.seed + j, epoch)


def _largest_weights(config: PipelineConfig) -> tuple[float, ...]:
    """Each source's largest weight over the schedule (a ramp lies between its stages); for
    an online schedule, over its initial weights (it decides the rest later)."""
    schedule = config.schedule
    if isinstance(schedule, MixtureSchedule):
        return tuple(max(column) for column in zip(*(s.weights for s in schedule.stages)))
    return config.probabilities


class MixtureMonitor:
    """Watches a run's mixture: realized vs target shares, starvation, repeat caps.

    Args:
      config: the pipeline.
      window_steps: steps per telemetry window.
      max_repeats: warn when a source has completed more than this many passes.
      hard_cap: raise :class:`RepeatCapExceeded` instead of warning.
      min_expected_rows: a source expected to take fewer rows than this per window is
        reported as starved (its weight is so small it is effectively never drawn; with a
        schedule, its largest weight).

    Example:
      >>> import tempfile, numpy as np, grainpack as gp
      >>> a, b = tempfile.mkdtemp() + "/a", tempfile.mkdtemp() + "/b"
      >>> _ = gp.write_corpus(a, [np.arange(1, 99)]), gp.write_corpus(b, [np.arange(1, 99)])
      >>> cfg = gp.PipelineConfig(sources={"a": a, "b": b}, block=8, global_batch_size=4,
      ...                         weights={"a": 1 - 1e-9, "b": 1e-9})
      >>> import warnings
      >>> with warnings.catch_warnings(record=True) as caught:
      ...     monitor = gp.mixing.MixtureMonitor(cfg, window_steps=100)
      >>> monitor.starved, caught[0].category.__name__
      (['b'], 'MixtureWarning')
    """

    def __init__(
        self,
        config: PipelineConfig | PipelineBatches,
        *,
        window_steps: int = 100,
        max_repeats: int | None = None,
        hard_cap: bool = False,
        min_expected_rows: float = 1.0,
    ) -> None:
        self.batches = _batches(config)
        self.window_steps = check_int("window_steps", window_steps, minimum=1)
        self.max_repeats = None if max_repeats is None else check_int("max_repeats", max_repeats)
        self.hard_cap = check_bool("hard_cap", hard_cap)
        min_expected_rows = check_float(
            "min_expected_rows", min_expected_rows, 0.0, math.inf, closed_low=True
        )
        cfg = self.batches.config
        rows = first_slot(window_steps, cfg.global_batch_size)  # slots of a window
        largest = dict(zip(cfg.sources, _largest_weights(cfg)))
        self.starved = [name for name, p in largest.items() if p * rows < min_expected_rows]
        for name in self.starved:
            p = largest[name]
            warnings.warn(
                f"source {name!r} is starved: with weight {p:.3g} it is expected to take "
                f"{p * rows:.3g} of the {rows} rows in every {window_steps} steps, so it is "
                "effectively never trained on; raise its weight or drop it",
                MixtureWarning,
                stacklevel=2,
            )

    def check(self, step: int) -> dict[str, dict[str, float]]:
        """Telemetry at ``step``: per source target and realized share over the last window
        (with a schedule the target is the mean weight over the window's steps), passes so
        far; warns (or raises) when a source exceeds ``max_repeats``."""
        accounts = mixture_accounting(self.batches, step)
        start = max(0, step - self.window_steps)
        shares = window_shares(self.batches, start, step)
        targets = target_shares(self.batches, start, step)
        report = {}
        for name, acc in accounts.items():
            report[name] = {
                "target_share": targets[name],
                "window_share": shares[name],
                "epochs": acc.epochs,
            }
            if self.max_repeats is not None and acc.repeats > self.max_repeats:
                message = (
                    f"source {name!r} has been repeated {acc.repeats} times at step {step}, "
                    f"more than max_repeats={self.max_repeats}; lower its weight or add data"
                )
                if self.hard_cap:
                    raise RepeatCapExceeded(message)
                warnings.warn(message, MixtureWarning, stacklevel=2)
        return report
