"""CPU time of the consuming process per batch, with and without Grain workers (issue 36).

Run: ``python benchmarks/bench_consumer_cpu.py [--tokens N] [--batches N] [--workers W]
[--sizes 64 256] [--rounds R] [--pace-ms MS] [--profile LAYOUT:SIZE:WORKERS]``.

With workers, what limits the throughput of a host is the work left in the process that
consumes the batches (workers scale with cores, it does not): this measures that work as
``time.process_time()`` of the consuming process (every thread of it: Grain's threads that
receive the workers' elements too) over ``--batches`` calls of ``next()`` for the full and
compact layouts, in process (0 workers) and with ``--workers``, after a warm-up of as many
batches (the consumer maps each slot of the workers' rings once). Each batch is also
touched (one byte read per 4 KiB page of each array, what a transfer to a device reads
anyway), so that memory the consumer maps for the first time pays its page faults here, not
in an untimed later step. Each configuration runs in a process of its own; rounds take
turns, so that other load on the machine falls on all of them alike. The synthetic corpus
of ``grainpack bench`` (two sources, boundary token, ``block=2048``).

Workers run both ways in the same run: gathering their elements' tokens (what
``make_dataset`` does with local sources), and planning only (what it did before, and does
with sources on object storage), so that both ratios come from one run.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import subprocess
import sys
import time

import numpy as np

from grainpack.bench.throughput import BLOCK, _warm, bench_corpus, documents_config
from grainpack.corpus.cache import cache_root
from grainpack.pipeline import dataset
from grainpack.pipeline.dataset import make_dataset

LAYOUTS = ("full", "compact")
PAGE = 4096


def _touch(batch: dict[str, np.ndarray]) -> int:
    """Reads one byte of each page of each array of ``batch``."""
    total = 0
    for array in batch.values():
        flat = array.reshape(-1).view(np.uint8)
        total += int(flat[::PAGE].sum())
    return total


def _child(
    paths: dict[str, str],
    layout: str,
    size: int,
    workers: int,
    batches: int,
    profile: bool,
    pace: float,
    plans_only: bool,
) -> None:
    """Prints JSON: CPU milliseconds per batch over ``batches`` timed batches."""
    config = documents_config(paths, global_batch_size=size, layout=layout)
    if plans_only:  # workers that plan only, as before they gathered (the consumer reads)
        dataset.reads_in_workers = lambda batches, **options: False
    it = iter(make_dataset(config, process_index=0, process_count=1, worker_count=workers))
    try:
        for _ in range(batches):  # warm-up: workers started, their segments mapped here
            _touch(next(it))
        if workers:
            time.sleep(2)  # the workers fill their buffers
        profiler = cProfile.Profile() if profile else None
        cpu = time.process_time()
        if profiler is not None:
            profiler.enable()
        for _ in range(batches):
            _touch(next(it))
            time.sleep(pace)  # the rest of a training step (no CPU of this process)
        if profiler is not None:
            profiler.disable()
        cpu = time.process_time() - cpu
    finally:
        it.close()
    if profiler is not None:
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    tokens = size * BLOCK
    print(json.dumps({"cpu_ms": 1e3 * cpu / batches, "tokens": tokens}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=30_000_000)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--profile",
        help="LAYOUT:SIZE:WORKERS (WORKERSp: workers that plan only): one run, "
        "cProfile of its main thread, no table",
    )
    parser.add_argument(
        "--pace-ms", type=float, default=4.0, help="sleep after each batch (a training step)"
    )
    parser.add_argument("--child", nargs=7, help=argparse.SUPPRESS)
    args = parser.parse_args()
    paths = bench_corpus(cache_root() / f"bench-{args.tokens}", args.tokens)
    if args.child:
        layout, size, workers, batches, profile, pace, plans = args.child
        _child(
            paths,
            layout,
            int(size),
            int(workers),
            int(batches),
            profile == "1",
            float(pace),
            plans == "1",
        )
        return
    _warm(paths)

    def run(
        layout: str, size: int, workers: int, plans: bool = False, profile: bool = False
    ) -> dict[str, float]:
        command = [
            sys.executable,
            __file__,
            "--tokens",
            str(args.tokens),
            "--child",
            layout,
            str(size),
            str(workers),
            str(args.batches),
            "1" if profile else "0",
            str(args.pace_ms / 1e3),
            "1" if plans else "0",
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        if profile:
            print(done.stderr)
        return json.loads(done.stdout.strip().splitlines()[-1])

    if args.profile:
        layout, size, mode = args.profile.split(":")
        print(run(layout, int(size), int(mode.rstrip("p")), plans=mode.endswith("p"), profile=True))
        return
    w = args.workers
    modes = {"in process": (0, False), f"{w} planning": (w, True), f"{w} gathering": (w, False)}
    cases = [(lay, s, m) for lay in LAYOUTS for s in args.sizes for m in modes]
    results: dict[tuple[str, int, str], list[dict[str, float]]] = {c: [] for c in cases}
    for _ in range(args.rounds):
        for layout, size, mode in cases:
            workers, plans = modes[mode]
            results[(layout, size, mode)].append(run(layout, size, workers, plans))
    print(
        f"consumer CPU per batch, median (min) over {args.rounds} rounds of {args.batches} "
        f"batches, block {BLOCK}, {args.pace_ms:g} ms of sleep after each batch"
    )
    bases = ["in process", f"{w} planning"]
    print(
        "| layout | batch | workers | CPU ms/batch | CPU ns/token | "
        + " | ".join(f"vs {b}" for b in bases)
        + " |"
    )
    print("|---|---|---|---|---|" + "---|" * len(bases))
    for layout, size, mode in cases:
        cpu = [r["cpu_ms"] for r in results[(layout, size, mode)]]
        ratios = []
        for other in bases:
            base = [r["cpu_ms"] for r in results[(layout, size, other)]]
            ratios.append(f"{statistics.median(c / b for c, b in zip(cpu, base)):.2f}")
        tokens = results[(layout, size, mode)][0]["tokens"]
        print(
            f"| {layout} | {size} | {mode} | {statistics.median(cpu):.2f} ({min(cpu):.2f}) | "
            f"{1e6 * statistics.median(cpu) / tokens:.2f} | {' | '.join(ratios)} |"
        )


if __name__ == "__main__":
    main()
