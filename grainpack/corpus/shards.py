"""Shards: where a corpus's tokens live, how their documents are found, and how a file
that changed under a reader is recognised.

A :class:`ShardRecord` names a token file and its :class:`DocumentIndex`, the one interface
every on-disk format implements: :class:`OffsetsFile` (native, memory-mapped int64
offsets), :class:`LengthsFile` (Megatron's int32 lengths), :class:`SplitAfter` (documents
end after an eos id) and :class:`WholeShard`. Each file's :class:`FileIdentity` (device,
inode, size, modification time) is recorded when the corpus is opened and compared before
reads, so a truncated, rewritten or replaced file raises a :class:`CorpusError` naming it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import stat
from collections.abc import Callable
from typing import Protocol

import numpy as np

from grainpack.corpus.errors import CorpusError, os_error

logger = logging.getLogger(__name__)

__all__ = [
    "DocumentIndex",
    "FileIdentity",
    "LengthsFile",
    "OffsetsFile",
    "ShardRecord",
    "SplitAfter",
    "WholeShard",
    "check_offsets",
    "raise_open_file_limit",
    "read_whole",
]

# Scans (eos splitting) touch at most this many tokens at once: 16M tokens = 32-64 MB.
SCAN_CHUNK_TOKENS = 1 << 24


@dataclasses.dataclass(frozen=True)
class FileIdentity:
    """What a file was when a corpus was opened; a file that no longer matches changed.

    A rewrite in place changes the size or the modification time, a replacement (a rename
    over it, an ``overwrite=True`` write) the inode. Undetectable: a rewrite that keeps the
    size and restores the modification time, or one that lands within the file system's
    timestamp granularity (a few milliseconds) of the recorded one.

    Example:
        >>> import tempfile
        >>> path = tempfile.mkdtemp() + "/f"
        >>> _ = open(path, "wb").write(b"1234")
        >>> identity = FileIdentity.of(os.stat(path))
        >>> _ = open(path, "r+b").truncate(2)
        >>> identity.check(path)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        grainpack.corpus.errors.CorpusError: ... changed since the corpus was opened (size 4 -> 2 bytes)...
    """  # noqa: E501

    device: int
    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, stat: os.stat_result) -> FileIdentity:
        return cls(stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)

    def check(self, path: str, stat: os.stat_result | None = None) -> None:
        """Raises :class:`CorpusError` unless ``path`` (or its ``stat``) is still this file."""
        if stat is None:
            try:
                stat = os.stat(path)
            except FileNotFoundError:
                stat = None
            except OSError as err:
                raise os_error(err, "reading") from err
        if (
            stat is not None
            and stat.st_mtime_ns == self.mtime_ns
            and stat.st_size == self.size
            and stat.st_ino == self.inode
            and stat.st_dev == self.device
        ):
            return
        now = None if stat is None else FileIdentity.of(stat)
        if now is None:
            what = "deleted"
        elif (now.device, now.inode) != (self.device, self.inode):
            what = "replaced by another file"
        elif now.size != self.size:
            what = f"size {self.size} -> {now.size} bytes"
        else:
            what = "modified in place: same size, new modification time"
        raise CorpusError(
            f"{path}: changed since the corpus was opened ({what}); it was rewritten while "
            "being read. Reopen the corpus (a training job: restart it from its checkpoint, "
            "whose fingerprint and digest tell whether the data changed); to update a corpus "
            "that jobs read, write a new directory or use overwrite=True, never edit files"
        )


@dataclasses.dataclass(frozen=True)
class OffsetsFile:
    """Native offsets: ``num_documents + 1`` little-endian int64 at ``path[byte_offset:]``."""

    path: str
    num_documents: int
    byte_offset: int = 0
    identity: FileIdentity | None = dataclasses.field(default=None, compare=False, repr=False)

    def local_offsets(self, shard: ShardRecord, tokens: Callable[[], np.ndarray]) -> np.ndarray:
        offsets = self.mapped()
        check_offsets(offsets, shard.num_tokens, self.path)
        return offsets

    def mapped(self) -> np.ndarray:
        """The offsets as a read-only map of the file (values not checked; no copy), after
        checking that the file is the one the corpus was opened with."""
        raise_open_file_limit()
        try:
            with open(self.path, "rb") as f:  # the file checked is the file mapped
                if self.identity is not None:
                    self.identity.check(self.path, os.fstat(f.fileno()))
                mapped = np.memmap(
                    f, dtype="<i8", mode="r", offset=self.byte_offset,
                    shape=(self.num_documents + 1,),
                )  # fmt: skip
        except (OSError, ValueError) as err:
            if self.identity is not None:  # replaced or deleted since the check: say so
                self.identity.check(self.path)
            if isinstance(err, OSError):  # permissions, too many open files, ...
                raise os_error(err, "mapping", self.path) from err
            raise CorpusError(
                f"{self.path}: cannot map {self.num_documents + 1} int64 offsets at byte "
                f"{self.byte_offset}: {err} (file truncated); rebuild the corpus"
            ) from err
        return np.asarray(mapped)  # a plain ndarray view: cheaper indexing than np.memmap


@functools.cache
def raise_open_file_limit() -> None:
    """Raises this process's soft limit on open files to its hard limit, once, before the
    first map: Python's ``mmap`` keeps a descriptor per map, so a process that reads a
    corpus of thousands of shards holds thousands of them, past the usual soft limit of
    1024 (what Ray and others do too)."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        # Linux caps descriptors at fs.nr_open (2**20 by default) even with no hard limit
        target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
        if soft != resource.RLIM_INFINITY and soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            logger.info("raised the open-file limit from %d to %d (memory maps)", soft, target)


def mapped_shards_allowed(files: int, maps: int) -> int:
    """Shards a source keeps mapped (two descriptors and two maps each) under a hard limit
    of ``files`` open files and ``maps`` maps per process (``vm.max_map_count``): 1,024, or
    up to 4,096 where a 32nd of the files and a 16th of the maps leave room for that.

    Example:
        >>> [mapped_shards_allowed(f, 65530) for f in (4096, 20000, 1 << 20)]
        [1024, 1024, 4095]
    """
    return max(1024, min(4096, files // 32, maps // 16))


def max_mapped_shards() -> int:
    """:func:`mapped_shards_allowed` under this process's limits (1,024 where unknown)."""
    try:
        import resource

        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        with open("/proc/sys/vm/max_map_count") as f:
            maps = int(f.read())
    except (ImportError, OSError, ValueError):  # not Linux
        return 1024
    return mapped_shards_allowed(1 << 20 if hard == resource.RLIM_INFINITY else hard, maps)


@dataclasses.dataclass(frozen=True)
class LengthsFile:
    """Megatron's index: ``num_documents`` little-endian int32 lengths at
    ``path[byte_offset:]``."""

    path: str
    num_documents: int
    byte_offset: int = 0
    identity: FileIdentity | None = dataclasses.field(default=None, compare=False, repr=False)

    def local_offsets(self, shard: ShardRecord, tokens: Callable[[], np.ndarray]) -> np.ndarray:
        lengths = _read_exact(self.path, "<i4", self.num_documents, self.byte_offset, self.identity)
        offsets = np.zeros(lengths.size + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        check_offsets(offsets, shard.num_tokens, self.path)
        return offsets


@dataclasses.dataclass(frozen=True)
class SplitAfter:
    """Documents end after every ``eos_id`` token of the shard (tokens after the last one
    form a final document). The number of documents is known only after a scan."""

    eos_id: int
    num_documents: None = None

    def local_offsets(self, shard: ShardRecord, tokens: Callable[[], np.ndarray]) -> np.ndarray:
        n, stream = shard.num_tokens, tokens()
        ends = [
            np.flatnonzero(stream[s : s + SCAN_CHUNK_TOKENS] == self.eos_id) + (s + 1)
            for s in range(0, n, SCAN_CHUNK_TOKENS)
        ]
        stops = np.concatenate(ends).astype(np.int64) if ends else np.empty(0, np.int64)
        if n and (stops.size == 0 or stops[-1] != n):
            stops = np.append(stops, n)
        return np.concatenate([np.zeros(1, np.int64), stops])


@dataclasses.dataclass(frozen=True)
class WholeShard:
    """The shard is one document."""

    num_documents: int = 1

    def local_offsets(self, shard: ShardRecord, tokens: Callable[[], np.ndarray]) -> np.ndarray:
        return np.array([0, shard.num_tokens], dtype=np.int64)


class DocumentIndex(Protocol):
    """How a shard's document boundaries are found: the one interface every on-disk format
    implements (:class:`OffsetsFile`, :class:`LengthsFile`, :class:`SplitAfter`,
    :class:`WholeShard`)."""

    @property
    def num_documents(self) -> int | None:
        """Documents in the shard if known without reading, else ``None``."""

    def local_offsets(self, shard: ShardRecord, tokens: Callable[[], np.ndarray]) -> np.ndarray:
        """Shard-local offsets (int64, first 0, last ``shard.num_tokens``), validated;
        ``tokens()`` maps the shard's tokens for formats that must scan them."""


@dataclasses.dataclass(frozen=True)
class ShardRecord:
    """Where one shard's tokens live and how to find its document boundaries.

    Attributes:
        tokens_path: File holding the shard's tokens (raw little-endian, the source's dtype).
        num_tokens: Number of tokens in the shard.
        documents: The shard's :class:`DocumentIndex`.
        byte_offset: Byte position of the shard's first token in ``tokens_path``.
        identity: ``tokens_path`` when the corpus was opened (reads check it); ``None``: the
            file as it is when first mapped.
        summary_path: File of the shard's block token totals written with the corpus
            (:mod:`grainpack.corpus.summary`), if any.
    """

    tokens_path: str
    num_tokens: int
    documents: DocumentIndex = WholeShard()
    byte_offset: int = 0
    identity: FileIdentity | None = dataclasses.field(default=None, compare=False, repr=False)
    summary_path: str | None = None

    def __post_init__(self) -> None:
        if self.num_tokens < 0 or self.byte_offset < 0:
            raise ValueError(f"counts and offsets must be >= 0, got {self!r}")

    @property
    def num_documents(self) -> int | None:
        return self.documents.num_documents


def offsets_path_of(record: ShardRecord) -> str:
    return getattr(record.documents, "path", record.tokens_path)


def read_whole(
    path: str | os.PathLike[str], fix: str, *, dir_fd: int | None = None, limit: int | None = None
) -> tuple[os.stat_result, bytes]:
    """The status and bytes of the regular file ``path`` (its name read through the open
    directory ``dir_fd``, if given).
    A FIFO, a device (a link to ``/dev/zero``) or a directory, and a file over ``limit``
    bytes, are a :class:`CorpusError` naming it and ``fix``, instead of a read that blocks
    or never ends. ``OSError`` propagates.

    Example:
        >>> read_whole("/dev/zero", "use a corpus file")
        Traceback (most recent call last):
        ...
        grainpack.corpus.errors.CorpusError: /dev/zero: not a regular file (a FIFO, device or directory); use a corpus file
    """  # noqa: E501
    opened = path if dir_fd is None else os.path.basename(path)
    fd = os.open(opened, os.O_RDONLY | os.O_NONBLOCK, dir_fd=dir_fd)  # a FIFO: no wait
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise CorpusError(f"{path}: not a regular file (a FIFO, device or directory); {fix}")
        if limit is not None and status.st_size > limit:
            raise CorpusError(
                f"{path}: {status.st_size:,} bytes, more than such a file can hold "
                f"({limit:,}); {fix}"
            )
        with open(fd, "rb", closefd=False) as f:
            return status, f.read()
    finally:
        os.close(fd)


def _read_exact(
    path: str, dtype: str, count: int, offset: int, identity: FileIdentity | None
) -> np.ndarray:
    size = count * np.dtype(dtype).itemsize
    try:
        with open(path, "rb") as f:
            if identity is not None:
                identity.check(path, os.fstat(f.fileno()))
            f.seek(offset)
            values = np.frombuffer(f.read(size), dtype=dtype)
    except OSError as err:
        if identity is not None:  # replaced or deleted since it was opened: say so
            identity.check(path)
        raise os_error(err, "reading") from err
    if values.size != count:
        raise CorpusError(
            f"{path}: expected {count} values of {dtype} at byte {offset}, found {values.size} "
            "(file truncated); rebuild the corpus"
        )
    return values.astype(np.int64)


def check_offsets(offsets: np.ndarray, num_tokens: int, where: str) -> None:
    """Raises :class:`CorpusError` unless ``offsets`` start at 0, never decrease and end at
    ``num_tokens``; the message names the first bad document.

    Example:
        >>> check_offsets(np.array([0, 3, 2, 5]), 5, "offsets-00000.bin")
        Traceback (most recent call last):
        ...
        grainpack.corpus.errors.CorpusError: offsets-00000.bin: document offsets decrease at document 1 (3 -> 2); rebuild the corpus
    """  # noqa: E501
    if offsets.size == 0 or offsets[0] != 0:
        raise CorpusError(
            f"{where}: document offsets must start at 0, found {offsets[:1].tolist()}; "
            "rebuild the corpus"
        )
    steps = np.diff(offsets)
    if (steps < 0).any():
        i = int(np.argmax(steps < 0))
        raise CorpusError(
            f"{where}: document offsets decrease at document {i} "
            f"({offsets[i]} -> {offsets[i + 1]}); rebuild the corpus"
        )
    if offsets[-1] != num_tokens:
        raise CorpusError(
            f"{where}: last document offset is {offsets[-1]}, expected the shard's "
            f"{num_tokens} tokens; rebuild the corpus"
        )
