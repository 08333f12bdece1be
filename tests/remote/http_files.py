"""A static file server on loopback for the ``http://`` corpus tests: serves one folder with
what obstore's HTTP store needs of a plain web server.

GET and HEAD only. Every response carries ``Content-Length``, ``Last-Modified`` and an ETag
from the file's size, mtime and inode (a file replaced in place gets a new one); a request
whose ``If-Match`` names another ETag gets 412. ``Range: bytes=a-b`` (also ``a-`` and
``-n``) gets 206 with ``Content-Range``, and 416 when it starts past the end or is malformed.
``deny`` (a status, e.g. 403) answers every request with it. Loopback only; every connection's
request loop ends when the client closes it, after ``IDLE_SECONDS`` without a request, or at
:meth:`FileServer.stop`.
"""

from __future__ import annotations

import email.utils
import http.server
import os
import re
import urllib.parse
from collections import Counter
from pathlib import Path

from http_loopback import LoopbackServer, answer_small

_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


def byte_range(header: str, size: int) -> tuple[int, int] | None:
    """``[start, stop)`` of a ``Range`` header on ``size`` bytes; ``None``: not satisfiable.

    Example:
        >>> byte_range("bytes=2-5", 10), byte_range("bytes=7-", 10), byte_range("bytes=-3", 10)
        ((2, 6), (7, 10), (7, 10))
        >>> byte_range("bytes=10-12", 10), byte_range("bytes=5-2", 10), byte_range("x", 10)
        (None, None, None)
    """
    found = _RANGE.fullmatch(header.strip())
    if found is None or found.groups() == ("", ""):
        return None
    first, last = found.groups()
    if not first:  # the last n bytes
        return (max(size - int(last), 0), size) if int(last) > 0 else None
    start, stop = int(first), min(int(last) + 1, size) if last else size
    return (start, stop) if start < size and start < stop else None


class FileServer(LoopbackServer):
    """Serves ``root`` from ``http://127.0.0.1:<port>`` (``url``).

    Attributes (change them at any time): ``deny`` (0, or a status every request is answered
    with). ``counts`` counts requests by method and status.

    Example:
        >>> import tempfile, urllib.request
        >>> folder = Path(tempfile.mkdtemp())
        >>> _ = (folder / "a.bin").write_bytes(b"0123456789")
        >>> server = FileServer(folder).start()
        >>> request = urllib.request.Request(f"{server.url}/a.bin", headers={"Range": "bytes=3-5"})
        >>> with urllib.request.urlopen(request) as r:
        ...     r.status, r.headers["Content-Range"], r.read()
        (206, 'bytes 3-5/10', b'345')
        >>> server.stop()
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()
        self.deny = 0
        self.counts: Counter[str] = Counter()
        super().__init__(self._any)

    def _any(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        if handler.command not in ("GET", "HEAD"):
            return self._status(handler, 405)
        return self._answer(handler, body=handler.command == "GET")

    def _status(self, handler: http.server.BaseHTTPRequestHandler, status: int) -> None:
        self.counts[f"{handler.command} {status}"] += 1
        payload = f"{status} {http.HTTPStatus(status).phrase}\n".encode()
        answer_small(handler, status, "text/plain", payload)

    def _answer(self, handler: http.server.BaseHTTPRequestHandler, *, body: bool) -> None:
        if self.deny:
            return self._status(handler, self.deny)
        name = urllib.parse.unquote(urllib.parse.urlsplit(handler.path).path).lstrip("/")
        path = (self.root / name).resolve()
        if not path.is_relative_to(self.root) or not path.is_file():
            return self._status(handler, 404)
        with open(path, "rb") as f:  # one open file: the ETag and the bytes agree
            stat = os.fstat(f.fileno())
            etag = f'"{stat.st_size:x}-{stat.st_mtime_ns:x}-{stat.st_ino:x}"'
            wanted = handler.headers.get("If-Match")
            if wanted is not None and etag not in (w.strip() for w in wanted.split(",")):
                return self._status(handler, 412)
            start, stop, status = 0, stat.st_size, 200
            if "Range" in handler.headers:
                found = byte_range(handler.headers["Range"], stat.st_size)
                if found is None:
                    self.counts[f"{handler.command} 416"] += 1
                    handler.send_response(416)
                    handler.send_header("Content-Range", f"bytes */{stat.st_size}")
                    handler.send_header("Content-Length", "0")
                    handler.end_headers()
                    return None
                (start, stop), status = found, 206
            self.counts[f"{handler.command} {status}"] += 1
            handler.send_response(status)
            handler.send_header("Content-Length", str(stop - start))
            handler.send_header("ETag", etag)
            handler.send_header("Last-Modified", email.utils.formatdate(stat.st_mtime, usegmt=True))
            handler.send_header("Accept-Ranges", "bytes")
            if status == 206:
                handler.send_header("Content-Range", f"bytes {start}-{stop - 1}/{stat.st_size}")
            handler.end_headers()
            if body:
                f.seek(start)
                handler.wfile.write(f.read(stop - start))
        return None
