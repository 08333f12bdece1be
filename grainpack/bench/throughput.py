# Over 400 lines, one module: one benchmark script: the loaders compared must run in one process,
# one after the other.
"""Benchmarks: loader throughput against the memcpy limit and peers, latency, and index costs.

:func:`run_benchmarks` writes (once, cached) a synthetic corpus of two uint16 sources with
lognormal document lengths (median ~600 tokens, clipped at 32768), warms the page cache and
measures, in one run, tokens/s (median of ``passes`` passes; the loaders take turns, one
pass each per round, so that other load on the machine falls on all of them alike, and a
loader's ratio to the limit is the median over rounds of its pass against the limit's) of:

* the limit: ``block + 1``-token rows copied from the memmap at sequential offsets;
* peers: nanoGPT's ``get_batch`` (random windows; numpy in place of torch), the window
  loader's ``PackedStream`` and ``MixedStream``, and Grain's own packer
  (``source -> shuffle -> to_iter_dataset -> ConcatThenSplit -> batch``);
* grainpack ``make_dataset`` (documents with a boundary token, and windows; both sources
  mixed), in the full layout (every output key) and the compact one, in-process and (full
  layout, and compact documents) with 2 Grain worker processes;

the bytes per token each layout hands to the device, the median, p99 and max latency of
``next()`` over ``latency_batches`` batches (Python's garbage collector on, as in
training; after as many batches that pay the fresh memory maps' page faults; and the
median and p99 of each batch's fastest time over three replays of the same batches, which
drops the machine's stalls), where the
in-process time goes (microseconds per batch to plan, read and expand), and the index
costs: the epoch plan of 10**7 documents (time, peak extra memory), the time to the first
batch, and a restore at slot 10**8 (``set_state`` re-reads the batch before the checkpoint
to check its digest, which is part of the cost).
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.metadata
import json
import os
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grain
import numpy as np
import tqdm

from grainpack.bench import peers
from grainpack.corpus.cache import cache_root
from grainpack.corpus.formats import open_corpus
from grainpack.index.stream import SourceRows
from grainpack.ingest.writer import CorpusWriter
from grainpack.pipeline import fast
from grainpack.pipeline.batches import PipelineBatches
from grainpack.pipeline.config import PipelineConfig
from grainpack.pipeline.dataset import make_dataset
from grainpack.pipeline.elements import group_rows
from grainpack.pipeline.expand import expand_rows
from grainpack.reference.windows import MixedStream

BLOCK, BATCH, SEED = 2048, 8, 0
UNITS = ("documents", "windows")
BOUNDARY_ID = VOCAB = 50256  # tokens are drawn from [0, 50256); the boundary is one past
MEDIAN_LENGTH, SIGMA, MAX_LENGTH = 600, 1.0, 32768


def document_lengths(num_tokens: int, *, seed: int = 0) -> np.ndarray:
    """Lognormal document lengths (median 600, clipped to [1, 32768]) summing to ``num_tokens``.

    Example:
        >>> lengths = document_lengths(10**6)
        >>> int(lengths.sum()), bool(400 < np.median(lengths) < 800)
        (1000000, True)
    """
    rng = np.random.default_rng([seed, 0xBE4C])
    chunks, total = [], 0
    while total < num_tokens:
        chunks.append(_lognormal(rng, num_tokens // 500 + 16))
        total += int(chunks[-1].sum())
    lengths = np.concatenate(chunks)
    ends = np.cumsum(lengths)
    n = int(np.searchsorted(ends, num_tokens)) + 1
    lengths = lengths[:n]
    lengths[-1] -= int(ends[n - 1]) - num_tokens
    return lengths


def _lognormal(rng: np.random.Generator, n: int) -> np.ndarray:
    draw = rng.lognormal(np.log(MEDIAN_LENGTH), SIGMA, size=n)
    return np.clip(draw, 1, MAX_LENGTH).astype(np.int64)


def bench_corpus(directory: str | os.PathLike[str], num_tokens: int) -> dict[str, str]:
    """Paths of the two synthetic sources ``a`` and ``b`` (``num_tokens // 2`` each) under
    ``directory``, written unless a corpus of that size is already there."""
    paths = {}
    for k, name in enumerate(("a", "b")):
        path = Path(directory) / name
        paths[name] = str(path)
        try:
            if open_corpus(path).num_tokens == num_tokens // 2:
                continue
        except (OSError, ValueError):
            pass
        lengths = document_lengths(num_tokens // 2, seed=k)
        rng = np.random.default_rng([k, 0x70C5])
        with CorpusWriter(path, dtype="uint16", vocab_size=VOCAB + 1, overwrite=True) as writer:
            ends = np.cumsum(lengths)
            for lo in range(0, len(lengths), 4096):  # 4096 documents per random draw
                hi = min(lo + 4096, len(lengths))
                first = int(ends[lo - 1]) if lo else 0
                tokens = rng.integers(0, VOCAB, size=int(ends[hi - 1]) - first, dtype=np.uint16)
                for doc in np.split(tokens, ends[lo : hi - 1] - first):
                    writer.add(doc)
    return paths


def _warm(paths: dict[str, str]) -> None:
    buffer = bytearray(1 << 24)
    for path in paths.values():
        for shard in open_corpus(path).shards:
            with open(shard.tokens_path, "rb") as f:
                while f.readinto(buffer):
                    pass


def _rate(step: Callable[[], object], tokens: int, passes: int, seconds: float) -> list[float]:
    """Tokens/s of ``step`` (``tokens`` per call) in each of ``passes`` timed passes."""
    step()  # warm-up
    return [_pass(step, tokens, seconds) for _ in range(passes)]


def _pass(step: Callable[[], object], tokens: int, seconds: float) -> float:
    calls, t0 = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < seconds or not calls:
        step()
        calls += 1
    return calls * tokens / elapsed


def _rates(
    steps: dict[str, Callable[[], object]], tokens: int, passes: int, seconds: float, bar: Any
) -> dict[str, list[float]]:
    """:func:`_rate` of every step, the steps taking turns (one pass each per round), so
    that a busy machine's load falls on the limit and on the loaders alike."""
    rates: dict[str, list[float]] = {name: [] for name in steps}
    for step in steps.values():
        step()  # warm-up
    for _ in range(passes):
        for name, step in steps.items():
            bar.set_postfix_str(THROUGHPUT_LABELS[name])
            rates[name].append(_pass(step, tokens, seconds))
        bar.update()
    return rates


def _batches(config: PipelineConfig) -> Callable[[], object]:
    iterator = iter(make_dataset(config, process_index=0, process_count=1))
    return lambda: next(iterator)


def _latency(config: PipelineConfig, batches: int, replays: int = 3) -> dict[str, float]:
    """Microseconds of ``next()`` in-process, Python's garbage collector on, over ``2 *
    batches`` batches of a fresh iterator: median, p99 and max of the second half (wall
    clock, and the thread's CPU time, which preemptions on a busy machine do not inflate),
    and median and p99 of the first half, whose reads also take the first-touch page faults
    of fresh memory maps. The same batches are then replayed by ``replays - 1`` more fresh
    iterators: the median and p99 of each batch's fastest time (``replayed_*``) keep the
    loader's own slow batches, which are slow in every replay, and drop the machine's
    stalls, which hit other batches each time."""
    times = np.empty((replays, 2 * batches, 2))
    for r in range(replays):
        iterator = iter(make_dataset(config, process_index=0, process_count=1))
        next(iterator)
        for k in range(2 * batches):
            t0, c0 = time.perf_counter(), time.thread_time()
            next(iterator)
            times[r, k] = time.perf_counter() - t0, time.thread_time() - c0
        iterator.close()
    times *= 1e6
    out = {"batches": batches, "replays": replays}
    for j, clock in enumerate(("", "cpu_")):
        median, p99, top = np.percentile(times[0, batches:, j], [50, 99, 100])
        out.update({f"{clock}median_us": median, f"{clock}p99_us": p99, f"{clock}max_us": top})
    out["cold_median_us"], out["cold_p99_us"] = np.percentile(times[0, :batches, 0], [50, 99])
    fastest = times[:, batches:, 0].min(axis=0)
    out["replayed_median_us"], out["replayed_p99_us"] = np.percentile(fastest, [50, 99])
    return {k: v if k in ("batches", "replays") else float(v) for k, v in out.items()}


def _bytes_per_token(config: PipelineConfig) -> float:
    """Bytes of a batch's arrays (what ``make_global_batch`` sends) per input token."""
    batch = PipelineBatches(config, process_count=1).batch(0, 0)
    return sum(v.nbytes for v in batch.values()) / (config.global_batch_size * config.block)


def _stages(config: PipelineConfig, seconds: float) -> dict[str, float]:
    """Microseconds per batch of each stage of the in-process loop, timed one after the
    other over the same steps: planning chunks (index math), reading tokens (joins of
    memmap views) and expanding them into model arrays (as the iterator groups them)."""
    batches = PipelineBatches(config, process_count=1)
    steps, rows, group = batches.steps_per_element, config.global_batch_size, group_rows(batches)
    plans, t0 = [], time.perf_counter()
    while time.perf_counter() - t0 < seconds or not plans:
        plans.append(batches.packed_steps(len(plans) * steps, 0, steps=steps))
    plan = time.perf_counter() - t0
    read = expand = 0.0
    for packed in plans:
        reader = batches.reader(packed)
        for first in range(0, steps * rows, group):
            t0 = time.perf_counter()
            tokens = reader.read(first, min(first + group, steps * rows))
            t1 = time.perf_counter()
            expand_rows(packed, tokens, first=first)
            read, expand = read + t1 - t0, expand + time.perf_counter() - t1
    n = len(plans) * steps / 1e6
    return {"plan": plan / n, "read": read / n, "expand": expand / n}


def _with_workers(config: PipelineConfig, passes: int, seconds: float) -> tuple[float, list]:
    """Startup (to the first batch) and steady-state tokens/s with 2 Grain workers."""
    t0 = time.perf_counter()
    iterator = iter(make_dataset(config, process_index=0, process_count=1, worker_count=2))
    next(iterator)
    startup = time.perf_counter() - t0
    width = BATCH * (BLOCK + 1)
    _rate(lambda: next(iterator), width, 1, seconds)  # warm-up: the workers' buffers fill
    rates = _rate(lambda: next(iterator), width, passes, seconds)
    iterator.close()
    return startup, rates


def documents_config(
    paths: dict[str, str], *, global_batch_size: int = BATCH, layout: str = "full"
) -> PipelineConfig:
    """The benchmarks' documents pipeline over ``paths`` (:func:`bench_corpus`'s sources):
    ``BLOCK``, ``SEED``, a boundary token.

    Example:
        >>> documents_config({"a": "/data/a"}, global_batch_size=64).block
        2048
    """
    return PipelineConfig(
        sources=paths,
        block=BLOCK,
        global_batch_size=global_batch_size,
        seed=SEED,
        boundary_id=BOUNDARY_ID,
        layout=layout,
    )


def _configs(paths: dict[str, str]) -> dict[str, PipelineConfig]:
    common = {"sources": paths, "block": BLOCK, "global_batch_size": BATCH, "seed": SEED}
    configs = {
        "documents": documents_config(paths),
        "windows": PipelineConfig(**common, unit="windows"),
    }
    for unit in UNITS:
        configs[f"{unit}_compact"] = dataclasses.replace(configs[unit], layout="compact")
    return configs


def _plan_cost(num_documents: int, repeats: int) -> dict[str, float]:
    lengths = _lognormal(np.random.default_rng(0), num_documents)

    def build() -> SourceRows:
        rows = SourceRows(lengths, unit="documents", block=BLOCK, seed=SEED, boundary=True)
        rows.spans(0, np.arange(BATCH))
        return rows

    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        build()
        times.append(time.perf_counter() - t0)
    tracemalloc.start()  # numpy reports its allocations to tracemalloc
    try:
        build()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return {"documents": len(lengths), "seconds": min(times), "peak_extra_mib": peak / 2**20}


def _first_batch(config: PipelineConfig, state: dict[str, int] | None = None) -> float:
    t0 = time.perf_counter()
    iterator = iter(make_dataset(config, process_index=0, process_count=1))
    if state is not None:
        iterator.set_state(state)
    next(iterator)
    return time.perf_counter() - t0


def _restore_state(config: PipelineConfig, step: int) -> dict[str, int]:
    """The checkpoint state at ``step`` (batch ``step - 1`` recomputed for its digest), as
    the iterator saves it."""
    return iter(make_dataset(config, process_index=0, process_count=1)).state_after(step)


def _machine() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        memory = None
    return {
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "memory_gib": None if memory is None else round(memory, 1),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "grain": getattr(grain, "__version__", "unknown"),
        "kernels": (
            f"compiled (numba {importlib.metadata.version('numba')})"
            if fast.kernels() is not None
            else "numpy (without numba: pip install grainpack[fast])"
        ),
    }


THROUGHPUT_LABELS = {
    "limit": "limit: memcpy of block+1 rows",
    "nanogpt": "nanoGPT get_batch: random windows, unpacked",
    "packed_stream": "window loader: PackedStream.next per row",
    "mixed_stream": "window loader: MixedStream.next_batch",
    "grain_packer": "Grain ConcatThenSplit packer",
    "documents": "grainpack documents, in-process",
    "windows": "grainpack windows, in-process",
    "documents_compact": "grainpack documents, compact, in-process",
    "windows_compact": "grainpack windows, compact, in-process",
    "documents_workers": "grainpack documents, 2 workers",
    "windows_workers": "grainpack windows, 2 workers",
    "documents_compact_workers": "grainpack documents, compact, 2 workers",
}
GRAINPACK = ("documents", "windows", "documents_compact", "windows_compact")


def run_benchmarks(
    *,
    tokens: int = 200_000_000,
    directory: str | os.PathLike[str] | None = None,
    passes: int = 5,
    quick: bool = False,
    json_path: str | os.PathLike[str] | None = None,
    progress: bool | None = None,
    latency_batches: int = 10_000,
) -> dict[str, Any]:
    """Runs every benchmark, prints a table and returns (optionally writes) the results.

    Worker processes need absl flags parsed in Grain 0.2.18 (google/grain#1355); they are
    marked parsed here if they are not yet.

    Args:
      tokens: corpus size (half per source).
      directory: where the corpus lives (default ``~/.cache/grainpack/bench-<tokens>``); it is
        written once and reused.
      passes: timed passes per measurement (the median is reported).
      quick: tiny sizes for a smoke test (2M tokens, 10**5 plan documents, 2 short passes).
      json_path: also write the results there as JSON.
      progress: show which measurement runs (a progress bar on stderr); default: when
        stderr is a terminal (in a file or a pipe a bar is carriage-return noise).
      latency_batches: batches timed one by one per grainpack configuration, after as many
        from a fresh iterator, in each of three replays (300 when ``quick``).

    Returns:
      ``{"machine", "date", "settings", "corpus", "throughput", "bytes_per_token",
      "latency_us", "stages_us_per_batch", "index", "targets"}``; ``throughput[name]``
      holds ``tokens_per_s``, ``ratio_to_limit`` and ``passes``.

    Example:
      >>> results = run_benchmarks(quick=True)  # doctest: +SKIP
      >>> results["throughput"]["documents"]["ratio_to_limit"]  # doctest: +SKIP
      0.0198...
    """
    if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
        raise ValueError(f"passes must be an int >= 1; got {passes=}")
    least = 2 * BATCH * (BLOCK + 1)  # the limit copies a batch of rows from each source
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < least:
        raise ValueError(f"tokens must be an int >= {least}; got {tokens=}")
    if progress is None:
        progress = sys.stderr.isatty()
    if quick:
        tokens, passes = min(tokens, 2_000_000), min(passes, 2)
        latency_batches = min(latency_batches, 300)
    seconds, plan_documents, slot = (0.05, 10**5, 10**6) if quick else (1.0, 10**7, 10**8)
    if directory is None:
        directory = cache_root() / f"bench-{tokens}"
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()

    t0 = time.perf_counter()
    paths = bench_corpus(directory, tokens)
    setup = time.perf_counter() - t0
    size = sum(f.stat().st_size for f in Path(directory).rglob("*") if f.is_file())
    print(
        f"benchmark corpus: {directory} ({size / 2**20:,.0f} MiB, kept for the next run; "
        "delete it when done)",
        file=sys.stderr,
    )
    _warm(paths)
    corpora = [open_corpus(p) for p in paths.values()]
    lengths = np.concatenate([c.lengths for c in corpora])
    configs = _configs(paths)
    width = BATCH * (BLOCK + 1)

    mix = MixedStream(paths, BLOCK, SEED)
    steps: dict[str, Callable[[], object]] = {
        "limit": peers.limit(paths["a"], block=BLOCK, batch=BATCH),
        "nanogpt": peers.nanogpt(paths["a"], block=BLOCK, batch=BATCH, seed=SEED),
        "packed_stream": peers.packed_stream(paths["a"], block=BLOCK, batch=BATCH, seed=SEED),
        "mixed_stream": lambda: mix.next_batch(BATCH),
        "grain_packer": peers.grain_packer(paths["a"], block=BLOCK, batch=BATCH, seed=SEED),
        **{name: _batches(configs[name]) for name in GRAINPACK},
    }
    with_workers = (*UNITS, "documents_compact")
    stages = passes + len(with_workers) + 2  # rounds, worker runs, latency, index costs
    bar = tqdm.tqdm(total=stages, desc="bench", unit="stage", disable=not progress, file=sys.stderr)
    rates = _rates(steps, width, passes, seconds, bar)
    startup = {}
    for name in with_workers:
        bar.set_postfix_str(THROUGHPUT_LABELS[f"{name}_workers"])
        startup[name], rates[f"{name}_workers"] = _with_workers(configs[name], passes, seconds)
        bar.update()
    bar.set_postfix_str(f"next() latency over {latency_batches:,} batches")
    latency = {name: _latency(configs[name], latency_batches) for name in GRAINPACK}
    bar.update()
    bar.set_postfix_str("index costs")

    limit = rates["limit"]
    throughput = {
        name: {
            "label": THROUGHPUT_LABELS[name],
            "tokens_per_s": statistics.median(r),
            # a loader's pass against the limit's pass of the same round (the worker runs
            # come after the rounds: against the limit's median)
            "ratio_to_limit": statistics.median(
                [a / b for a, b in zip(r, limit)]
                if name in steps
                else [statistics.median(r) / statistics.median(limit)]
            ),
            "passes": r,
        }
        for name, r in rates.items()
    }
    step = slot // BATCH
    state = _restore_state(configs["documents"], step)
    index = {
        "plan": _plan_cost(plan_documents, 1 if quick else 3),
        "first_batch_seconds": min(_first_batch(configs["documents"]) for _ in range(3)),
        "restore": {"slot": step * BATCH, "seconds": _first_batch(configs["documents"], state)},
        "worker_startup_seconds": startup,
    }
    breakdown = {unit: _stages(configs[unit], seconds) for unit in UNITS}
    bar.update()
    bar.close()
    results = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": _machine(),
        "settings": {
            "block": BLOCK,
            "batch": BATCH,
            "passes": passes,
            "pass_seconds": seconds,
            "quick": quick,
        },
        "corpus": {
            "directory": str(directory),
            "tokens": int(lengths.sum()),
            "documents": len(lengths),
            "median_length": float(np.median(lengths)),
            "max_length": int(lengths.max()),
            "setup_seconds": setup,
        },
        "throughput": throughput,
        "bytes_per_token": {name: _bytes_per_token(configs[name]) for name in GRAINPACK},
        "latency_us": latency,
        "stages_us_per_batch": breakdown,
        "index": index,
    }
    results["targets"] = _targets(results)
    print(format_table(results))
    if json_path is not None:
        Path(json_path).write_text(json.dumps(results, indent=2) + "\n")
    return results


def _targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets: (name, measured value, bound, met, applies). They are set for
    the full run; ``--quick``'s sizes cannot show them, so none applies there."""
    t, index = results["throughput"], results["index"]
    full = min(t[u]["ratio_to_limit"] for u in UNITS)
    workers = min(t[f"{u}_workers"]["tokens_per_s"] / t[u]["tokens_per_s"] for u in UNITS)
    latency = results["latency_us"].values()
    tails = max(x["p99_us"] / x["median_us"] for x in latency)
    cpu_tails = max(x["cpu_p99_us"] / x["cpu_median_us"] for x in latency)
    replayed = max(x["replayed_p99_us"] / x["replayed_median_us"] for x in latency)
    rows = [
        ("full layout in-process, worst unit (x limit)", full, ">=", 0.17),
        (
            "full layout in-process, worst unit / nanoGPT get_batch",
            full / t["nanogpt"]["ratio_to_limit"],
            ">=",
            1.0,
        ),
        (
            "full layout in-process, worst unit / the window loader's MixedStream",
            full / t["mixed_stream"]["ratio_to_limit"],
            ">=",
            1.5,
        ),
        (
            "full layout in-process, worst unit / Grain's packer",
            full / t["grain_packer"]["ratio_to_limit"],
            ">=",
            30.0,
        ),
        (
            "compact layout in-process, documents (x limit)",
            t["documents_compact"]["ratio_to_limit"],
            ">=",
            0.3,
        ),
        ("next() p99 / median, worst configuration", tails, "<=", 3.0),
        ("next() p99 / median in thread CPU time, worst configuration", cpu_tails, "<=", 3.0),
        ("next() p99 / median, fastest of the replays, worst configuration", replayed, "<=", 3.0),
        ("2 workers / in-process (worst unit)", workers, ">=", 1.0),
        (
            f"epoch plan of {index['plan']['documents']:,} documents, s",
            index["plan"]["seconds"],
            "<=",
            3.0,
        ),
        ("epoch plan, peak extra MiB", index["plan"]["peak_extra_mib"], "<=", 1024.0),
        ("first batch, s", index["first_batch_seconds"], "<=", 1.0),
        (
            f"restore at slot {index['restore']['slot']:,}, s",
            index["restore"]["seconds"],
            "<=",
            1.0,
        ),
    ]
    return [
        {
            "target": name,
            "value": float(v),
            "bound": f"{op} {b}",
            "met": bool(v >= b if op == ">=" else v <= b),
            "applies": not results["settings"].get("quick", False),
        }
        for name, v, op, b in rows
    ]


def format_table(results: dict[str, Any], *, markdown: bool = False) -> str:
    """The results of :func:`run_benchmarks` as a text (or Markdown) table."""
    c, s, m, index = results["corpus"], results["settings"], results["machine"], results["index"]
    head = (
        f"{c['tokens']:,} tokens in {c['documents']:,} documents (2 sources, median "
        f"{c['median_length']:.0f}, max {c['max_length']:,}), block {s['block']}, batch "
        f"{s['batch']}, median of {s['passes']} passes; {m['cpu_count']} CPUs ({m['cpu']}), "
        f"numpy {m['numpy']}, grain {m['grain']}, kernels {m.get('kernels', 'numpy')}, "
        f"{results['date']}"
    )
    plan, restore = index["plan"], index["restore"]
    sections = [
        [("throughput", "M tokens/s", "x limit")]
        + [
            (e["label"], f"{e['tokens_per_s'] / 1e6:,.1f}", f"{e['ratio_to_limit']:.4f}")
            for e in results["throughput"].values()
        ],
        [("bytes per token to the device", "full", "compact")]
        + [
            (
                unit,
                *(f"{results['bytes_per_token'][k]:.2f}" for k in (unit, f"{unit}_compact")),
            )
            for unit in UNITS
        ],
        [("next() latency, µs (CPU time)", "median", "p99", "max", "fresh p99", "replayed")]
        + [
            (
                THROUGHPUT_LABELS[name].removeprefix("grainpack ").removesuffix(", in-process"),
                *(f"{x[k]:.1f} ({x[f'cpu_{k}']:.1f})" for k in ("median_us", "p99_us", "max_us")),
                f"{x['cold_p99_us']:.1f}",
                f"{x['replayed_median_us']:.1f} / {x['replayed_p99_us']:.1f}",
            )
            for name, x in results["latency_us"].items()
        ],
        [("in-process stage, µs per batch", "documents", "windows")]
        + [
            (stage, *(f"{results['stages_us_per_batch'][u][stage]:.1f}" for u in UNITS))
            for stage in ("plan", "read", "expand")
        ],
        [
            ("index costs", "value", ""),
            (f"epoch plan, {plan['documents']:,} documents", f"{plan['seconds']:.2f} s", ""),
            ("epoch plan, peak extra memory", f"{plan['peak_extra_mib']:.0f} MiB", ""),
            ("first batch of make_dataset", f"{index['first_batch_seconds']:.3f} s", ""),
            (f"restore at slot {restore['slot']:,}", f"{restore['seconds']:.3f} s", ""),
        ]
        + [
            (f"2-worker startup ({unit}, to the first batch)", f"{sec:.2f} s", "")
            for unit, sec in index["worker_startup_seconds"].items()
        ],
        [("target", "value", "met")]
        + [
            (
                f"{t['target']} {t['bound']}",
                f"{t['value']:.3g}",
                ("yes" if t["met"] else "NO") if t.get("applies", True) else "n/a",
            )
            for t in results["targets"]
        ],
    ]
    lines = [head]
    w = max(len(row[0]) for rows in sections for row in rows)
    for rows in sections:
        lines.append("")
        if markdown:
            lines += [f"| {' | '.join(rows[0])} |", "|---" + "|---:" * (len(rows[0]) - 1) + "|"]
            lines += [f"| {' | '.join(row)} |" for row in rows[1:]]
        else:
            lines += [f"{a:<{w}}" + "".join(f"  {x:>12}" for x in rest) for a, *rest in rows]
    if not all(t.get("applies", True) for t in results["targets"]):
        lines += ["", QUICK_NOTE]
    return "\n".join(lines)


QUICK_NOTE = (
    "n/a: the targets are set for the full run (200M tokens, 1 s passes, an epoch plan of "
    "10**7 documents); --quick's sizes (2M tokens, 0.05 s passes) cannot show them (2 workers "
    "do not pay for their start in a 0.05 s pass). Run grainpack bench without --quick to "
    "check them."
)
