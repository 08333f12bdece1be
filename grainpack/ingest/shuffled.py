"""A write stored in a seeded random order: written beside ``OUT``, then copied shuffled.

::

    write(staged) ──▶ DIR/.NAME.unshuffled       (a text build, a conversion)
    staged ──shuffle_corpus(seed)──▶ OUT          (then the staged corpus is removed)
    DIR/.NAME.unshuffled.key                      (its plan key and fingerprint; locked)

The key file's lock is held for the whole write, so one shuffled write of ``OUT`` runs at a
time. An interrupted copy (``KeyboardInterrupt``) keeps the staged corpus, and the same write
again (the same ``key``) copies it without writing it again; any other failure removes it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from grainpack.corpus.errors import CorpusExistsError, os_error
from grainpack.corpus.formats import open_corpus
from grainpack.corpus.native import PathLike
from grainpack.corpus.source import TokenShardSource
from grainpack.ingest.transaction import check_target, write_lock, write_synced
from grainpack.ingest.writer import shuffle_corpus

__all__ = ["key_file", "staged_path", "write_shuffled"]

logger = logging.getLogger(__name__)


def staged_path(out: PathLike) -> Path:
    """Where a shuffled write of ``out`` stages its corpus: ``.NAME.unshuffled`` beside it."""
    out = Path(os.path.abspath(out))  # "." has no name to put files beside
    return out.with_name(f".{out.name}.unshuffled")


def key_file(staged: Path) -> Path:
    """Beside a staged corpus: the plan key it was written under, and its fingerprint."""
    return staged.with_name(f"{staged.name}.key")


def write_shuffled(
    out: PathLike,
    write: Callable[[Path], TokenShardSource],
    *,
    seed: int,
    shard_tokens: int,
    overwrite: bool,
    key: str | None = None,
) -> TokenShardSource:
    """Writes a corpus with ``write(staged)`` and copies it to ``out`` in the order of ``seed``.

    Args:
        out: The corpus directory.
        write: Writes the documents, in input order, as a corpus at the path it is given
            (replacing what is there).
        seed: The seed of the stored order (recorded in the manifest as ``shuffle_seed``).
        shard_tokens: Tokens per shard of ``out``.
        overwrite: Replace a corpus at ``out``.
        key: Names everything that decides what ``write`` writes: a staged corpus that an
            interrupted write with the same key left is copied without writing again.
            ``None``: always write.

    Raises:
        CorpusExistsError: ``out`` is in the way (checked before ``write``), or another
            shuffled write of ``out`` is in progress.

    Example:
        >>> import tempfile
        >>> from grainpack.ingest.writer import write_corpus
        >>> d = tempfile.mkdtemp()
        >>> src = write_shuffled(
        ...     f"{d}/out", lambda p: write_corpus(p, [[1], [2], [3]], overwrite=True),
        ...     seed=0, shard_tokens=1 << 28, overwrite=False,
        ... )
        >>> [x.tolist() for x in src]
        [[2], [1], [3]]
    """
    out = Path(os.path.abspath(out))
    check_target(out, overwrite=overwrite)  # before the work
    staged = staged_path(out)
    try:  # its lock file goes beside OUT (-o corpus/web in a fresh folder)
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # permissions, a read-only file system
        raise os_error(err, "creating the folder of", out) from None
    try:  # held by the whole write: one shuffled write of OUT uses its staged corpus
        lock = write_lock(key_file(staged))
    except CorpusExistsError as err:
        raise CorpusExistsError(f"another shuffled write of {out} is in progress: {err}") from None
    try:
        if key is not None and _written_before(staged, key):
            logger.info("%s: written before (by an interrupted write); shuffling it", staged)
        else:
            key_file(staged).unlink(missing_ok=True)
            src = write(staged)
            if key is not None:
                _record(staged, key, src.fingerprint)
        try:
            shuffled = shuffle_corpus(
                staged,
                out,
                seed=seed,
                shard_tokens=shard_tokens,
                overwrite=overwrite,
                verify=False,  # just written (and its input verified)
            )
        except KeyboardInterrupt:  # the staged corpus stays: the same write shuffles it
            raise
        except BaseException:
            _drop(staged)
            raise
        _drop(staged)
    finally:
        lock.release()
    return shuffled


def _written_before(staged: Path, key: str) -> bool:
    """Whether ``staged`` holds what an interrupted write with ``key`` wrote: the key file
    names the key and the fingerprint of the corpus it wrote."""
    try:
        recorded = json.loads(key_file(staged).read_text())
        return recorded == {"plan": key, "fingerprint": open_corpus(staged).fingerprint}
    except (OSError, ValueError):
        return False


def _record(staged: Path, key: str, fingerprint: str) -> None:
    path = key_file(staged)
    try:  # fsync'd (with the folder) before the copy, and a resumed write, rely on it
        write_synced(path, json.dumps({"plan": key, "fingerprint": fingerprint}).encode())
    except OSError as err:  # a full disk: the copy could not be resumed, so it goes too
        _drop(staged)
        raise os_error(err, "writing", path) from err


def _drop(staged: Path) -> None:
    shutil.rmtree(staged, ignore_errors=True)
    key_file(staged).unlink(missing_ok=True)
