"""A thread pool whose threads never hold up the interpreter's exit.

``concurrent.futures.ThreadPoolExecutor`` joins its threads at exit, so a process whose
background reads wait on an unreachable store (each read retried for minutes) would hang
when it ends, even after a Ctrl-C. The remote reads and the staging of their pieces run on
this pool instead: daemon threads, started as work arrives, up to a bound.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["DaemonPool"]


class DaemonPool(concurrent.futures.Executor):
    """``submit(fn, *args)`` -> a ``Future``, run by at most ``max_workers`` daemon threads.

    Example:
      >>> pool = DaemonPool(2, name="example")
      >>> pool.submit(sum, [1, 2, 3]).result()
      6
    """

    def __init__(self, max_workers: int, *, name: str) -> None:
        self._max, self._name = max_workers, name
        self._work: queue.SimpleQueue[tuple[concurrent.futures.Future[Any], Callable[[], Any]]]
        self._work = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._work.put((future, lambda: fn(*args, **kwargs)))
        with self._lock:
            if self._idle == 0 and len(self._threads) < self._max:
                thread = threading.Thread(
                    target=self._run, name=f"{self._name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
            else:
                self._idle -= 1 if self._idle else 0
        return future

    def _run(self) -> None:
        while True:
            future, call = self._work.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(call())
                except BaseException as err:  # handed to the waiter, as ThreadPoolExecutor does
                    future.set_exception(err)
            with self._lock:
                self._idle += 1
