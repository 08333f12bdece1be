"""Builds a corpus with ``CorpusWriter`` so that ``tests/test_crash.py`` can SIGKILL it mid-way.

The documents are a pure function of ``(seed, count)`` (see :func:`documents`), so the test
knows what a complete build holds. The script prints ``started`` once the writer is open,
``progress <k>`` after every ``--progress`` documents and ``done`` after ``close()``.
``--pause-after K`` stops (sleeping until killed) right after document ``K`` was added;
``--pause-in-close`` stops inside ``close()`` after the manifest's temporary file is written
and fsync'd, just before it is renamed to ``manifest.json``.

Usage::

    python tests/crash_writer.py OUT --documents 6000 --shard-tokens 2048 --seed 1 \
        [--overwrite] [--pause-after K | --pause-in-close]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator, Sequence

import numpy as np

from grainpack.corpus import native
from grainpack.corpus.writer import CorpusWriter


def documents(seed: int, count: int) -> Iterator[np.ndarray]:
    """``count`` documents of 1..80 uint16 ids, a pure function of ``seed``."""
    rng = np.random.default_rng([seed, 0xC0DE])
    lengths = rng.integers(1, 81, size=count)
    for n in lengths.tolist():
        yield rng.integers(0, 1 << 16, size=n, dtype=np.int64)


def build(
    path: str,
    *,
    seed: int,
    count: int,
    shard_tokens: int,
    overwrite: bool = False,
    progress: int = 0,
    pause_after: int | None = None,
) -> None:
    """Writes ``documents(seed, count)`` to ``path``; prints progress when ``progress > 0``."""
    with CorpusWriter(
        path, dtype="uint16", shard_tokens=shard_tokens, overwrite=overwrite
    ) as writer:
        if progress:
            print("started", flush=True)
        for k, doc in enumerate(documents(seed, count), start=1):
            writer.add(doc)
            if progress and k % progress == 0:
                print(f"progress {k}", flush=True)
            if k == pause_after:
                print(f"paused {k}", flush=True)
                sleep_until_killed()


def sleep_until_killed() -> None:
    while True:
        time.sleep(1)


def pause_before_manifest_rename() -> None:
    """Makes ``close()`` stop right before ``os.replace(tmp, manifest.json)``."""
    real_replace = os.replace

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if os.path.basename(dst) == native.MANIFEST_NAME:
            print("closing", flush=True)
            sleep_until_killed()
        real_replace(src, dst)

    os.replace = replace  # type: ignore[assignment]  (the writer calls os.replace)


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--documents", type=int, required=True)
    parser.add_argument("--shard-tokens", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--overwrite", action="store_true")
    parser.add_argument("--progress", type=int, default=250)
    parser.add_argument("--pause-after", type=int, default=None)
    parser.add_argument("--pause-in-close", action="store_true")
    args = parser.parse_args(argv)
    if args.pause_in_close:
        pause_before_manifest_rename()
    build(
        args.path,
        seed=args.seed,
        count=args.documents,
        shard_tokens=args.shard_tokens,
        overwrite=args.overwrite,
        progress=args.progress,
        pause_after=args.pause_after,
    )
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
