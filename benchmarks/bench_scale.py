"""The blocked order at scale: a 10**9-document corpus, restores, memory, epoch boundaries.

Run: ``python benchmarks/bench_scale.py [--documents N] [--directory DIR] [--keep]``, the
same as ``grainpack bench --scale``. The corpora (sparse token files: about 8 GB of offsets
for 10**9 documents) are written to a temporary folder under DIR (default: the system's
temporary directory) and deleted afterwards unless ``--keep``. Writes
``results/scale-<date>.json`` next to this file.
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

from grainpack.bench.scale import run_scale_benchmarks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--documents", type=float, default=1e9)
    parser.add_argument("--boundary-documents", type=float, default=1e8)
    parser.add_argument("--quality-documents", type=float, default=1e7)
    parser.add_argument("--directory")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument(
        "--packing",
        choices=("both", "concat", "best_fit"),
        default="both",
        help="the packings measured (default both)",
    )
    parser.add_argument("--output", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args()
    results = Path(args.output)
    results.mkdir(parents=True, exist_ok=True)
    run_scale_benchmarks(
        documents=int(args.documents),
        boundary_documents=int(args.boundary_documents),
        quality_documents=int(args.quality_documents),
        directory=args.directory,
        keep=args.keep,
        packings=("concat", "best_fit") if args.packing == "both" else (args.packing,),
        json_path=results / f"scale-{datetime.date.today()}.json",
    )


if __name__ == "__main__":
    main()
