"""A fault-injecting HTTP proxy on loopback, in front of the test S3 server.

Clients use it as their endpoint (``AWS_ENDPOINT_URL``); it forwards each request to the
upstream server and, at set rates drawn from a seeded generator, answers ``503 SlowDown``
instead, resets the connection before answering, or sends the upstream's headers with only
part of the body and closes. It can also add latency per request and cap the bandwidth of
all its responses together (a token bucket: bodies are sent in chunks, each when the
cap allows). With ``deny`` set it answers every request with S3's ``403 AccessDenied``.
Loopback only; every connection's request loop ends when the client closes it, after
``IDLE_SECONDS`` without a request, or at :meth:`FaultProxy.stop`.
"""

from __future__ import annotations

import http.client
import http.server
import random
import socket
import struct
import threading
import time
from collections import Counter

from http_loopback import LoopbackServer, answer_small

CHUNK = 256 * 1024  # bytes a response body is sent by, under a bandwidth cap
HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"}


class FaultProxy(LoopbackServer):
    """Forwards to ``upstream`` (``host:port``) from ``127.0.0.1:<port>``.

    Attributes (change them at any time): ``errors``, ``resets``, ``truncations`` (rates of
    GET requests answered with a 503, a reset, a cut body), ``latency`` (seconds added to
    each request), ``bandwidth`` (bytes per second of all response bodies together; 0: no
    cap), ``deny`` (every request answered ``403 AccessDenied``). ``counts`` counts requests
    by outcome, and the body ``bytes`` sent.

    Example:
        >>> proxy = FaultProxy("127.0.0.1:9", seed=1)
        >>> proxy.bandwidth = 400e6  # 4 MB take 10 ms, the next 4 MB wait for them
        >>> round(proxy._pace(4_000_000), 3), round(proxy._pace(4_000_000), 3)
        (0.01, 0.02)
        >>> proxy.server.server_close()
    """

    def __init__(self, upstream: str, *, seed: int = 0) -> None:
        self.upstream = upstream
        self.errors = self.resets = self.truncations = 0.0
        self.latency = 0.0
        self.bandwidth = 0.0
        self.deny = False
        self._free_at = 0.0  # when the bandwidth cap lets the next byte out
        self.counts: Counter[str] = Counter()
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        super().__init__(self._forward)

    def _pace(self, size: int) -> float:
        """Reserves ``size`` bytes of the cap; the seconds to wait before sending them."""
        if not self.bandwidth:
            return 0.0
        with self._lock:
            now = time.monotonic()
            start = max(now, self._free_at)
            self._free_at = start + size / self.bandwidth
            return self._free_at - now

    def _send(self, handler: http.server.BaseHTTPRequestHandler, data: bytes) -> None:
        """Writes ``data`` in chunks of ``CHUNK`` bytes, each once the cap allows it."""
        view = memoryview(data)
        for lo in range(0, len(data), CHUNK):
            chunk = view[lo : lo + CHUNK]
            wait = self._pace(len(chunk))
            if wait > 0:
                time.sleep(wait)
            with self._lock:  # before the write: the client may be done once it is sent
                self.counts["bytes"] += len(chunk)
            handler.wfile.write(chunk)

    def _draw(self) -> str | None:
        with self._lock:
            x = self._random.random()
        for fault, rate in (
            ("error", self.errors),
            ("reset", self.resets),
            ("truncate", self.truncations),
        ):
            if x < rate:
                return fault
            x -= rate
        return None

    def _forward(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else None
        if self.latency:
            time.sleep(self.latency)
        fault = "denied" if self.deny else self._draw() if handler.command == "GET" else None
        self.counts[fault or "forwarded"] += 1
        if fault in ("error", "denied"):
            status, code = (503, "SlowDown") if fault == "error" else (403, "AccessDenied")
            payload = f"<Error><Code>{code}</Code><Message>injected</Message></Error>".encode()
            answer_small(handler, status, "application/xml", payload)
            return
        if fault == "reset":  # RST, not FIN: SO_LINGER with a zero timeout
            handler.connection.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
            handler.close_connection = True
            handler.rfile.close()  # the socket closes (with an RST) once its files are
            handler.wfile.close()
            handler.connection.close()
            return
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in HOP}
        upstream = http.client.HTTPConnection(self.upstream, timeout=30)
        try:
            upstream.request(handler.command, handler.path, body=body, headers=headers)
            response = upstream.getresponse()
            data = response.read()
            handler.send_response(response.status, response.reason)
            head = handler.command == "HEAD"  # keeps the object's Content-Length
            for key, value in response.getheaders():
                if key.lower() not in HOP and (head or key.lower() != "content-length"):
                    handler.send_header(key, value)
            if not head:
                handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            if head:
                return
            if fault == "truncate" and len(data) > 1:
                handler.wfile.write(data[: len(data) // 2])
                handler.wfile.flush()
                handler.close_connection = True
                handler.connection.shutdown(socket.SHUT_RDWR)
                return
            self._send(handler, data)
        except (OSError, http.client.HTTPException):  # the client sees a closed connection
            handler.close_connection = True
        finally:
            upstream.close()
