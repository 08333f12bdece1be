"""A zygote that writes corpora to object storage in forked children, for the kill tests of
``tests/remote/test_remote_writes.py``.

It imports grainpack (and obstore, whose runtime it never starts: forking a process that
started it is unsafe) once, then reads one JSON command per stdin line and answers on
stdout, each line prefixed with the command's ``tag``:

* ``{"op": "write", "tag", "url", "seed", "count", "shard_tokens"}`` forks a child that runs
  ``write_corpus(url, documents(seed, count), shard_tokens=...)`` and answers ``pid <pid>``;
  the child answers ``done <seconds>``, ``interrupted`` (a ``KeyboardInterrupt``: SIGINT) or
  ``error <message>``.
* ``{"op": "reap", "tag", "pid"}`` waits for that child and answers ``exit <status>``.

Forking a warm process makes a killed write cost milliseconds, so a test can kill hundreds.

Usage::

    python tests/remote/publisher.py
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator

import numpy as np
import obstore  # noqa: F401  (imported, its runtime not started: children start their own)

from grainpack.ingest.writer import write_corpus


def documents(seed: int, count: int) -> Iterator[np.ndarray]:
    """``count`` documents of 1..60 uint16 ids, a pure function of ``seed``."""
    rng = np.random.default_rng([seed, 0x5E3])
    for n in rng.integers(1, 61, size=count).tolist():
        yield rng.integers(0, 1 << 16, size=n, dtype=np.int64)


def _say(tag: str, text: str) -> None:
    os.write(1, f"{tag} {text}\n".encode())  # one write: lines of children never interleave


def _child(command: dict) -> int:
    began = time.perf_counter()
    try:
        write_corpus(
            command["url"],
            documents(command["seed"], command["count"]),
            shard_tokens=command["shard_tokens"],
        )
    except KeyboardInterrupt:
        _say(command["tag"], "interrupted")
        return 130
    except Exception as err:
        _say(command["tag"], f"error {type(err).__name__}: {err}".replace("\n", " "))
        return 1
    _say(command["tag"], f"done {time.perf_counter() - began:.4f}")
    return 0


def main() -> None:
    for line in sys.stdin:
        command = json.loads(line)
        tag = command["tag"]
        if command["op"] == "write":
            pid = os.fork()
            if pid == 0:
                status = 1
                try:
                    status = _child(command)
                finally:
                    os._exit(status)
            _say(tag, f"pid {pid}")
        elif command["op"] == "reap":
            _, status = os.waitpid(command["pid"], 0)
            _say(tag, f"exit {os.waitstatus_to_exitcode(status)}")


if __name__ == "__main__":
    main()
