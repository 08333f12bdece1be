"""Benchmarks building a corpus from text and stores the results next to this file.

Run: ``python benchmarks/bench_build.py [--megabytes 100] [--directory DIR] [--output OUT]``.
Writes ``OUT/build-<megabytes>mb-<date>.json`` and ``.md``; the text and the tokenizer are
cached in DIR (default ``~/.cache/grainpack/bench-build``), never in the repository. Same
code as ``grainpack bench --build`` (:mod:`grainpack.bench.build`).
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

from grainpack.bench.build import VOCAB, format_build_table, run_build_benchmark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--vocab-size", type=int, default=VOCAB)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--directory")
    parser.add_argument("--output", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args()
    results = Path(args.output)
    results.mkdir(parents=True, exist_ok=True)
    stem = f"build-{args.megabytes}mb-{datetime.date.today()}"
    out = run_build_benchmark(
        megabytes=args.megabytes,
        directory=args.directory,
        workers=args.workers,
        vocab_size=args.vocab_size,
        passes=args.passes,
        json_path=results / f"{stem}.json",
    )
    (results / f"{stem}.md").write_text(format_build_table(out) + "\n")
    print(f"wrote {results / stem}.json and .md")


if __name__ == "__main__":
    main()
