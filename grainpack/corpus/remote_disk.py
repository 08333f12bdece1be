"""The host's disk cache of a remote corpus's token bytes: aligned chunks, LRU, bounded.

A chunk is bytes ``[c*chunk, (c+1)*chunk)`` of one shard's tokens (the last one of a shard
shorter), kept as one file, ``$GRAINPACK_CACHE/remote/ranges/<key>/c<c>-<size>.bin``: the
bytes, then their CRC-32 (4 bytes, little-endian). The key is a hash of the object's URL,
its pinned ETag, the shard's byte offset in it and the chunk size, so an object replaced in
the store (another ETag) is another key and its old chunks are never read for it; an object
without an ETag is not cached. Files are written whole (a temporary file, then
``os.replace``) and checked when read: a damaged or short one is deleted and read as a miss.

The whole ``ranges`` folder, shared by every source and process of the host, is kept within
a byte budget: a hit touches its file's mtime, and a writer that would pass the budget lists
the folder and deletes the least recently used files (files deleted meanwhile by another
process are skipped). Writes run on one background thread per cache, behind a bounded queue.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import queue
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from grainpack.corpus.cache import cache_root

__all__ = ["DiskRanges"]

logger = logging.getLogger(__name__)

_CRC = 4  # bytes of the trailer
# writes waiting for the thread; a reader that fills the queue waits (the disk is slower
# than the network): at most this many chunks held in memory for the disk
_QUEUED = 16
# a temporary file this old was left by a killed writer
_STALE_S = 3600.0


class DiskRanges:
    """Chunks of shards' token bytes on the host's disk (see the module docstring).

    Args:
        objects: Each shard's ``(URL of its token object, pinned ETag, byte offset of its
            tokens in the object)``; an ETag of ``None``: that shard is not cached.
        sizes: Bytes of each shard's tokens.
        chunk: Chunk size in bytes.
        budget: The most bytes the host's ``ranges`` folder holds (all corpora).
        count: ``count(name, value)`` adds to a statistic: ``disk_hits`` (chunks read),
            ``disk_bytes_read``, ``disk_bytes_written``, ``disk_damaged``.
        root: The folder (default: ``$GRAINPACK_CACHE/remote/ranges``).

    Example:
        >>> import tempfile
        >>> disk = DiskRanges([("s3://b/c/tokens-00000.bin", '"e1"', 0)], [10], chunk=4,
        ...                   budget=1 << 20, count=lambda name, value: None,
        ...                   root=Path(tempfile.mkdtemp()))
        >>> disk.write(0, 2, bytes(range(2, 10)))  # chunks 1 and 2 (2 is the last: 2 bytes)
        >>> disk.flush()
        >>> disk.read(0, 0) is None, bytes(disk.read(0, 1)), bytes(disk.read(0, 2))
        (True, b'\\x04\\x05\\x06\\x07', b'\\x08\\t')
    """

    def __init__(
        self,
        objects: Sequence[tuple[str, str | None, int]],
        sizes: Sequence[int],
        *,
        chunk: int,
        budget: int,
        count: Callable[[str, float], None],
        root: Path | None = None,
    ) -> None:
        self.root = cache_root() / "remote" / "ranges" if root is None else root
        self.sizes, self.chunk, self.budget, self.count = list(sizes), chunk, budget, count
        self.folders: list[Path | None] = [
            None if etag is None else self.root / _key(url, etag, base, chunk)
            for url, etag, base in objects
        ]
        self._queue: queue.Queue[tuple[int, int, Any]] = queue.Queue(_QUEUED)
        self._lock = threading.Lock()
        self._pid = -1
        self._used: int | None = None  # bytes in the folder: the last listing and our writes
        self._since_listing = 0

    def _path(self, k: int, c: int) -> Path | None:
        folder = self.folders[k]
        if folder is None or not 0 <= c * self.chunk < self.sizes[k]:
            return None
        return folder / f"c{c}-{self._size(k, c)}.bin"

    def _size(self, k: int, c: int) -> int:
        return min(self.chunk, self.sizes[k] - c * self.chunk)

    def read(self, k: int, c: int) -> memoryview | None:
        """Chunk ``c`` of shard ``k``, checked, or ``None`` (not held, or damaged: then
        deleted)."""
        path = self._path(k, c)
        if path is None:
            return None
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError:  # not held, or evicted meanwhile
            return None
        size = self._size(k, c)
        data = memoryview(raw)[:size]
        if len(raw) != size + _CRC or zlib.crc32(data) != int.from_bytes(raw[size:], "little"):
            logger.warning("%s: damaged (%d bytes or a wrong CRC); deleted", path, len(raw))
            self.count("disk_damaged", 1)
            _unlink(path)
            return None
        with contextlib.suppress(OSError):  # evicted meanwhile: the bytes are still right
            os.utime(path)  # most recently used
        self.count("disk_hits", 1)
        self.count("disk_bytes_read", size)
        return data

    def write(self, k: int, lo: int, data: Any) -> None:
        """Queues the chunks of shard ``k`` that bytes ``data``, from ``lo`` on, cover whole
        for writing (not the parts of chunks at either end); waits while the queue is full."""
        if self.folders[k] is None or self.budget < min(self.chunk, self.sizes[k]) + _CRC:
            return
        view = memoryview(data).cast("B")
        hi = min(lo + len(view), self.sizes[k])
        c = -(-lo // self.chunk)  # the first chunk starting at or after lo
        while c * self.chunk < hi and c * self.chunk + self._size(k, c) <= hi:
            a = c * self.chunk
            self._started()
            self._queue.put((k, c, view[a - lo : a - lo + self._size(k, c)]))
            c += 1

    def flush(self) -> None:
        """Waits until every chunk queued is written (or skipped)."""
        if self._pid == os.getpid():
            self._queue.join()

    def _started(self) -> None:
        if self._pid == os.getpid():
            return
        with self._lock:
            if self._pid != os.getpid():
                self._queue = queue.Queue(_QUEUED)  # a forked copy's queue has no thread
                threading.Thread(target=self._run, name="grainpack-disk", daemon=True).start()
                self._pid = os.getpid()

    def _run(self) -> None:
        while True:
            k, c, data = self._queue.get()
            try:
                self._write(k, c, data)
            except OSError as err:  # a full or read-only disk: the bytes are only not kept
                logger.warning("cannot keep chunk %d of shard %d on disk: %s", c, k, err)
            finally:
                self._queue.task_done()

    def _write(self, k: int, c: int, data: memoryview) -> None:
        path = self._path(k, c)
        if path is None or path.exists():
            return
        size = len(data) + _CRC
        if (
            self._used is None
            or self._used + size > self.budget
            or self._since_listing > (self.budget // 8)
        ):
            # another process's writes are seen here; evicting to 90% lists the folder once
            # per tenth of the budget written, not per chunk
            self._evict(int(self.budget * 0.9) - size)
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as f:
            f.write(data)
            f.write(zlib.crc32(data).to_bytes(_CRC, "little"))
        os.chmod(f.name, 0o644)  # other users' jobs on the machine read it too
        os.replace(f.name, path)
        self._used = (self._used or 0) + size
        self._since_listing += size
        self.count("disk_bytes_written", len(data))

    def _evict(self, target: int) -> None:
        """Deletes the least recently used files of the folder until it holds at most
        ``target`` bytes."""
        files: list[tuple[float, int, str]] = []
        now = time.time()
        try:
            folders = list(os.scandir(self.root))
        except FileNotFoundError:
            folders = []
        for folder in folders:
            try:
                for entry in os.scandir(folder.path):
                    st = entry.stat()
                    if entry.name.endswith(".tmp") and now - st.st_mtime > _STALE_S:
                        _unlink(Path(entry.path))
                        continue
                    files.append((st.st_mtime, st.st_size, entry.path))
            except (FileNotFoundError, NotADirectoryError):  # gone meanwhile
                continue
        used = sum(size for _, size, _ in files)
        files.sort()
        for _, size, name in files:
            if used <= target:
                break
            if not name.endswith(".tmp"):  # another writer's, being written
                _unlink(Path(name))
                used -= size
        self._used, self._since_listing = used, 0


def _key(url: str, etag: str, base: int, chunk: int) -> str:
    return hashlib.sha256(f"{url}\n{etag}\n{base}\n{chunk}".encode()).hexdigest()[:32]


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):  # another process deleted it first
        path.unlink()
