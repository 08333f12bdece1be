"""Window anchors: where the windows of a row stream start, when each window has a row count
of its own that is known only by packing it (pure).

:class:`~grainpack.index.bestfit.BestFitRows` locates rows from them: an :class:`Anchor` is
one window's start, :class:`Anchors` the sorted set of those known (the stream's start
always), shared by the threads that locate rows.
"""

from __future__ import annotations

import bisect
import threading
from typing import Any, NamedTuple

__all__ = ["Anchor", "Anchors"]


class Anchor(NamedTuple):
    """Where window ``window`` of ``epoch`` starts: its first row is occurrence
    ``occurrence`` of the stream and row ``row`` of its epoch, after ``tokens`` real tokens
    of the stream. Anchors sort by (epoch, window), and so by occurrence."""

    epoch: int
    window: int
    occurrence: int
    row: int
    tokens: int

    @property
    def place(self) -> tuple[int, int]:
        """``(epoch, window)``."""
        return self.epoch, self.window


def _place(anchor: Anchor) -> tuple[int, int]:
    return anchor.epoch, anchor.window


def _occurrence(anchor: Anchor) -> int:
    return anchor.occurrence


class Anchors:
    """The anchors known of one stream, sorted by (epoch, window), the start of the stream
    always among them; safe to use from several threads, and a pickled copy keeps them.

    Example:
      >>> known = Anchors()
      >>> known.add(Anchor(0, 1, 40, 40, 900))
      Anchor(epoch=0, window=1, occurrence=40, row=40, tokens=900)
      >>> known.at_occurrence(39).window, known.at_occurrence(40).window
      (0, 1)
    """

    def __init__(self) -> None:
        self._known = [Anchor(0, 0, 0, 0, 0)]
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"_known": self._known}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._known, self._lock = state["_known"], threading.Lock()

    @property
    def last(self) -> Anchor:
        """The furthest anchor known."""
        with self._lock:
            return self._known[-1]

    def add(self, anchor: Anchor) -> Anchor:
        """Records ``anchor`` unless its window has one; returns the one it has now."""
        with self._lock:
            k = bisect.bisect_left(self._known, anchor.place, key=_place)
            if k < len(self._known) and self._known[k].place == anchor.place:
                return self._known[k]
            self._known.insert(k, anchor)
            return anchor

    def at_occurrence(self, occurrence: int) -> Anchor:
        """The last anchor at or before row ``occurrence`` of the stream."""
        with self._lock:
            return self._known[bisect.bisect_right(self._known, occurrence, key=_occurrence) - 1]

    def at_place(self, epoch: int, window: int) -> Anchor:
        """The last anchor at or before window ``window`` of ``epoch``."""
        with self._lock:
            return self._known[bisect.bisect_right(self._known, (epoch, window), key=_place) - 1]

    def after(self, anchor: Anchor) -> Anchor | None:
        """The first anchor known after ``anchor``'s window, if any."""
        with self._lock:
            k = bisect.bisect_right(self._known, anchor.place, key=_place)
            return self._known[k] if k < len(self._known) else None

    def first_in(self, epoch: int) -> Anchor | None:
        """The first anchor known in ``epoch``, if any."""
        with self._lock:
            k = bisect.bisect_left(self._known, (epoch, 0), key=_place)
            found = self._known[k] if k < len(self._known) else None
        return found if found is not None and found.epoch == epoch else None
