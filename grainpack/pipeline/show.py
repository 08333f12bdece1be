"""What one global step contained: its rows, their documents, and the mixture up to it."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from grainpack.index.checks import check_int
from grainpack.index.options import OptionError
from grainpack.index.schedule import MixtureSchedule
from grainpack.pipeline.accounting import mixture_accounting
from grainpack.pipeline.batches import PipelineBatches
from grainpack.pipeline.config import PipelineConfig

__all__ = ["MAX_STEP_TOKENS", "describe_step"]

# The most tokens a step's description lays out (full layout and provenance: about 4 GB)
MAX_STEP_TOKENS = 1 << 26


def describe_step(config: PipelineConfig, step: int, *, process_count: int = 1) -> dict[str, Any]:
    """What global step ``step`` of ``config`` contained, as JSON-able data.

    The rows are laid out in the full layout with provenance whatever ``config`` says (the
    tokens are the same).

    Args:
        config: The pipeline.
        step: The global step (batch index), from 0.
        process_count: Processes sharing the batch: each row names the one that holds it.

    Returns:
        ``{"weights": {name: p}, "schedule": str, "rows": [...], "mixture": {name: {...}}}``:
        the weights at ``step``; the schedule (``"schedule from 0: 0.9/0.1; from 500
        ramp 50: 0.5/0.5"``, ``""`` for fixed weights); per row its global
        ``slot``, ``process``, ``source``, ``epoch``, ``real_targets`` and ``segments``
        (``{"document", "offset"}`` of each document piece); per source the accounting of
        :func:`~grainpack.pipeline.accounting.mixture_accounting` before ``step``, with
        ``epochs`` and ``real_share`` (``None`` before its first row).

    Raises:
        ValueError: ``global_batch_size`` is not a multiple of ``process_count``, or the
            batch holds more than ``MAX_STEP_TOKENS`` tokens.

    Example:
        >>> import tempfile
        >>> from grainpack.ingest.writer import write_corpus
        >>> path = tempfile.mkdtemp()
        >>> _ = write_corpus(path, [[1, 2, 3], [4, 5], [6, 7, 8, 9]])
        >>> config = PipelineConfig(sources={"a": path}, block=3, global_batch_size=2)
        >>> shown = describe_step(config, 1, process_count=2)
        >>> [(r["slot"], r["process"], r["real_targets"], r["segments"]) for r in shown["rows"]]
        [(2, 0, 0, [{'document': 1, 'offset': 1}]), (3, 1, 3, [{'document': 2, 'offset': 0}])]
        >>> shown["weights"], shown["mixture"]["a"]["rows"]
        ({'a': 1.0}, 2)
    """
    step = check_int("step", step)
    process_count = check_int("process_count", process_count, minimum=1)
    rows_per_batch, block = config.global_batch_size, config.block
    if rows_per_batch % process_count:
        raise OptionError(
            "{global_batch_size=} is not divisible by {process_count=}: every process holds "
            "the same number of rows; choose a batch size that is a multiple of the process "
            "count",
            global_batch_size=rows_per_batch,
            process_count=process_count,
        )
    tokens = rows_per_batch * (block + 1)
    if tokens > MAX_STEP_TOKENS:
        raise OptionError(
            f"{{global_batch_size=}} x ({{block=}} + 1) is {tokens:,} tokens, more than a "
            f"step's description lays out ({MAX_STEP_TOKENS:,}; about 60 bytes a token): "
            "describe a smaller batch",
            global_batch_size=rows_per_batch,
            block=block,
        )
    config = dataclasses.replace(config, layout="full", provenance=True)
    batches = PipelineBatches(config)
    batch = batches.batch(step, 0)
    names = list(config.sources)
    rows = []
    for r in range(len(batch["inputs"])):
        pieces = zip(batch["segment_document"][r], batch["segment_offset"][r])
        rows.append(
            {
                "slot": step * rows_per_batch + r,
                "process": r % process_count,
                "source": names[batch["source"][r]],
                "epoch": int(batch["epoch"][r]),
                "real_targets": int(batch["loss_mask"][r].sum()),
                "segments": [{"document": int(d), "offset": int(o)} for d, o in pieces if d >= 0],
            }
        )
    accounts = mixture_accounting(batches, step)
    return {
        "weights": dict(zip(names, config.probabilities_at(step))),
        "schedule": _schedule(config),
        "rows": rows,
        "mixture": {
            name: {
                **vars(a),
                "epochs": a.epochs,
                "real_share": None if math.isnan(a.real_share) else a.real_share,
            }
            for name, a in accounts.items()
        },
    }


def _schedule(config: PipelineConfig) -> str:
    """``schedule STAGE; STAGE; ...``, ``online: SCHEDULE``, or empty for fixed weights."""
    schedule = config.schedule
    if config.constant_probabilities is not None:
        return ""
    if not isinstance(schedule, MixtureSchedule):
        return f"online: {schedule!r}"
    return "schedule " + "; ".join(
        f"from {s.start}"
        + (f" ramp {s.ramp}" if s.ramp else "")
        + ": "
        + "/".join(f"{p:g}" for p in s.weights)
        for s in schedule.stages
    )
