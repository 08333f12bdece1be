"""Arrays whose memory is recycled once the consumer has let go of them: batches, and the
bytes a remote source fetches.

A fresh multi-MB numpy array is fresh pages: glibc serves a large allocation with ``mmap``
(or trims its heap once the array is freed), so every batch paid a page fault, and the
zeroing of a page, per 4 KiB it wrote. With 256 rows of 2048 that was most of ``next()``'s
time (issue 36: the full layout fell from ~600 M tokens/s at 64 rows to ~150 M at 256).
:class:`ArrayPool` hands out arrays on memory it keeps: an array's memory goes back to the
pool only when no view of it is left (numpy's ``base`` chain ends at a small lease object,
and a weak reference to the lease returns its memory when it dies), so a batch that escapes
stays valid for as long as anything holds any part of it. A remote source's responses are
written into such arrays too (:mod:`grainpack.corpus.remote`): kept in its LRU by slices and
freed by whichever thread evicts them, fresh buffers there were the client's main cost (the
kernel zeroing new pages).
"""

from __future__ import annotations

import functools
import math
import threading
import weakref

import numpy as np

__all__ = ["ArrayPool"]

# Arrays smaller than this come from np.empty: malloc recycles them from its heap already,
# and a lease (about 2 µs) would cost more than it saves.
POOL_BYTES = 1 << 18
# Released blocks kept per size; more are freed (a consumer that held many batches at once
# does not leave them all allocated).
KEEP = 16


class _Lease:
    """The owner an array of pooled memory points to (its ``base``): alive while any view
    of the array is, and it keeps the block alive as long (even past the pool)."""

    __slots__ = ("__array_interface__", "__weakref__", "block")

    def __init__(self, block: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.block = block
        self.__array_interface__ = {
            "shape": shape,
            "typestr": dtype.str,
            "data": (block.ctypes.data, False),
            "version": 3,
        }


class ArrayPool:
    """``np.empty`` on recycled memory, for arrays of ``min_bytes`` or more.

    Args:
      min_bytes: smaller arrays are plain ``np.empty``.
      keep: released blocks kept per size.
      keep_bytes: released blocks kept in all (bytes; ``None``: no bound beyond ``keep``).
      fit: an array may take a released block of up to ``fit`` times its size (the
        smallest there is) when none of its own size is free.

    Example:
      >>> pool = ArrayPool(min_bytes=0)
      >>> a = pool.empty((2, 3), np.int32)
      >>> address = a.ctypes.data
      >>> view = a[1:]
      >>> del a
      >>> pool.empty((2, 3), np.int32).ctypes.data == address  # a view still holds it
      False
      >>> del view
      >>> pool.empty((2, 3), np.int32).ctypes.data == address  # released: recycled
      True
    """

    def __init__(
        self,
        *,
        min_bytes: int = POOL_BYTES,
        keep: int = KEEP,
        keep_bytes: int | None = None,
        fit: float = 1.0,
    ) -> None:
        self.min_bytes, self.keep, self.keep_bytes, self.fit = min_bytes, keep, keep_bytes, fit
        self.free: dict[int, list[np.ndarray]] = {}  # size in bytes -> released blocks
        self.kept = 0  # bytes of the released blocks
        self.leases: set[weakref.ref] = set()  # the weak references, kept alive here
        # leases die in any thread (a remote source's LRU evicts on its request threads);
        # reentrant: a collection inside the lock may release a lease
        self.lock = threading.RLock()

    def empty(self, shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
        """A C-contiguous array of ``shape`` and ``dtype``, uninitialised, as ``np.empty``."""
        dtype = np.dtype(dtype)
        size = math.prod(shape) * dtype.itemsize
        if size < self.min_bytes:
            return np.empty(shape, dtype)
        with self.lock:
            fits = [n for n, blocks in self.free.items() if blocks and size <= n <= size * self.fit]
            block = self.free[min(fits)].pop() if fits else None
            if block is not None:
                self.kept -= block.size
        if block is None:
            block = np.empty(size, np.uint8)
        lease = _Lease(block, tuple(shape), dtype)
        with self.lock:
            self.leases.add(weakref.ref(lease, functools.partial(self._release, block)))
        return np.asarray(lease)

    def _release(self, block: np.ndarray, lease: weakref.ref) -> None:
        """A lease died (no view of its array is left): its block is free again."""
        with self.lock:
            self.leases.discard(lease)
            free = self.free.setdefault(block.size, [])
            room = self.keep_bytes is None or self.kept + block.size <= self.keep_bytes
            if len(free) < self.keep and room:
                free.append(block)
                self.kept += block.size

    def clear(self) -> None:
        """Frees the released blocks (arrays still held keep theirs)."""
        with self.lock:
            self.free.clear()
            self.kept = 0
