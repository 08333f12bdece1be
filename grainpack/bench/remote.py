"""``grainpack bench --url``: the pipeline on a corpus where it lies (a URL, or a path).

The configuration of the object-storage figures (documents, ``BlockedOrder()``, block 2048,
global batch 64, one process): seconds from ``make_dataset`` to the first batch and what was
fetched before it, then ``tokens`` tokens streamed: tokens per second in ``next()``, its
p50 and p99, and what the stream fetched (:meth:`PipelineIterator.remote_stats`). The
``GRAINPACK_*`` settings of :class:`~grainpack.corpus.remote.RemoteOptions` apply; compare
with the same run on a local copy. ``benchmarks/bench_remote.py`` runs the same against a
throttled store of its own.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["format_remote_table", "run_remote_benchmark"]

BLOCK, BATCH = 2048, 64


def run_remote_benchmark(
    url: str, *, tokens: int, json_path: str | None = None, directory: str | None = None
) -> dict[str, Any]:
    """Measures the corpus at ``url`` (see the module docstring), prints a table, writes
    the results to ``json_path`` if given, and returns them (``directory`` is unused: the
    corpus is read where it is).

    Example:
        >>> import tempfile, grainpack as gp
        >>> path = tempfile.mkdtemp() + "/c"
        >>> _ = gp.write_corpus(path, [list(range(1, 300))] * 50)
        >>> results = run_remote_benchmark(path, tokens=1)  # doctest: +ELLIPSIS
        corpus ...
        >>> results["steps"], results["first_batch"]["remote"]
        (1, {})
    """
    import grainpack as gp

    config = gp.PipelineConfig(
        sources={"c": url}, block=BLOCK, global_batch_size=BATCH, order=gp.BlockedOrder()
    )
    began = time.perf_counter()
    iterator = iter(gp.make_dataset(config))
    next(iterator)
    first = time.perf_counter() - began
    fetched = dict(iterator.remote_stats().get("c", {}))
    steps = max(1, tokens // (BATCH * BLOCK))
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        next(iterator)
        times.append(time.perf_counter() - t)
    after = iterator.remote_stats().get("c", {})
    stream = {k: after[k] - fetched.get(k, 0) for k in ("bytes", "requests") if k in after}
    results = {
        "url": url,
        "block": BLOCK,
        "global_batch": BATCH,
        "first_batch": {"seconds": round(first, 3), "remote": fetched},
        "steps": steps,
        "tokens_per_s": round(steps * BATCH * BLOCK / sum(times)),
        "p50_next_ms": round(1e3 * float(np.percentile(times, 50)), 3),
        "p99_next_ms": round(1e3 * float(np.percentile(times, 99)), 3),
        "stream": stream,
        "wait_seconds": round(after.get("wait_seconds", 0) - fetched.get("wait_seconds", 0), 3),
    }
    print(format_remote_table(results))
    if json_path is not None:
        Path(json_path).write_text(json.dumps(results, indent=1) + "\n")
    return results


def format_remote_table(results: dict[str, Any]) -> str:
    """The results as a few lines of text."""
    first, stream = results["first_batch"], results["stream"]
    fetched = first["remote"]
    lines = [
        f"corpus {results['url']} (block {results['block']}, global batch "
        f"{results['global_batch']}, BlockedOrder())",
        f"first batch   {first['seconds']:.2f} s, {fetched.get('bytes', 0) / 2**20:.1f} MiB in "
        f"{fetched.get('requests', 0)} requests",
        f"steady        {results['tokens_per_s'] / 1e6:.1f} M tokens/s over {results['steps']} "
        f"steps, next() p50 {results['p50_next_ms']:.2f} ms, p99 {results['p99_next_ms']:.2f} ms",
    ]
    if stream.get("requests"):
        lines.append(
            f"fetched       {stream['bytes'] / 2**20:.1f} MiB in {stream['requests']} requests "
            f"({stream['bytes'] / 2**20 / stream['requests']:.2f} MiB each), next() waited "
            f"{results['wait_seconds']:.2f} s"
        )
    return "\n".join(lines)
