"""The corpus errors: every problem with a corpus on disk is one of these (all ``ValueError``)."""

from __future__ import annotations

import errno
import os
from typing import Any

from grainpack.index.options import OptionError

__all__ = [
    "CorpusError",
    "CorpusExistsError",
    "CorpusNotFoundError",
    "OverwriteError",
    "os_error",
]


class CorpusError(ValueError):
    """A corpus on disk is missing, malformed or inconsistent (the message says what and where)."""


class CorpusNotFoundError(FileNotFoundError, CorpusError):
    """Nothing exists at the corpus path (both a ``FileNotFoundError`` and a ``ValueError``)."""


class CorpusExistsError(FileExistsError, CorpusError):
    """A write would replace a corpus without ``overwrite=True``, or another write to the same
    path is in progress (also a ``ValueError``)."""


class OverwriteError(CorpusExistsError, OptionError):
    """A corpus, or files named as a corpus's, are in the way of a write without
    ``overwrite``: the message names that option as an :class:`OptionError` does."""

    def __init__(self, template: str, **options: Any) -> None:
        OptionError.__init__(self, template, **options)


# errno -> what to do about it; the message names the file the system names.
_FIXES = {
    errno.EACCES: "make it accessible (chmod/chown) or run as a user who may read and write it",
    errno.EPERM: "make it accessible (chmod/chown) or run as a user who may read and write it",
    errno.ELOOP: "a symbolic link points (through other links) back at itself: fix the link",
    errno.ENOTDIR: "a part of the path is a file, not a directory: choose another path",
    errno.EISDIR: "it is a directory where a file was expected: remove or rename it",
    errno.ENOSPC: "the disk is full: free space or write elsewhere",
    errno.EFBIG: "a file size limit (ulimit -f, or the file system's) stopped the write: "
    "raise it, or write smaller shards",
    errno.EDQUOT: "the disk quota is used up: free space or write elsewhere",
    errno.EROFS: "the file system is read-only: write elsewhere",
    errno.ENAMETOOLONG: "the path is too long: choose a shorter one",
    errno.EMFILE: "too many open files: each mapped shard keeps two open (tokens and offsets); "
    "raise the hard limit (ulimit -Hn, or the container's nofile limit) or write fewer, "
    "larger shards",
}


def os_error(err: OSError, doing: str, path: str | os.PathLike[str] | None = None) -> CorpusError:
    """A :class:`CorpusError` for an ``OSError`` met while ``doing`` something with a corpus:
    it names the file (the error's, else ``path``) and the fix (a missing file gives a
    :class:`CorpusNotFoundError`).

    Example:
        >>> os_error(PermissionError(13, "Permission denied", "/c/tokens-00000.bin"), "reading")
        CorpusError('reading /c/tokens-00000.bin: Permission denied; make it accessible (chmod/chown) or run as a user who may read and write it')
    """  # noqa: E501
    name = err.filename if err.filename is not None else path
    where = "the corpus" if name is None else os.fsdecode(name)
    fix = _FIXES.get(err.errno or 0, "check the path and the file system")
    message = f"{doing} {where}: {err.strerror or err}; {fix}"
    if isinstance(err, FileNotFoundError):
        return CorpusNotFoundError(message)
    return CorpusError(message)
