"""Builds corpora with ``CorpusWriter`` so that ``tests/e2e/test_crash.py`` can SIGKILL it mid-way.

The documents are a pure function of ``(seed, count)`` (see :func:`documents`), so the test
knows what a complete build holds. A build prints ``started`` once the writer is open,
``progress <k>`` after every ``--progress`` documents and ``done`` after ``close()``, or
``refused <message>`` if the writer refuses the path. It can stop (sleeping until killed):

* ``--pause-after K``: right after document ``K`` was added;
* ``--pause-at publish``: in ``close()``, every file and the manifest written and fsync'd,
  before the staging folder is renamed onto the path (prints ``publishing``);
* ``--pause-at published``: right after that rename, before the replaced folder is deleted
  (prints ``published``).

``--serve`` runs a zygote instead: it imports grainpack once, then reads one JSON command per
stdin line and answers on stdout, each line prefixed with the command's ``tag``:
``{"op": "write", "tag", "path", "seed", "count", "shard_tokens", "overwrite", "pause"}`` forks
a child that runs one build (``pause``: ``null``, ``"after:K"``, ``"publish"`` or
``"published"``) and answers ``pid <pid>``, then the child's own events; ``{"op": "reap",
"tag", "pid"}`` waits for that child and answers ``exit <status>``. Forking a warm process
makes a killed writer cost milliseconds, so a test can kill hundreds.

Usage::

    python tests/crash_writer.py OUT --documents 6000 --shard-tokens 2048 --seed 1 \
        [--overwrite] [--pause-after K | --pause-at publish|published]
    python tests/crash_writer.py --serve
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from grainpack.corpus.errors import CorpusExistsError
from grainpack.ingest import transaction as writer_module
from grainpack.ingest.transaction import Transaction
from grainpack.ingest.writer import CorpusWriter


def documents(seed: int, count: int) -> Iterator[np.ndarray]:
    """``count`` documents of 1..80 uint16 ids, a pure function of ``seed``."""
    rng = np.random.default_rng([seed, 0xC0DE])
    lengths = rng.integers(1, 81, size=count)
    for n in lengths.tolist():
        yield rng.integers(0, 1 << 16, size=n, dtype=np.int64)


def sleep_until_killed() -> None:
    while True:
        time.sleep(1)


def pause_at(moment: str | None, say: Callable[[str], None]) -> None:
    """Makes ``close()`` stop before (``publish``) or after (``published``) its rename."""
    if moment == "publish":
        rename = Transaction._rename

        def before(self: Transaction) -> None:
            say("publishing")
            sleep_until_killed()
            rename(self)

        Transaction._rename = before  # type: ignore[method-assign]
    elif moment == "published":
        renameat2 = writer_module._renameat2

        def after(*args: object) -> bool:
            done = renameat2(*args)  # type: ignore[arg-type]
            if done:
                say("published")
                sleep_until_killed()
            return done

        writer_module._renameat2 = after  # type: ignore[assignment]


def build(
    path: str,
    *,
    seed: int,
    count: int,
    shard_tokens: int,
    overwrite: bool = False,
    progress: int = 0,
    pause_after: int | None = None,
    say: Callable[[str], None] = lambda line: print(line, flush=True),
) -> None:
    """Writes ``documents(seed, count)`` to ``path``; reports progress when ``progress > 0``."""
    with CorpusWriter(
        path, dtype="uint16", shard_tokens=shard_tokens, overwrite=overwrite
    ) as writer:
        if progress:
            say("started")
        for k, doc in enumerate(documents(seed, count), start=1):
            writer.add(doc)
            if progress and k % progress == 0:
                say(f"progress {k}")
            if k == pause_after:
                say(f"paused {k}")
                sleep_until_killed()


def _line(text: str) -> None:
    """One ``write`` per line: lines of the zygote and its children never interleave."""
    os.write(1, f"{text}\n".encode())


def serve() -> None:
    """The zygote of ``--serve`` (see the module docstring)."""
    for line in sys.stdin:
        command = json.loads(line)
        tag = command["tag"]
        if command["op"] == "reap":
            _, status = os.waitpid(command["pid"], 0)
            _line(f"{tag} exit {os.waitstatus_to_exitcode(status)}")
            continue
        pid = os.fork()
        if pid:
            _line(f"{tag} pid {pid}")
            continue
        # the child: one build, then exit without running the zygote's cleanup
        os._exit(_serve_one(command))


def _serve_one(command: dict) -> int:
    tag = command["tag"]

    def say(event: str) -> None:
        _line(f"{tag} {event}")

    pause = command.get("pause")
    after = int(pause.split(":")[1]) if pause and pause.startswith("after:") else None
    try:
        pause_at(pause, say)
        build(
            command["path"],
            seed=command["seed"],
            count=command["count"],
            shard_tokens=command["shard_tokens"],
            overwrite=command["overwrite"],
            progress=1,
            pause_after=after,
            say=say,
        )
    except CorpusExistsError as err:
        say(f"refused {err}")
        return 0
    except BaseException as err:
        say(f"error {type(err).__name__}: {err}")
        return 1
    say("done")
    return 0


def main(argv: Sequence[str]) -> None:
    if argv == ["--serve"]:
        serve()
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--documents", type=int, required=True)
    parser.add_argument("--shard-tokens", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--overwrite", action="store_true")
    parser.add_argument("--progress", type=int, default=250)
    parser.add_argument("--pause-after", type=int, default=None)
    parser.add_argument("--pause-at", choices=["publish", "published"], default=None)
    args = parser.parse_args(argv)
    pause_at(args.pause_at, lambda line: print(line, flush=True))
    try:
        build(
            args.path,
            seed=args.seed,
            count=args.documents,
            shard_tokens=args.shard_tokens,
            overwrite=args.overwrite,
            progress=args.progress,
            pause_after=args.pause_after,
        )
    except CorpusExistsError as err:
        print(f"refused {err}", flush=True)
        sys.exit(1)
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
