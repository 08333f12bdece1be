"""Reading a remote corpus's next window ahead, whole: the byte ranges of its runs.

The blocked order announces each window's runs of documents before it reads them
(:meth:`~grainpack.corpus.remote.RemoteShardSource.read_ahead`): on a background thread,
the next window's and the one after it while the current one is read, so that requests
stay in flight across windows. Every document of a window is read during the window, in
an order known only row by row; fetched as exact pieces, a window of short documents
costs a request per document. :class:`CellReader`
fetches the window's token ranges instead, whole: each run's bytes (runs closer than ``gap``
bytes, and the parts of a long run, share requests of ``request`` bytes, up to 1.5 times
that where a run's tail would otherwise be a short request of its own; on the request
threads), kept in the source's in-memory LRU by aligned cells of ``cell`` bytes cut
to the runs, where the pieces of the window's rows are then found. Nothing outside the
window is fetched but the gaps of coalesced requests. A read whose piece lies in a cell
still in flight waits for it instead of asking again.

A window is read ahead only if it fits the LRU's budget with the windows before it: two
(the one being read and this one), or three for the window after next; a window that does
not fit would evict itself or the one being read.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

__all__ = ["CellReader"]

logger = logging.getLogger(__name__)


class CellReader:
    """Background reads of the byte ranges of a window's runs (see the module docstring).

    Args:
        cell: Cell size in bytes.
        request: The most bytes one request asks for.
        budget: The LRU's byte budget for windows read ahead (the rest holds the cells
            that the rows staged ahead still read).
        fetch: ``fetch(shard, lo, hi)`` reads bytes ``[lo, hi)`` of a shard's tokens
            (one ranged GET) and returns them.
        keep: ``keep(shard, lo, data)`` puts bytes in the LRU.
        held: ``held(shard, lo, hi)``: whether the LRU holds those bytes.
        submit: Runs a call on the request threads (returns a future).
        gap: Ranges of a shard this close share a request (the bytes between are fetched,
            not kept).

    Example:
        >>> data = bytes(range(100)) * 10  # one shard of 1000 bytes
        >>> kept, asked = {}, []
        >>> from concurrent.futures import ThreadPoolExecutor
        >>> cells = CellReader(cell=256, request=512, budget=4096,
        ...                    fetch=lambda k, lo, hi: asked.append((lo, hi)) or data[lo:hi],
        ...                    keep=lambda k, lo, b: kept.__setitem__(lo, len(b)),
        ...                    held=lambda k, lo, hi: lo in kept,
        ...                    submit=ThreadPoolExecutor(2).submit, gap=16)
        >>> cells.read_ahead([(0, 10, 600)])  # cells 0..2, cut to the range
        True
        >>> cells.wait([(0, 0, 600)])
        >>> asked, sorted(kept.items())  # its tail of 88 bytes in the same request
        ([(10, 600)], [(10, 246), (256, 256), (512, 88)])
        >>> cells.read_ahead([(0, 700, 720), (0, 730, 760)])  # one request, two ranges kept
        True
        >>> cells.wait([(0, 700, 760)])
        >>> asked[1:], sorted(kept.items())[3:]
        ([(700, 760)], [(700, 20), (730, 30)])
        >>> cells.read_ahead([(0, 0, 1000)], windows=5)  # 1,000 bytes: over 4,096 / 5
        False
    """

    def __init__(
        self,
        *,
        cell: int,
        request: int,
        budget: int,
        fetch: Callable[[int, int, int], Any],
        keep: Callable[[int, int, Any], None],
        held: Callable[[int, int, int], bool],
        submit: Callable[..., concurrent.futures.Future[Any]],
        gap: int = 0,
    ) -> None:
        self.cell, self.request, self.budget = cell, request, budget
        self.fetch, self.keep, self.held, self.submit = fetch, keep, held, submit
        self.gap = gap
        self.lock = threading.Lock()
        # (shard, cell) -> the requests in flight that hold parts of it: (lo, hi, future)
        self.in_flight: dict[tuple[int, int], list[tuple[int, int, Future]]] = {}

    def _pieces(self, ranges: Sequence[tuple[int, int, int]]) -> list[tuple[int, int, int, int]]:
        """Byte ranges ``(shard, lo, hi)`` cut at cell boundaries, as ``(shard, cell, lo,
        hi)`` sorted, overlaps merged."""
        cell, pieces = self.cell, []
        for k, lo, hi in ranges:
            for c in range(lo // cell, (hi - 1) // cell + 1) if hi > lo else ():
                pieces.append((k, c, max(lo, c * cell), min(hi, (c + 1) * cell)))
        merged: list[tuple[int, int, int, int]] = []
        for k, c, a, b in sorted(pieces):
            if merged and merged[-1][:2] == (k, c) and a <= merged[-1][3]:
                merged[-1] = (k, c, merged[-1][2], max(b, merged[-1][3]))
            else:
                merged.append((k, c, a, b))
        return merged

    def _flying(self, k: int, c: int, a: int, b: int) -> bool:
        return any(lo < b and a < hi for lo, hi, _ in self.in_flight.get((k, c), ()))

    def read_ahead(self, ranges: Sequence[tuple[int, int, int]], *, windows: int = 2) -> bool:
        """Starts fetching byte ranges ``(shard, lo, hi)``, the parts not held or in flight,
        if they fit the LRU ``windows`` times (a window's, held with the one being read and
        any between); whether it did."""
        pieces = self._pieces(ranges)
        if not pieces or sum(b - a for *_, a, b in pieces) > self.budget // windows:
            return False
        with self.lock:
            missing = [p for p in pieces if not self._flying(*p) and not self.held(p[0], *p[2:])]
            groups: list[list[tuple[int, int, int, int]]] = []
            for k, c, a, b in missing:
                last = groups[-1] if groups else []
                joined = bool(last) and last[-1][0] == k and a - last[-1][3] <= self.gap
                if joined and b - last[0][2] <= self.request:
                    last.append((k, c, a, b))
                    continue
                if not joined:  # the stretch before ends here
                    _join_tail(groups, self.request, self.gap)
                groups.append([(k, c, a, b)])
            _join_tail(groups, self.request, self.gap)
            for group in groups:
                future = self.submit(self._one, group)
                lo, hi = group[0][2], group[-1][3]
                for k, c, _, _ in group:
                    self.in_flight.setdefault((k, c), []).append((lo, hi, future))
        return True

    def _one(self, group: list[tuple[int, int, int, int]]) -> None:
        k, lo, hi = group[0][0], group[0][2], group[-1][3]
        try:
            data = memoryview(self.fetch(k, lo, hi))
            for _, _, a, b in group:
                self.keep(k, a, data[a - lo : b - lo])
        except Exception as err:  # the reads that need these bytes fetch them and say why
            logger.debug("reading %s ahead failed: %s", group, err)
        finally:
            with self.lock:
                for key in {(k, c) for k, c, _, _ in group}:
                    rest = [e for e in self.in_flight.get(key, ()) if e[:2] != (lo, hi)]
                    if rest:
                        self.in_flight[key] = rest
                    else:
                        self.in_flight.pop(key, None)

    def wait(self, ranges: Sequence[tuple[int, int, int]] | np.ndarray) -> None:
        """Waits for the requests in flight that hold any of byte ranges ``(shard, lo,
        hi)`` (rows of an int array, or tuples)."""
        with self.lock:
            flying = {
                id(f): (k, lo, hi, f)
                for (k, _), entries in self.in_flight.items()
                for lo, hi, f in entries
            }
        if not flying:
            return
        shard, lo, hi = np.asarray(ranges, dtype=np.int64).reshape(-1, 3).T
        concurrent.futures.wait(
            [f for k, a, b, f in flying.values() if ((shard == k) & (lo < b) & (a < hi)).any()]
        )


def _join_tail(groups: list[list[tuple[int, int, int, int]]], request: int, gap: int) -> None:
    """Fetches the last group with the one before when it is a short tail of the same
    stretch (shorter than half a request, same shard, within ``gap``): requests of up to
    1.5 ``request`` bytes, rather than a full one and a short one (a run's end)."""
    if len(groups) < 2:
        return
    first, second = groups[-2], groups[-1]
    if (
        first[-1][0] == second[0][0]
        and second[0][2] - first[-1][3] <= gap
        and 2 * (second[-1][3] - second[0][2]) < request
        and second[-1][3] - first[0][2] <= request + request // 2
    ):
        first += groups.pop()
