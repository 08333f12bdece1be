"""Document offsets of a remote corpus read by range: what the blocked order needs of them.

A native shard's offsets object holds ``n + 1`` little-endian int64 (8 bytes per document):
80 GB for 10**10 documents, so a remote corpus does not download it at open. The blocked
order reads the offsets of one window at a time (``K`` runs of ``C`` consecutive documents,
``8*K*C`` bytes) and then those of the documents its rows hold, all inside that window.
:class:`OffsetPages` serves such reads from pages of ``PAGE`` offsets, fetched by ranged GETs
(consecutive missing pages of a shard coalesced into one request, up to a byte limit, the
requests in parallel) and kept in a bounded pool (first in, first out: the blocked order
moves from window to window). Memory is the pool, whatever the number of documents.

Pages are checked when they arrive: values inside ``[0, shard tokens]``, non-decreasing,
the first offset 0 and the last the shard's token count; a page that is not is a
:class:`~grainpack.corpus.errors.CorpusError` naming the object and the byte range. (The
whole object's sha256, in the manifest, is checked where the whole object is downloaded:
the exact order's lengths, ``verify``.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

from grainpack.corpus.errors import CorpusError

__all__ = ["PAGE", "OffsetPages"]

PAGE = 256  # offsets per page (2 KiB): the corpus summary's block, so runs of C align to it

# fetch(shard, first_page, stop_page) -> the int64 offsets of those pages (the last one may
# be short: the shard's final offset ends it)
Fetch = Callable[[int, int, int], np.ndarray]


class OffsetPages:
    """Pages of every shard's offsets, fetched on demand and kept up to ``budget`` bytes.

    Args:
        documents: Documents of each shard (a shard has ``documents + 1`` offsets).
        tokens: Tokens of each shard (the last offset; the bound of every value).
        names: Each shard's offsets object, for error messages.
        fetch: Reads pages ``[first, stop)`` of a shard (one ranged GET).
        submit: Runs a call on the request threads (returns a future).
        budget: Bytes of pages kept (at least 64 pages are).
        request_pages: The most pages one request asks for.
        gap_pages: Missing pages of a shard this close share a request (the pages between
            them are downloaded too).

    Example:
        >>> offsets = np.arange(0, 3001, 3)  # 1000 documents of 3 tokens, one shard
        >>> def fetch(k, a, b):
        ...     return offsets[a * PAGE : b * PAGE]
        >>> from concurrent.futures import ThreadPoolExecutor
        >>> pages = OffsetPages([1000], [3000], ["offsets-00000.bin"], fetch,
        ...                     ThreadPoolExecutor(2).submit, budget=1 << 20)
        >>> pages.values(0, np.array([0, 1, 999, 1000])).tolist()
        [0, 3, 2997, 3000]
        >>> pages.fetched_pages
        2
    """

    def __init__(
        self,
        documents: Sequence[int],
        tokens: Sequence[int],
        names: Sequence[str],
        fetch: Fetch,
        submit: Callable[..., object],
        *,
        budget: int,
        request_pages: int = 4096,
        gap_pages: int = 0,
    ) -> None:
        self.documents, self.tokens, self.names = list(documents), list(tokens), list(names)
        self.fetch, self.submit, self.request_pages = fetch, submit, max(1, request_pages)
        self.gap_pages = gap_pages
        pages = [n // PAGE + 1 for n in self.documents]  # offsets 0..n
        self.base = np.concatenate([[0], np.cumsum(pages)]).astype(np.int64)
        self.capacity = max(64, budget // (8 * PAGE))
        self.pool = np.zeros((self.capacity, PAGE), dtype=np.int64)
        self.owner = np.full(self.capacity, -1, dtype=np.int64)  # the page key in each slot
        self.keys = np.zeros(0, dtype=np.int64)  # sorted keys of the pages held ...
        self.slots = np.zeros(0, dtype=np.int64)  # ... and their slots
        self.next_slot = 0
        self.fetched_pages = 0
        self.lock = threading.Lock()

    def values(self, shard: int, index: np.ndarray) -> np.ndarray:
        """int64 offsets at local indices ``index`` (any shape, in ``[0, documents]``) of
        ``shard``, fetching the pages not held."""
        index = np.asarray(index, dtype=np.int64)
        flat = index.reshape(-1)
        if flat.size == 0:
            return np.zeros(index.shape, dtype=np.int64)
        keys = self.base[shard] + flat // PAGE
        out = np.empty(flat.shape, dtype=np.int64)
        with self.lock:  # no page is replaced while it is read
            held, slots = self._find(keys)
            out[held] = self.pool[slots[held], flat[held] % PAGE]
        if not held.all():
            missing = ~held
            wanted = np.unique(keys[missing])
            found = self._fetch(wanted)  # (len(wanted), PAGE), rows in wanted's order
            out[missing] = found[np.searchsorted(wanted, keys[missing]), flat[missing] % PAGE]
        return out.reshape(index.shape)

    def between(self, shard: int, first: int, stop: int) -> np.ndarray:
        """Offsets ``first..stop`` (inclusive) of ``shard``."""
        return self.values(shard, np.arange(first, stop + 1, dtype=np.int64))

    def prefetch(self, runs: Sequence[tuple[int, int, int]]) -> None:
        """Fetches (in parallel) the pages of runs ``(shard, first, stop)`` of offsets
        ``first..stop`` not held yet, and keeps them."""
        keys = [
            np.arange(self.base[k] + a // PAGE, self.base[k] + b // PAGE + 1, dtype=np.int64)
            for k, a, b in runs
        ]
        if not keys:
            return
        wanted = np.unique(np.concatenate(keys))
        with self.lock:
            held, _ = self._find(wanted)
        if not held.all():
            self._fetch(wanted[~held])

    def _find(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        at = np.searchsorted(self.keys, keys)
        inside = at < len(self.keys)
        slots = np.full(keys.shape, -1, dtype=np.int64)
        held = np.zeros(keys.shape, dtype=bool)
        held[inside] = self.keys[at[inside]] == keys[inside]
        slots[held] = self.slots[at[held]]
        return held, slots

    def _fetch(self, wanted: np.ndarray) -> np.ndarray:
        """Pages ``wanted`` (sorted unique keys) fetched by coalesced requests in parallel,
        then kept (the most recent ``capacity`` of them)."""
        shard = np.searchsorted(self.base, wanted, side="right") - 1
        breaks = np.flatnonzero((np.diff(wanted) > self.gap_pages + 1) | (np.diff(shard) != 0))
        requests = []
        for lo, hi in zip([0, *(breaks + 1).tolist()], [*(breaks + 1).tolist(), len(wanted)]):
            while lo < hi:  # at most request_pages pages a request
                end = int(np.searchsorted(wanted[lo:hi], wanted[lo] + self.request_pages)) + lo
                requests.append((lo, end))
                lo = end
        out = np.zeros((len(wanted), PAGE), dtype=np.int64)

        def one(a: int, b: int) -> None:
            k = int(shard[a])
            first = int(wanted[a] - self.base[k])
            values = self.fetch(k, first, int(wanted[b - 1] - self.base[k]) + 1)
            self._check(k, first, values)
            padded = np.zeros(-(-len(values) // PAGE) * PAGE, dtype=np.int64)
            padded[: len(values)] = values
            out[a:b] = padded.reshape(-1, PAGE)[wanted[a:b] - wanted[a]]

        if len(requests) == 1:
            one(*requests[0])
        else:
            for future in [self.submit(one, a, b) for a, b in requests]:
                future.result()  # type: ignore[attr-defined]
        with self.lock:
            self._keep(wanted, out)
        self.fetched_pages += len(wanted)
        return out

    def _check(self, k: int, first_page: int, values: np.ndarray) -> None:
        n, tokens = self.documents[k], self.tokens[k]
        first = first_page * PAGE
        stop = min(first + len(values), n + 1)
        bad = ""
        if len(values) != stop - first:
            bad = f"{len(values)} offsets, expected {stop - first}"
        elif values.size and (values.min() < 0 or values.max() > tokens):
            bad = f"an offset outside [0, {tokens}] (the shard's tokens)"
        elif (np.diff(values) < 0).any():
            bad = "offsets that decrease"
        elif first == 0 and values.size and values[0] != 0:
            bad = f"a first offset of {values[0]}, not 0"
        elif stop == n + 1 and values.size and values[-1] != tokens:
            bad = f"a last offset of {values[-1]}, not the shard's {tokens} tokens"
        if bad:
            raise CorpusError(
                f"{self.names[k]}: bytes [{8 * first}, {8 * stop}) hold {bad}: the object is "
                "damaged or not this corpus's (verify the corpus, then upload it again)"
            )

    def _keep(self, keys: np.ndarray, pages: np.ndarray) -> None:
        """Puts ``pages`` in the pool, over its oldest ones (the newest kept if there are
        more than it holds)."""
        keys, pages = keys[-self.capacity :], pages[-self.capacity :]
        present, _ = self._find(keys)
        keys, pages = keys[~present], pages[~present]
        if not len(keys):
            return
        slots = (self.next_slot + np.arange(len(keys))) % self.capacity
        self.next_slot = int(slots[-1] + 1) % self.capacity
        self.owner[slots] = keys
        self.pool[slots] = pages
        live = np.flatnonzero(self.owner >= 0)
        order = np.argsort(self.owner[live])
        self.keys, self.slots = self.owner[live][order], live[order]
