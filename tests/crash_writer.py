"""Builds corpora with ``CorpusWriter`` so that ``tests/e2e/test_crash.py`` can kill it mid-way.

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
``"published"``) and answers ``pid <pid>``, then the child's own events; ``{"op": "build",
"tag", "inputs", "out", "workers", "shuffle", "overwrite", "part_bytes", "shard_tokens",
"pause"}`` forks a child, the leader of a process group of its own (its build workers join
it, as a terminal's job), that runs ``build_corpus(..., tokenizer="bytes")`` (``pause``:
``null``, ``"publish:K"`` or ``"published:K"``, at the ``K``-th publish of this process: its
parts, with one worker, then the merge, then a shuffled copy) and also answers ``log
<message>`` for the build's notes (parts reused); ``{"op": "reap", "tag", "pid"}`` waits for
that child and answers ``exit <status>``. Forking a warm process makes a killed writer cost
milliseconds, so a test can kill hundreds.

A child interrupted by SIGINT (``KeyboardInterrupt``, whether in the build or around it)
checks, in its own process once its finalizers ran (as at the interpreter's exit), that it
holds no lock file open and left no staging folder of its own (``.NAME.tmp-<its pid>-...``,
at any depth of the output's folder), and answers ``interrupted N`` (exit status 130; ``N``:
what it still held while the traceback was alive, as a session keeps it), or ``error ...``
naming what is left.

Usage::

    python tests/crash_writer.py OUT --documents 6000 --shard-tokens 2048 --seed 1 \
        [--overwrite] [--pause-after K | --pause-at publish|published]
    python tests/crash_writer.py --serve
"""

from __future__ import annotations

import argparse
import atexit
import gc
import json
import logging
import os
import re
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from grainpack.corpus.errors import CorpusExistsError
from grainpack.ingest import transaction as writer_module
from grainpack.ingest.build import build_corpus
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


def pause_at(moment: str | None, say: Callable[[str], None], nth: int = 1) -> None:
    """Makes the ``nth`` publish of this process (a ``close()``, a merge) stop before
    (``publish``) or after (``published``) its rename."""
    published = 0
    if moment == "publish":
        rename = Transaction._rename

        def before(self: Transaction) -> Path | None:
            nonlocal published
            published += 1
            if published == nth:
                say("publishing")
                sleep_until_killed()
            return rename(self)

        Transaction._rename = before  # type: ignore[method-assign]
    elif moment == "published":
        renameat2 = writer_module._renameat2

        def after(*args: object) -> bool:
            nonlocal published
            done = renameat2(*args)  # type: ignore[arg-type]
            published += done
            if done and published == nth:
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
        group = command["op"] == "build"
        pid = os.fork()
        if pid:
            if group:  # (both sides: a signal to the group may follow the "pid" line at once)
                os.setpgid(pid, 0)
            _line(f"{tag} pid {pid}")
            continue
        # the child: one build, then exit without running the zygote's cleanup
        code = 1
        try:
            if group:
                os.setpgid(0, 0)
            code = _serve_one(command)
        finally:
            os._exit(code)


def _serve_one(command: dict) -> int:
    tag = command["tag"]

    def say(event: str) -> None:
        _line(f"{tag} {event}")

    folder = Path(command["path" if command["op"] == "write" else "out"]).parent
    try:
        try:
            if command["op"] == "write":
                _write(command, say)
            else:
                _build_text(command, say)
        except CorpusExistsError as err:
            say(f"refused {err}")
            return 0
        except KeyboardInterrupt:
            raise
        except BaseException as err:
            where = " < ".join(  # innermost frame first, on the one line an event has
                f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} {f.name}"
                for f in reversed(traceback.extract_tb(err.__traceback__)[-4:])
            )
            say(f"error {type(err).__name__}: {err} (at {where})")
            return 1
        say("done")
        return 0
    except KeyboardInterrupt:  # in the build or around it (before it began, after "done")
        # what a session that keeps the traceback would still hold (reported, not an error:
        # a Ctrl-C can fall where Python runs no handler, e.g. as __enter__ begins)
        held = interrupt_leftovers(folder)
    # what is left once the interpreter would exit (its finalizers run, the traceback gone)
    gc.collect()
    atexit._run_exitfuncs()
    left = interrupt_leftovers(folder)
    say(f"error after the interrupt: {left}" if left else f"interrupted {len(held)}")
    return 1 if left else 130


def interrupt_leftovers(folder: Path) -> list[str]:
    """What this process holds or left after an interrupt: lock files it still has open,
    and staging folders named with its pid, at any depth of ``folder``."""
    left = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            name = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the descriptor of listdir itself, closed since
            continue
        if name.removesuffix(" (deleted)").endswith(".lock"):
            left.append(f"lock {name} open (fd {fd})")
    own = re.compile(rf"\..+\.tmp-{os.getpid()}-[0-9a-f]{{8}}")
    for root, dirs, _ in os.walk(folder):
        left += [f"staging folder {root}/{d}" for d in dirs if own.fullmatch(d)]
    return left


def _write(command: dict, say: Callable[[str], None]) -> None:
    pause = command.get("pause")
    after = int(pause.split(":")[1]) if pause and pause.startswith("after:") else None
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


class _Notes(logging.Handler):
    """Answers the build's notes (parts reused or discarded, a staged corpus reused)."""

    def __init__(self, say: Callable[[str], None]) -> None:
        super().__init__(logging.INFO)
        self.say = say

    def emit(self, record: logging.LogRecord) -> None:
        self.say(f"log {record.getMessage()}")


def _build_text(command: dict, say: Callable[[str], None]) -> None:
    if command.get("pause"):
        moment, nth = command["pause"].split(":")
        pause_at(moment, say, int(nth))
    notes = logging.getLogger("grainpack.ingest")
    notes.setLevel(logging.INFO)
    notes.addHandler(_Notes(say))
    say("started")
    build_corpus(
        command["inputs"],
        command["out"],
        tokenizer="bytes",
        workers=command["workers"],
        shuffle=command["shuffle"],
        overwrite=command["overwrite"],
        part_bytes=command["part_bytes"],
        shard_tokens=command["shard_tokens"],
    )


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
