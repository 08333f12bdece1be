"""``open_corpus``: the one entry that knows every on-disk format.

A directory with ``manifest.json`` is a native corpus (:mod:`grainpack.corpus.native`), a
directory with ``index.json`` the window loader's flat-shard format
(:mod:`grainpack.corpus.flat`), and a ``PREFIX`` with ``PREFIX.bin``/``PREFIX.idx`` a
Megatron-LM indexed dataset (:mod:`grainpack.corpus.megatron`). Each becomes a
:class:`~grainpack.corpus.source.TokenShardSource` without conversion.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from grainpack.corpus.errors import CorpusError, CorpusNotFoundError, os_error
from grainpack.corpus.flat import open_flat_shards
from grainpack.corpus.megatron import open_megatron
from grainpack.corpus.native import (
    MANIFEST_NAME,
    MAX_TOKEN_ID,
    PathLike,
    not_a_corpus,
    open_native,
    plain_int,
)
from grainpack.corpus.source import TokenShardSource
from grainpack.corpus.urls import is_url, local_path
from grainpack.index.checks import is_int

__all__ = ["fingerprint", "open_corpus"]


def open_corpus(path: PathLike, *, eos_id: int | None = None) -> TokenShardSource:
    """Opens a native corpus, a flat-shard ``index.json`` directory or a Megatron prefix.

    Args:
        path: A directory with ``manifest.json`` (native) or ``index.json`` (flat-shard
            layout: shard file name -> uint16 token count), or a Megatron ``PREFIX`` (also
            accepted: ``PREFIX.bin`` / ``PREFIX.idx``).
            A native corpus may also be a URL: ``s3://``, ``gs://``, ``az://``,
            ``https://`` (read through obstore, the ``remote`` extra: a
            :class:`~grainpack.corpus.remote.RemoteShardSource`) or ``file://``.
        eos_id: Flat-shard format: split each shard after every ``eos_id`` (a document ends with its
            eos; tokens after the last eos form a final document); without it each non-empty
            shard is one document. Native/Megatron: recorded on the source only (a native
            corpus's own ``eos_id`` must agree).

    Raises:
        CorpusNotFoundError: Nothing exists at ``path`` (a ``FileNotFoundError`` and a
            ``ValueError``).
        CorpusError: (a ``ValueError``) ``path`` is not a corpus, or is malformed/incomplete.

    Example:
        >>> import tempfile
        >>> from grainpack import write_corpus
        >>> path = tempfile.mkdtemp()
        >>> _ = write_corpus(path, [[1], [2, 3]])
        >>> src = open_corpus(path)
        >>> len(src), src.num_tokens, src[1].tolist()
        (2, 3, [2, 3])
    """
    eos_id = plain_int(eos_id)
    if eos_id is not None and (not is_int(eos_id) or not 0 <= eos_id <= MAX_TOKEN_ID):
        raise ValueError(f"eos_id must be a token id (an int in [0, 2**31)) or None, got {eos_id=}")
    if is_url(path):  # object storage: metadata cached, tokens read by range
        from grainpack.corpus.remote import open_remote

        return open_remote(path, eos_id)
    path = local_path(path)  # file:// URLs are local folders, memory-mapped
    try:
        return _open(Path(path), eos_id)
    except OSError as err:  # a symlink loop, permissions, ...: name the file and the fix
        if isinstance(err, CorpusError):
            raise
        raise os_error(err, "opening") from err


def _open(p: Path, eos_id: int | None) -> TokenShardSource:
    with contextlib.suppress(FileNotFoundError):  # a Megatron PREFIX is no file itself
        os.stat(p)
    if p.is_dir():
        if not os.access(p, os.R_OK | os.X_OK):  # its files would look absent
            denied = PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(p))
            raise os_error(denied, "opening")
        if os.path.lexists(p / MANIFEST_NAME):
            return open_native(p, eos_id)
        if os.path.lexists(p / "index.json"):
            return open_flat_shards(p, eos_id=eos_id)
        raise CorpusError(not_a_corpus(p))
    if p.is_file() and (p.parent / MANIFEST_NAME).is_file():  # a shard, not a Megatron .bin
        raise CorpusError(not_a_corpus(p))
    prefix = p.with_suffix("") if p.suffix in (".bin", ".idx") else p
    if Path(f"{prefix}.idx").exists() or Path(f"{prefix}.bin").exists():
        return open_megatron(prefix, eos_id=eos_id)
    if not p.exists():
        raise CorpusNotFoundError(not_a_corpus(p).replace("is not a corpus", "does not exist"))
    if p.is_dir():  # none at the checks above: a corpus published meanwhile
        return _open(p, eos_id)
    raise CorpusError(not_a_corpus(p))


def fingerprint(path: PathLike, *, eos_id: int | None = None) -> str:
    """Content-derived hex digest of the corpus at ``path`` (see :func:`open_corpus`).

    Native: sha256 of the canonical manifest JSON, which holds every file's sha256, or the
    stream's ``content_sha256`` and then leaves out the shard list (so the same documents cut
    into other shards keep the fingerprint).
    Flat-shard format: sha256 over index.json, ``eos_id`` and the shard file sizes.
    Megatron: sha256 over the ``.idx`` bytes and the ``.bin`` size.
    """
    return open_corpus(path, eos_id=eos_id).fingerprint
