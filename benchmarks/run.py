"""Runs grainpack's benchmark suite and stores the results next to this file.

Run: ``python benchmarks/run.py [--tokens N] [--passes K] [--quick] [--directory DIR]
[--output OUT]``. Writes ``OUT/bench-<tokens>-<date>.json`` and ``.md`` (the table as
Markdown; OUT defaults to ``results/`` next to this file); the corpus is cached in DIR
(default ``~/.cache/grainpack/bench-<tokens>``), never in the repository.
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

from absl import flags

from grainpack.bench.throughput import format_table, run_benchmarks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=200_000_000)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--directory")
    parser.add_argument("--output", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args()
    flags.FLAGS.mark_as_parsed()  # Grain 0.2.18 workers read absl flags (google/grain#1355)
    results = Path(args.output)
    results.mkdir(parents=True, exist_ok=True)
    stem = f"bench-{'quick' if args.quick else args.tokens}-{datetime.date.today()}"
    out = run_benchmarks(
        tokens=args.tokens,
        directory=args.directory,
        passes=args.passes,
        quick=args.quick,
        json_path=results / f"{stem}.json",
    )
    (results / f"{stem}.md").write_text(format_table(out, markdown=True) + "\n")
    print(f"wrote {results / stem}.json and .md")


if __name__ == "__main__":
    main()
