"""The client side of a corpus on object storage: options, one process's obstore client
with its request threads, retries and the errors that name the URL.

:class:`Client` makes the obstore store and a bounded pool of request threads on first use
in the process that uses them (never pickled: Grain workers are spawned; obstore's runtime
is not fork-safe). Every request is retried (obstore's own retries, then ``attempts`` more
with jittered exponential backoff); not-found, permission and precondition errors are not,
and become :class:`~grainpack.corpus.errors.CorpusError` naming the URL (and, for access
denied, the credential source tried). obstore is imported here and in
:mod:`grainpack.corpus.remote` only.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from grainpack.corpus.daemon_pool import DaemonPool
from grainpack.corpus.errors import CorpusError, CorpusNotFoundError
from grainpack.corpus.int_options import IntOptions

__all__ = ["Client", "RemoteOptions", "ShortRead", "changed", "first_line", "store_error"]

MiB = 1 << 20
# a response streamed into a buffer of ours arrives in pieces of this size: obstore's
# buffers for them are small enough for malloc to reuse, where a whole response's buffer
# was fresh pages each time (the kernel zeroing them was most of a reading process's CPU)
STREAM_CHUNK = 256 * 1024
# obstore's error texts carry a multi-line debug dump after their first line.
_FIRST_LINE = 300


@dataclasses.dataclass(frozen=True)
class RemoteOptions(IntOptions):
    """How a remote corpus is read (each also set by an environment variable, read when the
    corpus is opened: ``GRAINPACK_`` and the upper-case name, e.g.
    ``GRAINPACK_REQUEST_BYTES=16777216``).

    Attributes:
        request_bytes: The bytes one coalesced ranged GET asks for at most (the clouds
            suggest 8-16 MiB); a window read ahead lets a run's short tail join the request
            before it, up to 1.5 times this.
        gap_bytes: Pieces of one read closer than this are fetched by one request (the gap
            is downloaded too).
        in_flight: Requests in flight at once, per source and process.
        memory_bytes: Byte budget of the in-memory LRU of fetched ranges, the responses
            on their way included. Beyond ``lookahead_bytes`` and ``in_flight`` requests
            of ``request_bytes``, the blocked order's windows are read ahead whole: the
            next one if it fits the rest twice, the one after if three times.
        lookahead_bytes: Bytes of the next rows of the current plan fetched in the
            background ahead of the rows being read (0: none).
        offsets_bytes: Byte budget of the document offsets read by range (the blocked
            order's windows, ``8*K*C`` bytes each; keep three windows' worth).
        disk_bytes: Byte budget of the host's disk cache of token bytes (0: none), shared
            by every corpus and process of the host (:mod:`grainpack.corpus.remote_disk`):
            aligned chunks of ``request_bytes / 2`` (at most 4 MiB) that a fetch covered
            whole are kept there, least recently used evicted, and read before the network
            by later epochs and restarts.
        whole_offsets_bytes: A shard's offsets object up to this size is downloaded whole
            (one request, kept in the host cache by sha256) the first time the blocked
            order needs part of it, rather than read by range window after window.
        attempts: Reads of one range (each with obstore's own retries) before failing.
        client_retries: obstore's retries of one request (5xx, resets, timeouts).
        timeout_s: Seconds one request may take.
    """

    ENV_PREFIX: ClassVar[str] = "GRAINPACK_"
    MINIMUMS: ClassVar[Mapping[str, int]] = dict.fromkeys(
        (
            "gap_bytes",
            "memory_bytes",
            "lookahead_bytes",
            "offsets_bytes",
            "whole_offsets_bytes",
            "client_retries",
            "disk_bytes",
        ),
        0,
    )

    request_bytes: int = 8 * MiB
    gap_bytes: int = 256 * 1024
    in_flight: int = 16
    memory_bytes: int = 512 * MiB
    lookahead_bytes: int = 64 * MiB
    offsets_bytes: int = 64 * MiB
    whole_offsets_bytes: int = 1 * MiB
    attempts: int = 4
    client_retries: int = 3
    timeout_s: int = 60
    disk_bytes: int = 0


def first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:_FIRST_LINE]


def changed(url: str, what: str) -> CorpusError:
    return CorpusError(
        f"{url}: changed since the corpus was opened ({what}); it was rewritten while being "
        "read. Reopen the corpus (a training job: restart it from its checkpoint, whose "
        "fingerprint and digest tell whether the data changed); to update a corpus that jobs "
        "read, upload a new prefix, never replace objects in place"
    )


def _aws_tried() -> str:
    """Which AWS credential source obstore used, by the environment it reads."""
    if key := os.environ.get("AWS_ACCESS_KEY_ID"):
        return f"the access key AWS_ACCESS_KEY_ID={key[:4]}... from the environment"
    if token := os.environ.get("AWS_WEB_IDENTITY_TOKEN_FILE"):
        return f"the web identity token AWS_WEB_IDENTITY_TOKEN_FILE={token}"
    if any(k.startswith("AWS_CONTAINER_CREDENTIALS_") for k in os.environ):
        return "the container's credentials (AWS_CONTAINER_CREDENTIALS_*)"
    return "the instance's metadata service (no AWS_ACCESS_KEY_ID in the environment)"


def credentials_hint(url: str) -> str:
    """What to check after access was denied to ``url``: the credentials tried, where
    they come from."""
    scheme = url.split(":", 1)[0].lower()
    if scheme in ("http", "https"):
        return (
            "http(s):// reads are anonymous (no credentials are sent): make the files readable "
            "without credentials on the server, or read the bucket through its own scheme "
            "(s3://, gs://, az://) with credentials"
        )
    if scheme == "gs":
        sources = (
            "GOOGLE_APPLICATION_CREDENTIALS / GOOGLE_SERVICE_ACCOUNT, gcloud's application "
            "default credentials or the instance's metadata server"
        )
    elif scheme in ("az", "azure", "abfs", "abfss", "adl"):
        sources = (
            "AZURE_STORAGE_ACCOUNT_NAME / AZURE_STORAGE_ACCOUNT_KEY / AZURE_CLIENT_*, or a "
            "managed identity"
        )
    else:
        sources = (
            f"AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), "
            "AWS_WEB_IDENTITY_TOKEN_FILE, or the instance's metadata service (tried: "
            f"{_aws_tried()}); S3-compatible servers also need AWS_ENDPOINT_URL (and "
            "AWS_ALLOW_HTTP=true for http://)"
        )
    return f"credentials are read from {sources}: check them and the bucket's policy"


def store_error(err: BaseException, url: str, doing: str) -> CorpusError | None:
    """A :class:`CorpusError` naming ``url`` for a not-found, permission or precondition
    error of obstore (``None``: another error, maybe transient)."""
    from obstore import exceptions as ox

    if isinstance(err, ox.PreconditionError):
        return changed(url, "its ETag no longer matches the one pinned at open")
    if isinstance(err, ox.NotFoundError | FileNotFoundError):
        return CorpusNotFoundError(
            f"{url}: not found ({doing}): {first_line(err)}; check the URL (bucket and "
            "prefix) and that the corpus was uploaded completely"
        )
    if isinstance(err, ox.PermissionDeniedError | ox.UnauthenticatedError | PermissionError):
        return CorpusError(
            f"{url}: access denied ({doing}): {first_line(err)}; {credentials_hint(url)}"
        )
    if isinstance(err, ox.UnknownConfigurationKeyError | ox.NotSupportedError):
        return CorpusError(f"{url}: {first_line(err)} ({doing})")
    return None


class Client:
    """One process's access to the objects under a corpus URL: the obstore store and a pool
    of request threads, both created on first use in this process (never pickled)."""

    def __init__(self, url: str, options: RemoteOptions, stats: Callable[[str, float], None]):
        self.url, self.options, self.count = url, options, stats
        self._lock = threading.Lock()
        self._store: Any = None
        self._pool: DaemonPool | None = None
        self._pid = -1
        self.in_flight = 0  # requests being answered now (ranged GETs)

    def ready(self) -> None:
        if self._pid == os.getpid():
            return
        with self._lock:
            if self._pid == os.getpid():
                return
            from obstore.store import from_url

            client: dict[str, Any] = {"timeout": f"{self.options.timeout_s}s"}
            allow = os.environ.get("AWS_ALLOW_HTTP", "").lower() in ("1", "true", "yes")
            if self.url.startswith("http://") or allow:
                client["allow_http"] = True
            retry = {
                "max_retries": self.options.client_retries,
                "backoff": {
                    "init_backoff": datetime.timedelta(milliseconds=100),
                    "max_backoff": datetime.timedelta(seconds=5),
                    "base": 2,
                },
                "retry_timeout": datetime.timedelta(seconds=4 * self.options.timeout_s),
            }
            try:
                self._store = from_url(self.url, client_options=client, retry_config=retry)
            except Exception as err:  # obstore raises its own kinds
                known = store_error(err, self.url, "configuring the client")
                raise known or CorpusError(
                    f"{self.url}: cannot configure a client: {first_line(err)}"
                ) from err
            self._pool = DaemonPool(self.options.in_flight, name="grainpack-fetch")
            self._pid = os.getpid()

    @property
    def store(self) -> Any:
        """This process's obstore store (made on first use)."""
        self.ready()
        return self._store

    @property
    def pool(self) -> DaemonPool:
        self.ready()
        return self._pool  # type: ignore[return-value]

    def attempts(self, url: str, doing: str, call: Callable[[], Any]) -> Any:
        """``call()`` up to ``attempts`` times with jittered exponential backoff between
        failures; not-found, permission and precondition errors are not retried."""
        cause = ""
        for attempt in range(self.options.attempts):
            if attempt:
                self.count("retries", 1)
                time.sleep(min(2.0, 0.05 * 2**attempt) * random.uniform(0.5, 1.5))
            try:
                return call()
            except ShortRead as err:
                cause = str(err)
            except CorpusError:
                raise
            except Exception as err:  # obstore raises its own kinds
                known = store_error(err, url, doing)
                if known is not None:
                    raise known from err
                cause = first_line(err)
        raise CorpusError(
            f"{url}: {doing} failed {self.options.attempts} times (each after "
            f"{self.options.client_retries} client retries); last cause: {cause}. Check the "
            "network and the store (or raise GRAINPACK_ATTEMPTS)"
        )

    def head(self, name: str) -> dict[str, Any]:
        import obstore

        self.ready()
        url = f"{self.url}/{name}"
        return self.attempts(
            url, "reading its metadata (HEAD)", lambda: obstore.head(self._store, name)
        )

    def download(
        self, name: str, size: int, begin: Callable[[], None], write: Callable[[Any], None]
    ) -> dict[str, Any]:
        """Streams the whole object ``name`` (``size`` bytes expected, -1: any) into
        ``write``, calling ``begin()`` before each attempt; the object's metadata."""
        import obstore

        self.ready()
        url = f"{self.url}/{name}"

        def call() -> dict[str, Any]:
            begin()
            result = obstore.get(self._store, name)
            got = 0
            for chunk in result.stream(min_chunk_size=self.options.request_bytes):
                write(chunk)
                got += len(chunk)
            if size >= 0 and got != size:
                raise ShortRead(f"{got} bytes, expected {size}")
            self.count("bytes", got)
            self.count("requests", 1)
            return result.meta

        return self.attempts(url, "downloading it", call)

    def get_whole(self, name: str) -> tuple[bytes, dict[str, Any]]:
        parts: list[bytes] = []
        meta = self.download(name, -1, parts.clear, lambda chunk: parts.append(bytes(chunk)))
        return b"".join(parts), meta

    def get_range(
        self, name: str, start: int, stop: int, etag: str | None, *, into: Any = None
    ) -> Any:
        """Bytes ``[start, stop)`` of ``name``, the object pinned as ``etag``: written into
        ``into`` (a writable uint8 array of at least ``stop - start`` bytes) when given,
        and returned as its first ``stop - start`` bytes."""
        return self.get_range_tagged(name, start, stop, etag, into=into)[0]

    def get_range_tagged(
        self, name: str, start: int, stop: int, etag: str | None, *, into: Any = None
    ) -> tuple[Any, str | None]:
        """:meth:`get_range`, and the ETag of the object the bytes came from."""
        import obstore

        self.ready()
        url = f"{self.url}/{name}"
        options: dict[str, Any] = {"range": (start, stop)}
        if etag is not None:
            options["if_match"] = etag

        def call() -> tuple[Any, str | None]:
            began = time.perf_counter()
            with self._lock:
                self.in_flight += 1
            try:
                result = obstore.get(self._store, name, options=options)
                data = result.bytes() if into is None else _stream_into(result, into)
            finally:
                with self._lock:
                    self.in_flight -= 1
            tag = result.meta.get("e_tag")
            if etag is not None and tag is not None and tag != etag:
                raise changed(url, f"ETag {etag} -> {tag}")
            if len(data) != stop - start:
                raise ShortRead(f"{len(data)} bytes for a range of {stop - start}")
            self.count("bytes", len(data))
            self.count("requests", 1)
            self.count("request_seconds", time.perf_counter() - began)
            return data, tag

        return self.attempts(url, f"reading bytes [{start}, {stop})", call)


def _stream_into(result: Any, into: Any) -> Any:
    """The body of an obstore ``GetResult`` written into ``into`` by chunks of at most
    ``STREAM_CHUNK`` bytes; the part written."""
    import numpy as np

    got = 0
    for chunk in result.stream(min_chunk_size=STREAM_CHUNK):
        part = np.frombuffer(chunk, np.uint8)
        if got + part.size > into.size:
            raise ShortRead(f"more than the {into.size} bytes asked for")
        into[got : got + part.size] = part
        got += part.size
    return into[:got]


class ShortRead(Exception):
    """A response shorter (or longer) than the range asked for."""
