"""The test S3 server's request log: the lines its HTTP server (werkzeug, in this process)
logs for each request it answers, whichever process sent it."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# werkzeug colours the lines of some statuses (ANSI escapes inside the quotes: two for a
# 206, magenta and bold)
_LINE = re.compile(r'"(?:\x1b\[[\d;]*m)*([A-Z]+) (\S+) HTTP/[\d.]+(?:\x1b\[0m)?" (\d{3})')


class RequestLog(logging.Handler):
    """Collects ``(method, path, status)`` of every request the server answers."""

    def __init__(self, then: Callable[[str, str, int], None] | None = None) -> None:
        super().__init__(logging.INFO)
        self.requests: list[tuple[str, str, int]] = []
        self._then = then
        self._guard = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        found = _LINE.search(record.getMessage())
        if found:
            request = (found[1], found[2], int(found[3]))
            if self._then is not None:  # in the server's thread, right after the answer
                self._then(*request)
            with self._guard:
                self.requests.append(request)
                self._guard.notify_all()

    def wait_for(self, prefix: str, count: int, timeout: float) -> bool:
        """Waits until ``count`` requests on paths under ``/prefix`` were answered; whether
        they were within ``timeout`` seconds."""
        with self._guard:
            return self._guard.wait_for(
                lambda: sum(p.startswith(f"/{prefix}") for _, p, _ in self.requests) >= count,
                timeout,
            )

    def count(self, method: str, prefix: str) -> int:
        """Successful (2xx) requests of ``method`` on paths under ``/prefix``."""
        with self._guard:
            return sum(
                m == method and p.startswith(f"/{prefix}") and 200 <= s < 300
                for m, p, s in self.requests
            )


@contextmanager
def request_log(then: Callable[[str, str, int], None] | None = None) -> Iterator[RequestLog]:
    """The server's request log while the block runs; ``then(method, path, status)`` is
    called for each request as the server logs it (after answering it)."""
    logger = logging.getLogger("werkzeug")
    handler, level = RequestLog(then), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
