"""Tokens/s of the full and compact layouts by global batch size, in-process (issue 36).

Run: ``python benchmarks/bench_batch_sizes.py [--tokens N] [--rounds R] [--seconds S]``.
Two sources mixed (``grainpack bench``'s synthetic corpus, written once under
``~/.cache/grainpack/bench-<tokens>``), documents with a boundary token, ``block=2048``.
Each (layout, batch size) runs in a process of its own, as a training process holds one
pipeline: the allocator's state (glibc moves its mmap threshold as large blocks are freed)
is then that of one batch size, not of every other one measured before it. Each round
times one pass of every (layout, batch size) in turn, after a warm-up pass, so that other
load on the machine falls on all of them alike; the table gives the median over rounds and,
in brackets, the min. The ratio full@256 / full@64 is the median over rounds of the ratio of
the two passes of the same round (issue 36's target: >= 0.9).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from grainpack.bench.throughput import BLOCK, _warm, bench_corpus, documents_config
from grainpack.corpus.cache import cache_root
from grainpack.pipeline.dataset import make_dataset

SIZES = (16, 32, 64, 96, 128, 192, 256)
LAYOUTS = ("full", "compact")


def _pass(iterator: object, seconds: float) -> tuple[int, float]:
    """(batches, seconds) of ``next(iterator)`` for about ``seconds``."""
    calls, t0 = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < seconds or not calls:
        next(iterator)
        calls += 1
    return calls, elapsed


def _child(paths: dict[str, str], layout: str, size: int, seconds: float) -> None:
    """Prints the batches and seconds of one timed pass, after a warm-up pass."""
    config = documents_config(paths, global_batch_size=size, layout=layout)
    iterator = iter(make_dataset(config, process_index=0, process_count=1))
    _pass(iterator, seconds / 4)
    calls, elapsed = _pass(iterator, seconds)
    print(calls, elapsed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=30_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--child", nargs=2, metavar=("LAYOUT", "SIZE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    paths = bench_corpus(cache_root() / f"bench-{args.tokens}", args.tokens)
    if args.child:
        _child(paths, args.child[0], int(args.child[1]), args.seconds)
        return
    _warm(paths)
    keys = [(layout, size) for layout in LAYOUTS for size in SIZES]
    rates: dict[tuple[str, int], list[float]] = {key: [] for key in keys}
    per_batch: dict[tuple[str, int], list[float]] = {key: [] for key in keys}
    for _ in range(args.rounds):
        for layout, size in keys:
            command = [sys.argv[0], "--tokens", str(args.tokens), "--seconds", str(args.seconds)]
            command += ["--child", layout, str(size)]
            out = subprocess.run([sys.executable, *command], capture_output=True, text=True)
            if out.returncode:
                raise RuntimeError(f"{layout} {size} failed:\n{out.stderr}")
            calls, elapsed = map(float, out.stdout.split()[-2:])
            rates[layout, size].append(calls * size * BLOCK / elapsed)
            per_batch[layout, size].append(elapsed / calls * 1e3)
    print(f"block {BLOCK}, documents, 2 sources, {args.tokens:,} tokens, in-process, ", end="")
    print(f"{args.rounds} rounds of {args.seconds} s passes: median (min)")
    print("| global batch | " + " | ".join(str(s) for s in SIZES) + " |")
    print("|---|" + "---:|" * len(SIZES))
    for layout in LAYOUTS:
        cells = [
            f"{statistics.median(rates[layout, s]) / 1e6:,.0f} ({min(rates[layout, s]) / 1e6:,.0f})"
            for s in SIZES
        ]
        print(f"| {layout} layout, M tokens/s | " + " | ".join(cells) + " |")
        cells = [f"{statistics.median(per_batch[layout, s]):.2f}" for s in SIZES]
        print(f"| {layout} layout, ms per batch | " + " | ".join(cells) + " |")
    for layout in LAYOUTS:
        ratios = [a / b for a, b in zip(rates[layout, 256], rates[layout, 64])]
        print(
            f"{layout}@256 / {layout}@64: median {statistics.median(ratios):.2f}, "
            f"min {min(ratios):.2f} (per round: {', '.join(f'{r:.2f}' for r in ratios)})"
        )


if __name__ == "__main__":
    main()
