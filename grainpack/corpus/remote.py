# Over 400 lines, one module: the remote source, its range cache and the metadata cache share
# the pinned identities (the client is remote_client.py).
"""Corpora on object storage: a native corpus read from ``s3://``, ``gs://``, ``az://`` or
``https://`` through obstore (the ``remote`` extra), metadata once, tokens by range.

Opening (:func:`open_remote`) reads ``manifest.json`` and pins every token object's ETag
(a HEAD each, in parallel), after checking its size against the manifest. The summary files
(8 bytes per 256 documents) are fetched once into the host cache
(``$GRAINPACK_CACHE/remote``) under their sha256 from the manifest, checked on download and
at every open (a damaged cached copy is fetched again), and read from there as a local
corpus's are: a :class:`RemoteShardSource` is a
:class:`~grainpack.corpus.source.TokenShardSource` whose index math is the local one.
Offsets (8 bytes per document) are not fetched at open: the blocked order reads them by
range, a window at a time (:mod:`grainpack.corpus.remote_offsets`; each offsets object's
ETag pinned by its first read), and what needs every document's length (the exact order,
``lengths``, ``verify``) downloads a shard's whole offsets object into the host cache, by
sha256, as summaries are.

Tokens are never downloaded whole: reads ask for pieces (shard, token range), which are
served from a bounded in-memory LRU of fetched ranges, from the host's disk cache of aligned
chunks when ``disk_bytes`` is set (:mod:`grainpack.corpus.remote_disk`: every chunk a fetch
covers whole is written there, keyed by the object's pinned ETag), or coalesced (neighbours
closer than ``gap_bytes``, up to ``request_bytes`` a request) into ranged GETs,
``in_flight`` at a time.
Every GET carries ``If-Match`` with the pinned ETag and every response's length is checked:
an object replaced since the open is refused with a :class:`CorpusError` naming its URL,
like a rewritten local file; a failed or short read is retried (obstore's own retries, then
``attempts`` more of ours with jittered exponential backoff) and then fails naming the URL,
the byte range and the cause.

Clients are created in the process that uses them: a source pickles its URL, its pinned
identities and options, and builds its client (:class:`~grainpack.corpus.remote_client.
Client`) again on first use after unpickling (Grain workers are spawned; obstore's runtime
is not fork-safe). obstore is imported here and in :mod:`grainpack.corpus.remote_client`
only.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import hashlib
import logging
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from grainpack.corpus.cache import cache_root
from grainpack.corpus.errors import CorpusError
from grainpack.corpus.native import MANIFEST_NAME, read_manifest, source_fields
from grainpack.corpus.pool import ArrayPool
from grainpack.corpus.remote_cells import CellReader
from grainpack.corpus.remote_client import (
    Client,
    RemoteOptions,
    changed,
)
from grainpack.corpus.remote_disk import DiskRanges
from grainpack.corpus.remote_offsets import PAGE, OffsetPages
from grainpack.corpus.shards import OffsetsFile, ShardRecord
from grainpack.corpus.source import TokenShardSource
from grainpack.corpus.summary import summary_pieces

__all__ = ["RemoteOptions", "RemoteShardSource", "open_remote", "open_with_manifest"]

logger = logging.getLogger(__name__)

MiB = 1 << 20
# responses of this size or more are written into recycled blocks (corpus/pool.py)
POOLED_RESPONSE = 256 * 1024


class _RangeCache:
    """A bounded LRU of fetched byte ranges per shard (a byte budget, which also holds the
    responses on their way: :meth:`reserve`)."""

    def __init__(self, budget: int) -> None:
        self.budget, self.used, self.reserved = budget, 0, 0
        self.lock = threading.Lock()
        self.entries: collections.OrderedDict[tuple[int, int], tuple[int, Any]] = (
            collections.OrderedDict()
        )
        self.starts: dict[int, list[int]] = {}

    def entry(self, shard: int, lo: int, hi: int) -> tuple[int, int, memoryview] | None:
        """``(start, stop, bytes)`` of a range held that contains ``[lo, hi)``, if any."""
        with self.lock:
            starts = self.starts.get(shard)
            if not starts:
                return None
            i = bisect.bisect_right(starts, lo) - 1
            for start in starts[max(i - 3, 0) : i + 1][::-1]:  # a few: ranges rarely nest
                stop, data = self.entries[(shard, start)]
                if hi <= stop:
                    self.entries.move_to_end((shard, start))
                    return start, stop, memoryview(data).cast("B")
            return None

    def snapshot(self, shard: int) -> tuple[np.ndarray, np.ndarray, list[Any]]:
        """The starts, stops and bytes of the ranges held of ``shard`` (by start)."""
        with self.lock:
            starts = list(self.starts.get(shard, ()))
            held = [self.entries[(shard, s)] for s in starts]
        stops = np.array([stop for stop, _ in held], dtype=np.int64)
        return np.array(starts, dtype=np.int64), stops, [data for _, data in held]

    def add(self, shard: int, start: int, data: Any) -> None:
        size = len(data)
        if size > self.budget or size == 0:
            return
        with self.lock:
            key = (shard, start)
            if key in self.entries:
                self.used -= len(self.entries.pop(key)[1])
            else:
                bisect.insort(self.starts.setdefault(shard, []), start)
            self.entries[key] = (start + size, data)
            self.used += size
            self._evict()

    def reserve(self, size: int) -> None:
        """Counts ``size`` bytes of a response on its way (negative: no longer), evicting
        the least recently used ranges to make room: the blocks they free serve it."""
        with self.lock:
            self.reserved += size
            self._evict()

    def _evict(self) -> None:
        while self.entries and self.used + self.reserved > self.budget:
            (k, s), (_, old) = self.entries.popitem(last=False)
            self.used -= len(old)
            starts = self.starts[k]
            del starts[bisect.bisect_left(starts, s)]


@dataclasses.dataclass(frozen=True)
class _Cached:
    """A metadata object kept in the host cache under its sha256."""

    name: str
    sha256: str
    size: int

    @property
    def path(self) -> Path:
        return cache_root() / "remote" / f"{self.sha256}.bin"


class RemoteShardSource(TokenShardSource):
    """A native corpus on object storage: a :class:`TokenShardSource` whose offsets and
    summaries are cached local files and whose tokens are read by ranged GETs.

    Read through :meth:`read_pieces` (the pipeline stages each plan's pieces with it, see
    :mod:`grainpack.corpus.staging`) or the inherited reads (``src[i]``,
    :meth:`read_tokens`, :meth:`read_into`). It pickles its URL, its pinned ETags and its
    options, never a client. :attr:`stats` counts what it fetched.
    """

    remote = True

    def __init__(
        self,
        shards: Sequence[ShardRecord],
        *,
        url: str,
        objects: Sequence[str],
        etags: Sequence[str | None],
        metadata: Sequence[_Cached],
        offsets: Sequence[_Cached],
        options: RemoteOptions,
        **kwargs: Any,
    ) -> None:
        self.url, self.objects, self.etags = url, tuple(objects), tuple(etags)
        self.metadata, self.offsets_objects = tuple(metadata), tuple(offsets)
        self.offsets_etags: list[str | None] = [None] * len(offsets)  # pinned by first reads
        self.options = options
        super().__init__(shards, **kwargs)

    def _reset(self) -> None:
        super()._reset()
        self._stats: collections.Counter[str] = collections.Counter()
        self._stats_lock = threading.Lock()
        self._client = Client(self.url, self.options, self._count)
        self._ranges = _RangeCache(self.options.memory_bytes)
        # responses land in recycled memory (a block returns once the LRU let go of every
        # slice of it); at most half the requests in flight's worth kept unused
        self._buffers = ArrayPool(
            min_bytes=POOLED_RESPONSE,
            keep_bytes=self.options.in_flight * self.options.request_bytes // 2,
            fit=2.0,
        )
        # the staging of each plan's pieces: buffers of one size (a plan's rows), apart from
        # the responses' so that neither crowds the other out (a miss is fresh pages)
        self._staging = ArrayPool(keep_bytes=self.options.lookahead_bytes, fit=1.25)
        self._pages = OffsetPages(
            [s.num_documents or 0 for s in self._shards],
            [s.num_tokens for s in self._shards],
            [f"{self.url}/{o.name}" for o in self.offsets_objects],
            self._fetch_offsets,
            lambda *args: self._client.pool.submit(*args),
            budget=self.options.offsets_bytes,
            request_pages=max(1, self.options.request_bytes // (8 * PAGE)),
            gap_pages=self.options.gap_bytes // (8 * PAGE),
        )
        self._whole: set[int] = set()  # shards whose whole offsets object is in the cache
        items = self._file_dtype.itemsize
        cell = max(1, self.options.request_bytes // 2)
        # the disk's chunks are the windows' cells (4 MiB by default), so a window read
        # ahead is kept whole and found whole
        self._disk = (
            DiskRanges(
                [
                    (f"{self.url}/{name}", etag, s.byte_offset)
                    for name, etag, s in zip(self.objects, self.etags, self._shards)
                ],
                [s.num_tokens * items for s in self._shards],
                chunk=min(cell, 4 * MiB),
                budget=self.options.disk_bytes,
                count=self._count,
            )
            if self.options.disk_bytes
            else None
        )
        self._cells = CellReader(
            cell=cell,
            request=self.options.request_bytes,
            # the LRU's budget less what the rows staged ahead still read (cells of the
            # windows behind) and the responses on their way (counted in the budget)
            budget=max(
                self.options.memory_bytes
                - self.options.lookahead_bytes
                - self.options.in_flight * self.options.request_bytes,
                0,
            ),
            fetch=self._fetch_bytes,
            keep=self._ranges.add,
            held=lambda k, lo, hi: self._ranges.entry(k, lo, hi) is not None,
            submit=lambda *args: self._client.pool.submit(*args),
            gap=self.options.gap_bytes,
        )
        # reads windows ahead: the opened source, or a copy once it read tokens (a copy in a
        # Grain worker only plans, and fetching tokens there would be wasted)
        self._reads_tokens = False

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        for key in (
            "_stats",
            "_stats_lock",
            "_client",
            "_ranges",
            "_staging",
            "_pages",
            "_whole",
            "_stager",
            "_cells",
            "_disk",
            "_reads_tokens",
        ):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        # another host, or a cache cleared meanwhile: fetch the metadata again (by sha256)
        if any(not m.path.is_file() for m in self.metadata):
            _fetch_metadata(self._client, self.metadata)

    def __repr__(self) -> str:
        return (
            f"RemoteShardSource(fingerprint={self.fingerprint[:16]}, documents={len(self)}, "
            f"tokens={self.num_tokens})"
        )

    def _count(self, key: str, value: float) -> None:
        with self._stats_lock:
            self._stats[key] += value

    @property
    def stats(self) -> dict[str, float]:
        """What this process fetched: ``bytes`` and ``requests`` (ranged GETs and metadata
        downloads), ``token_requests`` (the ranged GETs of tokens among them),
        ``request_seconds`` (summed over requests), ``pieces``,
        ``cache_hits`` (pieces served from the in-memory LRU), ``retries`` (ours, beyond
        obstore's), ``wait_seconds`` (time reads waited for the network),
        ``prefetched_bytes`` (staged ahead of the rows being read), ``offsets_bytes``
        (document offsets read by range), ``window_bytes`` (the blocked order's windows read
        ahead whole, :mod:`grainpack.corpus.remote_cells`), ``metadata_cache_hits``/
        ``metadata_fetches`` (summaries, whole offsets objects), ``in_flight`` (ranged
        GETs being answered now) and, with a disk cache (``disk_bytes``), ``disk_hits``
        (chunks read from it), ``disk_bytes_read``, ``disk_bytes_written`` and
        ``disk_damaged`` (chunks found damaged, deleted and fetched again)."""
        with self._stats_lock:
            stats = dict(self._stats)
        stats["in_flight"] = self._client.in_flight
        return stats

    # -- offsets: by range, or whole where every length is needed ---------------------------

    def _fetch_offsets(self, k: int, first_page: int, stop_page: int) -> np.ndarray:
        """Offsets of pages ``[first_page, stop_page)`` of shard ``k`` (one ranged GET); the
        first read of an object pins its ETag, later ones ask for that one."""
        n = self._shards[k].num_documents or 0
        lo, hi = 8 * first_page * PAGE, 8 * min(stop_page * PAGE, n + 1)
        name = self.offsets_objects[k].name
        data, tag = self._client.get_range_tagged(name, lo, hi, self.offsets_etags[k])
        with self._stats_lock:
            pinned = self.offsets_etags[k]
            if pinned is None:
                self.offsets_etags[k] = tag
            elif tag is not None and tag != pinned:
                raise changed(f"{self.url}/{name}", f"ETag {pinned} -> {tag}")
            self._stats["offsets_bytes"] += hi - lo
        return np.frombuffer(data, "<i8").astype(np.int64)

    def _local(self, k: int, *, check: bool = False) -> np.ndarray:
        """Shard ``k``'s whole offsets (downloaded into the host cache first, by sha256)."""
        if k not in self._whole:
            _fetch_metadata(self._client, [self.offsets_objects[k]])
            self._whole.add(k)
        return super()._local(k, check=check)

    def document_offsets(self, documents: np.ndarray) -> np.ndarray:
        """:meth:`TokenShardSource.document_offsets`, read by range (pages of
        :class:`~grainpack.corpus.remote_offsets.OffsetPages`) unless the shard's whole
        offsets object was downloaded."""
        docs, starts = self._checked_documents(documents)
        flat = docs.reshape(-1)
        out = np.empty(flat.shape, dtype=np.int64)
        if not self._shards:
            out[:] = 0
            return out.reshape(docs.shape)
        shard = np.searchsorted(starts, flat, side="right") - 1
        np.minimum(shard, len(self._shards) - 1, out=shard)  # document N: the last shard's end
        for k in np.unique(shard).tolist():
            mine = np.flatnonzero(shard == k)
            index = flat[mine] - starts[k]
            local = self._locals[k] if k in self._whole else None
            values = local[index] if local is not None else self._pages.values(k, index)
            out[mine] = values + self._starts_list[k]
        return out.reshape(docs.shape)

    def offsets_between(self, first: int, stop: int) -> np.ndarray:
        """:meth:`TokenShardSource.offsets_between`, read by range (see
        :meth:`document_offsets`)."""
        n = len(self)
        if not 0 <= first <= stop <= n:
            raise IndexError(
                f"documents [{first}, {stop}) are outside [0, {n}); "
                "use 0 <= first <= stop <= num_documents"
            )
        return self.document_offsets(np.arange(first, stop + 1, dtype=np.int64))

    def read_ahead(self, runs: Sequence[tuple[int, int]], *, ahead: int = 1) -> None:
        """Fetches the offsets of document runs ``[first, stop)`` in parallel (the blocked
        order announces a window's runs before reading them one by one, ``ahead`` windows
        ahead of the one being read): by range, or the whole offsets object of a shard once
        when it is at most ``whole_offsets_bytes`` (kept in the host cache by sha256: no
        request for that shard's offsets again, in this run or the next); then the runs'
        tokens, if they fit the LRU with the ``ahead`` windows before them
        (:mod:`grainpack.corpus.remote_cells`)."""
        starts = self._document_starts()
        pieces = []
        for first, stop in runs:
            k = min(max(bisect.bisect_right(starts, first) - 1, 0), len(self._shards) - 1)
            while True:
                pieces.append((k, first - starts[k], min(stop, starts[k + 1]) - starts[k]))
                if stop <= starts[k + 1] or k + 1 == len(self._shards):
                    break
                k, first = k + 1, starts[k + 1]
        small = sorted(
            {
                k
                for k, _, _ in pieces
                if k not in self._whole
                and self.offsets_objects[k].size <= self.options.whole_offsets_bytes
            }
        )
        if small:
            _fetch_metadata(self._client, [self.offsets_objects[k] for k in small])
            self._whole.update(small)
        self._pages.prefetch([p for p in pieces if p[0] not in self._whole])
        if self._reads_tokens:  # the window's tokens, whole
            items = self._file_dtype.itemsize
            ranges = []
            for k, a, b in pieces:
                ends = np.array([a, b])
                local = self._local(k) if k in self._whole else None
                lo, hi = (
                    local[ends] if local is not None else self._pages.values(k, ends)
                ).tolist()
                ranges.append((k, lo * items, hi * items))
            self._cells.read_ahead(ranges, windows=ahead + 1)

    def _fetch_bytes(self, k: int, lo: int, hi: int) -> Any:
        """Bytes ``[lo, hi)`` of shard ``k``'s tokens, read ahead: one ranged GET, or with
        a disk cache, the chunks that cover them, those it lacks fetched whole (one GET from
        the first to the last missing): a window's runs rarely start or end on a chunk's
        edge, and the chunks they cut would never be kept otherwise."""
        self._count("window_bytes", hi - lo)
        if self._disk is None:
            return self._get(k, lo, hi)
        chunk = self._disk.chunk
        first = lo // chunk
        parts = [self._disk.read(k, c) for c in range(first, -(-hi // chunk))]
        missing = [first + i for i, part in enumerate(parts) if part is None]
        if missing:
            a, b = missing[0] * chunk, min((missing[-1] + 1) * chunk, self._disk.sizes[k])
            data = memoryview(self._get(k, a, b)).cast("B")
            for c in missing:
                parts[c - first] = data[c * chunk - a : (c + 1) * chunk - a]
        held = parts[0] if len(parts) == 1 else memoryview(b"".join(parts))  # type: ignore[arg-type]
        return held[lo - first * chunk : hi - first * chunk]

    def _get(self, k: int, lo: int, hi: int) -> Any:
        """Bytes ``[lo, hi)`` of shard ``k``'s tokens (one ranged GET), kept on disk."""
        base = self._shards[k].byte_offset
        self._ranges.reserve(hi - lo)  # what the LRU lets go of serves this response
        try:
            into = self._buffers.empty((_size_class(hi - lo),), np.uint8)
            data = self._client.get_range(
                self.objects[k], base + lo, base + hi, self.etags[k], into=into
            )
        finally:
            self._ranges.reserve(lo - hi)
        self._count("token_requests", 1)
        if self._disk is not None:
            self._disk.write(k, lo, data)
        return data

    def _from_disk(self, k: int, at: int) -> tuple[int, int, memoryview] | None:
        """``(start, stop, bytes)`` of the disk cache's chunk that holds byte ``at`` of
        shard ``k`` (put in the in-memory LRU too), if it holds it."""
        if self._disk is None:
            return None
        c = at // self._disk.chunk
        data = self._disk.read(k, c)
        if data is None:
            return None
        start = c * self._disk.chunk
        self._ranges.add(k, start, data)
        return start, start + len(data), data

    def _document_range(self, i: int) -> tuple[int, int]:
        a, b = self.document_offsets(np.array([i, i + 1])).tolist()
        return a, b

    # -- reads ---------------------------------------------------------------------------

    def _not_mapped(self) -> CorpusError:
        return CorpusError(
            f"{self.url}: tokens on object storage are read by range (read_pieces, "
            "read_tokens), never mapped: this reader needs a local corpus (copy it locally, "
            "or mount the bucket)"
        )

    def _shard(self, k: int) -> np.ndarray:
        raise self._not_mapped()

    def shard_view(self, shard: int) -> memoryview:
        raise self._not_mapped()

    def size_check(self, shard: int) -> Callable[[], None]:
        return lambda: None  # nothing is mapped; every GET carries If-Match

    def check_files(self, shards: Iterable[int]) -> None:
        """Nothing to check: every ranged GET carries the pinned ETag (``If-Match``)."""

    def _ids(self, k: int, first: int, stop: int) -> np.ndarray:
        out = np.empty(stop - first, self._file_dtype)
        self.read_pieces(out, [k], [first], [stop], [0])
        return out

    def buffer(self, count: int) -> np.ndarray:
        """An uninitialised array of ``count`` tokens (the file dtype) on memory this
        source recycles (the staging of a plan's pieces: fresh pages cost the kernel's
        zeroing, per element)."""
        return self._staging.empty((count,), self._file_dtype)

    def read_pieces(
        self,
        out: np.ndarray,
        shards: Sequence[int],
        starts: Sequence[int],
        stops: Sequence[int],
        at: Sequence[int],
        *,
        copy: Callable[..., int] | None = None,
    ) -> None:
        """Copies tokens ``[starts[i], stops[i])`` of shard ``shards[i]`` to
        ``out[at[i]:]`` (``out`` of the file dtype) for every ``i``: from the LRU (pieces
        inside one of its ranges in one call of ``copy``, the compiled
        :func:`~grainpack.pipeline.compiled.copy_pieces`, when given), or by coalesced
        ranged GETs, ``in_flight`` at a time; waits for all of them."""
        items = self._file_dtype.itemsize
        target = out.view(np.uint8)
        request, gap = self.options.request_bytes, self.options.gap_bytes
        self._reads_tokens = True
        columns = [np.asarray(x, dtype=np.int64) for x in (shards, starts, stops, at)]
        if self._cells.in_flight:  # a window read ahead holds them: no second request
            k, a, b = columns[:3]
            self._cells.wait(np.stack([k, a * items, b * items], axis=1))
        missing = []
        copied = None
        if copy is not None and len(shards) > 8:
            copied = self._copy_held(target, *columns, copy)
        hits = 0
        if copied is not None:  # the others, piece by piece
            hits = int(copied.sum())
            columns = [c[~copied] for c in columns]
        pieces = zip(*(c.tolist() for c in columns))
        into = memoryview(target).cast("B")
        held = (-1, 0, 0, memoryview(b""))  # the last range found: pieces share ranges
        for k, a, b, t in pieces:
            if b <= a:
                continue
            lo, hi, t = a * items, b * items, t * items
            while lo < hi:  # from the ranges held, which may split it (a window's cells)
                if not (held[0] == k and held[1] <= lo < held[2]):
                    entry = self._ranges.entry(k, lo, lo + 1) or self._from_disk(k, lo)
                    if entry is None:
                        break
                    held = (k, *entry)
                end = min(hi, held[2])
                into[t : t + end - lo] = held[3][lo - held[1] : end - held[1]]
                lo, t = end, t + end - lo
            if lo == hi:
                hits += 1
                continue
            for s in range(lo, hi, request):  # a long piece: requests of request_bytes
                e = min(s + request, hi)
                missing.append((k, s, e, t + s - lo))
        self._count("pieces", len(shards))
        self._count("cache_hits", hits)
        if not missing:
            return
        missing.sort()
        groups: list[list[tuple[int, int, int, int]]] = []
        for piece in missing:
            last = groups[-1] if groups else None
            if (
                last is not None
                and last[0][0] == piece[0]
                and piece[1] - max(p[2] for p in last[-1:]) <= gap
                and max(piece[2], last[-1][2]) - last[0][1] <= request
            ):
                last.append(piece)
            else:
                groups.append([piece])
        began = time.perf_counter()
        if len(groups) == 1:
            self._fetch_group(target, groups[0])
        else:
            futures = [self._client.pool.submit(self._fetch_group, target, g) for g in groups]
            for future in futures:
                future.result()  # the first failure raises (its CorpusError names the URL)
        self._count("fetch_seconds", time.perf_counter() - began)

    def _copy_held(
        self,
        target: np.ndarray,
        k: np.ndarray,
        starts: np.ndarray,
        stops: np.ndarray,
        at: np.ndarray,
        copy: Callable[..., int],
    ) -> np.ndarray | None:
        """Copies the pieces that lie whole inside one range of the LRU in one compiled
        call, ``copy`` (:func:`grainpack.pipeline.compiled.copy_pieces`: no Python work per
        piece, as the staging threads share the interpreter with the training loop); which
        pieces it copied (``None``: none, the table refused)."""
        items = self._file_dtype.itemsize
        lo, hi = starts * items, stops * items
        buffer = np.full(len(k), -1, dtype=np.int64)
        base = np.zeros(len(k), dtype=np.int64)
        views: list[np.ndarray] = []  # the ranges' bytes, alive until the copy is done
        for shard in np.unique(k).tolist():
            held_starts, held_stops, data = self._ranges.snapshot(shard)
            if not len(held_starts):
                continue
            mine = np.flatnonzero(k == shard)
            i = np.searchsorted(held_starts, lo[mine], side="right") - 1
            inside = (i >= 0) & (hi[mine] <= held_stops[np.maximum(i, 0)])
            mine, i = mine[inside], i[inside]
            buffer[mine], base[mine] = len(views) + i, held_starts[i]
            views += [np.frombuffer(d, dtype=np.uint8) for d in data]
        copied = (buffer >= 0) & (hi > lo)
        if not copied.any():
            return copied
        table = np.stack([buffer, lo - base, hi - base, at * items])[:, copied]
        addresses = np.array([v.ctypes.data for v in views], dtype=np.int64)
        sizes = np.array([v.size for v in views], dtype=np.int64)
        if copy(target.reshape(-1), addresses, sizes, table) != 0:
            return None  # a table the ranges disagree with: the piece by piece path
        return copied

    def _fetch_group(self, target: np.ndarray, group: list[tuple[int, int, int, int]]) -> None:
        k = group[0][0]
        lo, hi = group[0][1], max(p[2] for p in group)
        data = self._get(k, lo, hi)
        whole = np.frombuffer(data, np.uint8)
        for _, s, e, t in group:
            target[t : t + e - s] = whole[s - lo : e - lo]
        self._ranges.add(k, lo, data)


def _size_class(size: int) -> int:
    """The buffer size that serves a response of ``size`` bytes: itself below
    ``POOLED_RESPONSE`` (malloc recycles small blocks), else the next of ``POOLED_RESPONSE``
    times a power of the square root of 2 (at most 41 % over; a few sizes, so that a
    window's responses find the blocks the window before released).

    Example:
      >>> [_size_class(n) for n in (1000, 300_000, 8 << 20, (8 << 20) + 1)]
      [1000, 372736, 8388608, 11866112]
    """
    if size <= POOLED_RESPONSE:
        return size
    k = math.ceil(2 * math.log2(size / POOLED_RESPONSE))
    return max(-(-round(POOLED_RESPONSE * 2 ** (k / 2)) // 4096) * 4096, size)


def _verified(path: Path, item: _Cached) -> bool:
    try:
        if path.stat().st_size != item.size:
            return False
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(8 * MiB):
                digest.update(chunk)
        return digest.hexdigest() == item.sha256
    except OSError:
        return False


def _fetch_metadata(client: Client, items: Sequence[_Cached], *, check: bool = True) -> None:
    """Puts every one of ``items`` in the host cache (downloaded, checked against its
    sha256, written atomically) unless a copy there already has that sha256."""

    def one(item: _Cached) -> None:
        path = item.path
        if check and _verified(path, item):
            client.count("metadata_cache_hits", 1)
            return
        if not check and path.is_file():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as f:

            def begin() -> None:
                nonlocal digest
                digest = hashlib.sha256()
                f.seek(0)
                f.truncate()

            def write(chunk: Any) -> None:
                digest.update(chunk)
                f.write(chunk)

            try:
                client.download(item.name, item.size, begin, write)
            except BaseException:
                f.close()
                os.unlink(f.name)
                raise
        if digest.hexdigest() != item.sha256:
            os.unlink(f.name)
            raise CorpusError(
                f"{client.url}/{item.name}: its sha256 is {digest.hexdigest()}, the manifest "
                f"says {item.sha256}: the object changed after the corpus was written (or was "
                "uploaded damaged); upload the corpus again"
            )
        os.chmod(f.name, 0o644)  # other users' jobs on the machine read it too
        os.replace(f.name, path)
        client.count("metadata_fetches", 1)

    if len(items) <= 1:
        for item in items:
            one(item)
        return
    for future in [client.pool.submit(one, item) for item in items]:
        future.result()


def open_remote(
    url: str, eos_id: int | None = None, *, options: RemoteOptions | None = None
) -> RemoteShardSource:
    """Opens the native corpus at ``url`` (``s3://bucket/prefix`` and the like): reads its
    manifest, pins its token objects (ETag, size) and caches its metadata (see the module
    docstring).

    Raises:
        CorpusNotFoundError: No manifest at ``url`` (also a ``FileNotFoundError``).
        CorpusError: A malformed manifest, a token object of the wrong size, a metadata
            object that does not match its sha256, access denied (naming the URL).
    """
    return open_with_manifest(url, eos_id, options)[0]


def open_with_manifest(
    url: str, eos_id: int | None, options: RemoteOptions | None = None
) -> tuple[RemoteShardSource, dict[str, Any]]:
    """:func:`open_remote`, and the manifest it read (a dict, schema-checked)."""
    try:
        import obstore  # noqa: F401
    except ImportError:
        raise ImportError(
            f"reading {url} needs obstore: pip install 'grainpack[remote]' (or obstore>=0.12)"
        ) from None
    options = RemoteOptions.from_env() if options is None else options
    url = url.rstrip("/")
    stats: collections.Counter[str] = collections.Counter()
    client = Client(url, options, lambda key, value: stats.update({key: value}))
    raw, _ = client.get_whole(MANIFEST_NAME)
    folder = cache_root() / "remote" / "manifests" / hashlib.sha256(raw).hexdigest()
    file = folder / MANIFEST_NAME
    if not (file.is_file() and file.read_bytes() == raw):
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, suffix=".tmp", delete=False) as f:
            f.write(raw)
        os.replace(f.name, file)
    try:
        m = read_manifest(folder)
    except CorpusError as err:
        text = str(err).replace(str(file), f"{url}/{MANIFEST_NAME}").replace(str(folder), url)
        raise CorpusError(text) from None
    itemsize = np.dtype(m["dtype"]).itemsize
    block_docs = m.get("summary_block_docs")
    metadata, offsets_items, summary_items = [], [], []
    first = 0
    for s in m["shards"]:
        offsets = _Cached(s["offsets_file"], s["offsets_sha256"], 8 * (s["num_documents"] + 1))
        offsets_items.append(offsets)
        summary = None
        if block_docs is not None:
            size = 8 * summary_pieces(first, s["num_documents"], block_docs)
            summary = _Cached(s["summary_file"], s["summary_sha256"], size)
        summary_items.append(summary)
        first += s["num_documents"]
        metadata += [] if summary is None else [summary]
    _fetch_metadata(client, metadata)
    names = [s["tokens_file"] for s in m["shards"]]
    heads = [client.pool.submit(client.head, name) for name in names]
    etags = []
    for s, name, head in zip(m["shards"], names, heads):
        meta = head.result()
        expected = s["num_tokens"] * itemsize
        if meta["size"] != expected:
            raise CorpusError(
                f"{url}/{name}: has {meta['size']} bytes, expected {expected} "
                f"({s['num_tokens']} {m['dtype']} tokens); the object is truncated, "
                "replaced or still uploading: upload the corpus again"
            )
        etags.append(meta.get("e_tag"))
    records = [
        ShardRecord(
            f"{url}/{name}",
            s["num_tokens"],
            OffsetsFile(str(o.path), s["num_documents"]),
            summary_path=None if summary is None else str(summary.path),
        )
        for s, name, o, summary in zip(m["shards"], names, offsets_items, summary_items)
    ]
    source = RemoteShardSource(
        records,
        url=url,
        objects=names,
        etags=etags,
        metadata=metadata,
        offsets=offsets_items,
        options=options,
        **source_fields(m, url, eos_id),
        summary_block_docs=block_docs,
    )
    for key, value in stats.items():  # what opening fetched
        source._count(key, value)
    client.count, source._client = source._count, client  # its store and pool, reused
    source._reads_tokens = True
    return source, m
