"""Packing: concat against best fit (issue 34), and Grain's ``BestFitPackIterDataset``.

Run: ``python benchmarks/bench_packing.py [--rounds R] [--quick]``, the same as
``grainpack bench --packing``: cut share of the documents that fit a row, padding share,
rows of an epoch and segments a row at blocks 2048 and 8192, and throughput in alternating
rounds (see :mod:`grainpack.bench.packing`). Writes ``results/packing-<date>.json`` next to
this file.
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

from grainpack.bench.packing import run_packing_benchmark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="alternating throughput rounds")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    parser.add_argument("--directory", help="where the throughput corpus's folder goes")
    parser.add_argument("--output", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args()
    results = Path(args.output)
    results.mkdir(parents=True, exist_ok=True)
    run_packing_benchmark(
        quick=args.quick,
        rounds=args.rounds,
        directory=args.directory,
        json_path=results / f"packing-{datetime.date.today()}.json",
    )


if __name__ == "__main__":
    main()
