"""Digests of many steps over a grid of configurations: the check that a refactor changed no batch.

Run it before and after a change and compare the outputs (identical JSON means identical
batches, provenance and iterator states)::

    python benchmarks/digests.py --steps 1000 > before.json
    ... change the code ...
    python benchmarks/digests.py --steps 1000 > after.json && cmp before.json after.json

Each configuration is run on P = 1 and P = 4 processes; every batch's arrays (all keys,
provenance included), every state of :meth:`get_state` and the batches after a restore at
the middle step are hashed. ``--without-check`` hashes states without their ``check`` value,
to compare with digests taken before states carried one.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

import grainpack as gp


def _corpora(root: Path) -> dict[str, str]:
    rng = np.random.default_rng(1234)
    paths = {}
    for name, vocab in (("en", 1000), ("fr", 70000)):
        lengths = np.clip(rng.lognormal(3.0, 1.0, size=3000).astype(int), 1, 400)
        docs = [rng.integers(1, vocab, size=n) for n in lengths]
        paths[name] = str(root / name)
        gp.write_corpus(paths[name], docs, vocab_size=vocab, shard_tokens=40_000)
    return paths


def _configs(paths: dict[str, str]) -> dict[str, dict[str, Any]]:
    from grainpack.curriculum.selectors import LengthBuckets, LinearRamp

    en = {"en": paths["en"]}
    both = dict(paths)
    blocked = gp.BlockedOrder(block_docs=16, window_blocks=8)
    ramp = LinearRamp(start=(1.0, 0.3), end=(1.0, 1.0), epochs=3)
    return {
        "docs-exact": dict(sources=en, block=31, global_batch_size=8, boundary_id=0),
        "docs-blocked-compact": dict(
            sources=en, block=31, global_batch_size=8, order=blocked, layout="compact"
        ),
        "windows-exact": dict(sources=en, block=64, global_batch_size=8, unit="windows"),
        "windows-blocked": dict(
            sources=en, block=64, global_batch_size=8, unit="windows", order=blocked
        ),
        "mixed-provenance": dict(
            sources=both,
            block=48,
            global_batch_size=8,
            weights={"en": 0.3, "fr": 0.7},
            provenance=True,
            seed=7,
        ),
        "mixed-schedule-blocked-provenance-compact": dict(
            sources=both,
            block=48,
            global_batch_size=8,
            order=blocked,
            provenance=True,
            layout="compact",
            weights=[(0, {"en": 1.0, "fr": 0.0}), (300, {"en": 0.5, "fr": 0.5})],
        ),
        "selector": dict(
            sources=en,
            block=31,
            global_batch_size=8,
            sequence_selector=LengthBuckets(edges=(20,), rates=ramp, corpus=None),
        ),
    }


def _hash_batch(h: Any, batch: dict[str, np.ndarray]) -> None:
    for key in sorted(batch):
        h.update(key.encode())
        h.update(str(batch[key].dtype).encode())
        h.update(np.ascontiguousarray(batch[key]).tobytes())


def run(steps: int, *, without_check: bool = False) -> dict[str, str]:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        paths = _corpora(Path(tmp))
        for name, fields in _configs(paths).items():
            config = gp.PipelineConfig(**fields)
            for count in (1, 4):
                h = hashlib.sha256()
                for p in range(count):
                    it = iter(gp.make_dataset(config, process_index=p, process_count=count))
                    middle = None
                    for step in range(steps):
                        _hash_batch(h, next(it))
                        state = it.get_state()
                        hashed = {
                            k: v for k, v in state.items() if k != "check" or not without_check
                        }
                        h.update(json.dumps(hashed, sort_keys=True).encode())
                        if step + 1 == steps // 2:
                            middle = state
                    again = iter(gp.make_dataset(config, process_index=p, process_count=count))
                    again.set_state(middle)
                    for _ in range(5):
                        _hash_batch(h, next(again))
                out[f"{name}/P={count}"] = h.hexdigest()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--without-check", action="store_true", help="hash states without check")
    args = parser.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        print(
            json.dumps(run(args.steps, without_check=args.without_check), indent=1, sort_keys=True)
        )


if __name__ == "__main__":
    main()
