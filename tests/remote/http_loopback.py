"""The HTTP servers of the remote tests (the fault-injecting proxy, the static file server):
one loopback server on a daemon thread, whose request loops are bounded.

Every connection's request loop ends when the client closes it, after ``IDLE_SECONDS``
without a request, or at :meth:`LoopbackServer.stop`.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable
from typing import Self

IDLE_SECONDS = 10


def answer_small(
    handler: http.server.BaseHTTPRequestHandler, status: int, content_type: str, payload: bytes
) -> None:
    """Answers with ``status`` and a short body (none to a HEAD)."""
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(payload)))
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(payload)


class LoopbackServer:
    """A ``ThreadingHTTPServer`` on ``127.0.0.1:<port>`` (``url``) whose GET, HEAD, PUT,
    POST and DELETE requests are answered by ``answer(handler)``.

    Example:
        >>> import urllib.request
        >>> def answer(handler):
        ...     handler.send_response(200)
        ...     handler.send_header("Content-Length", "2")
        ...     handler.end_headers()
        ...     handler.wfile.write(b"ok")
        >>> server = LoopbackServer(answer).start()
        >>> urllib.request.urlopen(server.url).read()
        b'ok'
        >>> server.stop()
    """

    def __init__(self, answer: Callable[[http.server.BaseHTTPRequestHandler], None]) -> None:
        stopping = self._stopping = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = IDLE_SECONDS  # a silent connection's loop ends
            disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms wait

            def log_message(self, *args: object) -> None:
                pass

            def handle_one_request(self) -> None:
                if stopping.is_set():
                    self.close_connection = True
                    return
                super().handle_one_request()

            def _any(self) -> None:
                answer(self)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _any

        class Server(http.server.ThreadingHTTPServer):
            request_queue_size = 256  # not 5: a burst of ranged GETs opens more connections

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=IDLE_SECONDS)
