"""Plans computed once per key and shared by the threads that ask for them."""

from __future__ import annotations

import collections
import concurrent.futures
import threading
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["PlanCache"]


class PlanCache:
    """``compute()`` once per key: the first caller computes while the others wait for its
    result; the last ``limit`` results of each kind (the key's first item) are kept. A copy
    (a pickle sent to a worker) starts empty.

    Example:
      >>> plans = PlanCache()
      >>> plans.get(("window", 0), lambda: "packed", limit=2), ("window", 0) in plans
      ('packed', True)
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._futures: collections.OrderedDict[tuple[Hashable, ...], concurrent.futures.Future]
        self._futures = collections.OrderedDict()

    def __reduce__(self) -> tuple[type[PlanCache], tuple[()]]:
        return PlanCache, ()

    def __contains__(self, key: tuple[Hashable, ...]) -> bool:
        with self._lock:
            return key in self._futures

    def get(self, key: tuple[Hashable, ...], compute: Callable[[], Any], limit: int) -> Any:
        """The result for ``key``, computed by ``compute()`` if no caller has yet."""
        with self._lock:
            future = self._futures.get(key)
            mine = future is None
            if mine:
                future = self._futures[key] = concurrent.futures.Future()
                same = [k for k in self._futures if k[0] == key[0]]
                for old in same[: max(0, len(same) - limit)]:
                    del self._futures[old]
        if mine:
            try:
                future.set_result(compute())
            except BaseException as err:
                with self._lock:
                    if self._futures.get(key) is future:
                        del self._futures[key]
                future.set_exception(err)
        return future.result()
