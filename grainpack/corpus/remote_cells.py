"""Reading a remote corpus's next window ahead, whole: aligned cells of its token objects.

The blocked order announces each window's runs of documents before it reads them
(:meth:`~grainpack.corpus.remote.RemoteShardSource.read_ahead`): the next window's, on a
background thread, once the rows read pass the middle of the current one. Every document of
a window is read during the window, in an order known only row by row; fetched as exact
pieces, a window of short documents costs a request per document. :class:`CellReader`
fetches the window's token ranges instead, whole, as aligned cells of ``cell`` bytes cut to
the ranges (a cell at a run's end holds only the run's bytes: nothing outside the window is
fetched; runs of neighbouring missing cells coalesced, up to ``request_bytes`` a request, on
the request threads) into the source's in-memory LRU, where the pieces of the window's rows
are then found. A read whose piece lies in a cell still in flight waits for it instead of
asking again.

Cells are fetched only when they are worth it: when their bytes are at most twice the runs'
(runs of short documents spread over a large corpus would fetch mostly what lies between
them, inside a cell) and fit half the LRU's budget (a window that does not fit would evict
itself).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["CellReader"]

logger = logging.getLogger(__name__)


class CellReader:
    """Background reads of whole cells of a source's token objects (see the module
    docstring).

    Args:
        sizes: Bytes of each shard's tokens.
        cell: Cell size in bytes.
        request: The most bytes one request asks for.
        budget: The LRU's byte budget.
        fetch: ``fetch(shard, lo, hi)`` reads bytes ``[lo, hi)`` of a shard's tokens
            (one ranged GET) and returns them.
        keep: ``keep(shard, lo, data)`` puts bytes in the LRU.
        held: ``held(shard, lo, hi)``: whether the LRU holds those bytes.
        submit: Runs a call on the request threads (returns a future).

    Example:
        >>> data = bytes(range(100)) * 10  # one shard of 1000 bytes
        >>> kept = {}
        >>> from concurrent.futures import ThreadPoolExecutor
        >>> cells = CellReader([1000], cell=256, request=512, budget=4096,
        ...                    fetch=lambda k, lo, hi: data[lo:hi],
        ...                    keep=lambda k, lo, b: kept.__setitem__(lo, len(b)),
        ...                    held=lambda k, lo, hi: lo in kept,
        ...                    submit=ThreadPoolExecutor(2).submit)
        >>> cells.read_ahead([(0, 10, 600)])  # cells 0..2, cut to the range: [10, 512), [512, 600)
        True
        >>> cells.wait([(0, 0, 600)])
        >>> sorted(kept.items())
        [(10, 246), (256, 256), (512, 88)]
    """

    def __init__(
        self,
        sizes: Sequence[int],
        *,
        cell: int,
        request: int,
        budget: int,
        fetch: Callable[[int, int, int], Any],
        keep: Callable[[int, int, Any], None],
        held: Callable[[int, int, int], bool],
        submit: Callable[..., concurrent.futures.Future[Any]],
    ) -> None:
        self.sizes, self.cell, self.request, self.budget = list(sizes), cell, request, budget
        self.fetch, self.keep, self.held, self.submit = fetch, keep, held, submit
        self.lock = threading.Lock()
        self.in_flight: dict[tuple[int, int], concurrent.futures.Future[Any]] = {}
        self.fetched_bytes = 0

    def _cells(self, ranges: Sequence[tuple[int, int, int]]) -> dict[tuple[int, int], list[int]]:
        """The cells ``(shard, c)`` of byte ranges ``(shard, lo, hi)``, each with the part
        of it the ranges cover, ``[lo, hi)`` (a cell at a range's end is cut there)."""
        cell, found = self.cell, {}
        for k, lo, hi in ranges:
            for c in range(lo // cell, (hi - 1) // cell + 1) if hi > lo else ():
                a, b = max(lo, c * cell), min(hi, (c + 1) * cell)
                part = found.setdefault((k, c), [a, b])
                part[0], part[1] = min(part[0], a), max(part[1], b)
        return dict(sorted(found.items()))

    def read_ahead(self, ranges: Sequence[tuple[int, int, int]]) -> bool:
        """Starts fetching the cells of byte ranges ``(shard, lo, hi)`` not held or in
        flight, if worth it (see the module docstring); whether it did."""
        cells = self._cells(ranges)
        wanted = sum(hi - lo for _, lo, hi in ranges)
        span = sum(b - a for a, b in cells.values())
        if not cells or span > 2 * wanted or span > self.budget // 2:
            return False
        with self.lock:
            missing = [
                (k, c, a, b)
                for (k, c), (a, b) in cells.items()
                if (k, c) not in self.in_flight and not self.held(k, a, b)
            ]
            per = max(1, self.request // self.cell)
            groups: list[list[tuple[int, int, int, int]]] = []
            for k, c, a, b in missing:
                last = groups[-1] if groups else None
                if last and last[-1][:2] == (k, c - 1) and last[-1][3] == a and len(last) < per:
                    last.append((k, c, a, b))
                else:
                    groups.append([(k, c, a, b)])
            for group in groups:
                future = self.submit(self._one, group)
                for k, c, _, _ in group:
                    self.in_flight[(k, c)] = future
        return True

    def _one(self, group: list[tuple[int, int, int, int]]) -> None:
        k, lo, hi = group[0][0], group[0][2], group[-1][3]
        try:
            data = memoryview(self.fetch(k, lo, hi))
            for _, _, a, b in group:
                self.keep(k, a, data[a - lo : b - lo])
            self.fetched_bytes += hi - lo
        except Exception as err:  # the reads that need these bytes fetch them and say why
            logger.debug("reading cells %s ahead failed: %s", group, err)
        finally:
            with self.lock:
                for k, c, _, _ in group:
                    self.in_flight.pop((k, c), None)

    def wait(self, ranges: Sequence[tuple[int, int, int]]) -> None:
        """Waits for the cells in flight that hold any of byte ranges ``(shard, lo, hi)``."""
        with self.lock:
            if not self.in_flight:
                return
            futures = {id(f): f for key in self._cells(ranges) if (f := self.in_flight.get(key))}
        concurrent.futures.wait(list(futures.values()))
