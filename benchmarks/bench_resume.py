"""Resume cost of MixedStream at slot 10**8: ``skip_to`` and ``load_state_dict``.

Run: ``python benchmarks/bench_resume.py [--slot N]``. Prints timings (no assertions).
The window loader's ``skip_to`` walked slots in Python (about a minute for 10**8); grainpack counts
them from cached per-block hashes of 2**16 slots.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from grainpack.reference.windows import MixedStream


def _flat_layout(directory: Path, num_tokens: int, offset: int) -> Path:
    directory.mkdir(parents=True)
    np.arange(offset, offset + num_tokens, dtype=np.uint16).tofile(directory / "0.bin")
    (directory / "index.json").write_text(json.dumps({"0.bin": num_tokens}))
    return directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--slot", type=int, default=10**8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sources = {
            "en": _flat_layout(Path(tmp) / "en", 50_000, 0),
            "ar": _flat_layout(Path(tmp) / "ar", 30_000, 30_000),
        }
        for probs in ([0.5, 0.5], [0.1, 0.9]):
            mix = MixedStream(sources, 2048, 0, probs)
            t0 = time.perf_counter()
            mix.skip_to(args.slot)
            t_skip = time.perf_counter() - t0

            state = json.loads(json.dumps(mix.state_dict()))
            fresh = MixedStream(sources, 2048, 0, probs)
            t0 = time.perf_counter()
            fresh.load_state_dict(state)
            rows, _ = fresh.next_batch(8)
            t_load = time.perf_counter() - t0
            assert np.array_equal(rows, mix.next_batch(8)[0])

            again = MixedStream(sources, 2048, 0, probs)
            again.skip_to(1)
            t0 = time.perf_counter()
            again.skip_to(args.slot)  # block cache now warm up to 1 slot only: full cost
            t_skip2 = time.perf_counter() - t0
            t0 = time.perf_counter()
            again.skip_to(args.slot + 10_000)
            t_short = time.perf_counter() - t0

            print(
                f"probs={probs}: skip_to({args.slot}) {t_skip:.3f} s (cold), "
                f"{t_skip2:.3f} s (second stream); skip 10_000 more {t_short * 1e3:.2f} ms; "
                f"load_state_dict + next_batch(8) {t_load * 1e3:.2f} ms; "
                f"stats {mix.stats()}"
            )


if __name__ == "__main__":
    main()
