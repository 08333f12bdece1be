"""The objects under a corpus URL as a writer sees them (:class:`Bucket`: reads, HEADs,
conditional creates, uploads of files, a listing, through the read side's client), and the
lock object that marks a write in progress (:func:`take_lock`, :func:`release_lock`).

The lock object, ``URL/.grainpack-write``, is created with ``If-None-Match: *`` and names
its writer: a token kept beside the staging folder the write publishes (so the next run from
that folder, a killed write resumed, takes it over), the host, the process and the start.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grainpack.corpus.errors import CorpusError, CorpusExistsError
from grainpack.corpus.remote_client import Client, RemoteOptions
from grainpack.ingest.transaction import write_synced

__all__ = ["LOCK_NAME", "Bucket", "release_lock", "take_lock", "token_path", "write_token"]

logger = logging.getLogger(__name__)

LOCK_NAME = ".grainpack-write"  # the object that marks a write in progress


class Bucket:
    """The objects under one corpus URL; every call retried by the read side's client
    (:mod:`grainpack.corpus.remote`), its errors naming ``URL/name`` (and, for access
    denied, the credential variables read).

    Example:
        >>> Bucket("s3://my-bucket/corpora/web").url  # no request until a call
        's3://my-bucket/corpora/web'
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self._client = Client(url, RemoteOptions.from_env(), lambda key, value: None)

    def call(self, name: str, doing: str, call: Callable[[Any], Any]) -> Any:
        """``call(store)`` (an obstore store) with the client's retries."""

        def attempt() -> Any:
            return call(self._client.store)

        return self._client.attempts(f"{self.url}/{name}", doing, attempt)

    def read(self, name: str) -> bytes | None:
        """The object ``name``, or ``None`` if there is none."""
        import obstore
        from obstore.exceptions import NotFoundError

        def get(store: Any) -> bytes | None:
            try:
                return bytes(obstore.get(store, name).bytes())
            except (NotFoundError, FileNotFoundError):
                return None

        return self.call(name, "reading it", get)

    def describe(self, name: str) -> tuple[dict[str, Any], dict[str, str]] | None:
        """The metadata (size, ETag) and attributes (user metadata) of ``name`` (a HEAD),
        or ``None`` if there is none."""
        import obstore
        from obstore.exceptions import NotFoundError

        def head(store: Any) -> tuple[dict[str, Any], dict[str, str]] | None:
            try:
                result = obstore.get(store, name, options={"head": True})
            except (NotFoundError, FileNotFoundError):
                return None
            return result.meta, dict(result.attributes)

        return self.call(name, "reading its metadata (HEAD)", head)

    def create(self, name: str, data: bytes) -> bool:
        """Puts ``name`` only if no object has that name (``If-None-Match: *``); whether it
        was created."""
        import obstore
        from obstore.exceptions import AlreadyExistsError

        def put(store: Any) -> bool:
            try:
                obstore.put(store, name, data, mode="create")
            except AlreadyExistsError:
                return False
            return True

        return self.call(name, "creating it (conditional put)", put)

    def upload(
        self, name: str, path: Path, metadata: dict[str, str], part_bytes: int, parts: int
    ) -> str | None:
        """Puts the file ``path`` as ``name`` with user ``metadata`` (multipart, ``parts``
        at a time, when it is larger than ``part_bytes``); its ETag."""
        import obstore

        def put(store: Any) -> Any:
            return obstore.put(
                store,
                name,
                path,
                attributes=metadata,
                chunk_size=part_bytes,
                max_concurrency=parts,
            )

        return self.call(name, "uploading it", put).get("e_tag")

    def listing(self) -> dict[str, dict[str, Any]]:
        """Every object under the URL (at any depth): its path -> its metadata."""
        import obstore

        batches = self.call("", "listing it", lambda store: list(obstore.list(store)))
        return {meta["path"]: meta for batch in batches for meta in batch}

    def delete(self, name: str) -> None:
        import obstore

        self.call(name, "deleting it", lambda store: obstore.delete(store, name))


def token_path(folder: Path) -> Path:
    """Where the write token of a staging folder is kept: beside it."""
    return folder.parent / f".{folder.name}.upload-token"


def write_token(folder: Path) -> str:
    """The write token of the staging folder ``folder`` (made, and written durably, on
    first use: before any lock object names it)."""
    path = token_path(folder)
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        token = secrets.token_hex(16)
        write_synced(path, token.encode())
        return token


def lock_holder(bucket: Bucket) -> dict[str, Any]:
    """What the lock object of ``bucket`` says (empty: none, or unreadable)."""
    try:
        found = json.loads(bucket.read(LOCK_NAME) or b"")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def in_progress(url: str, holder: dict[str, Any]) -> str:
    """The message refusing a write of ``url`` while ``holder`` holds its lock object."""
    who = ", ".join(f"{k} {holder.get(k)}" for k in ("host", "pid", "started"))
    return (
        f"another write of {url} is in progress ({url}/{LOCK_NAME}: {who}): wait for it to "
        f"finish, or write elsewhere; if that write was killed and will not be resumed from "
        f"its host, delete {url}/{LOCK_NAME} and run this one again"
    )


def take_lock(bucket: Bucket, token: str) -> None:
    """Creates the lock object for the write ``token``, or takes over its own (a killed
    write of the same staging folder).

    Raises:
        CorpusExistsError: Another write holds it (the message names its host and process).
    """
    holder = {"token": token, "host": socket.gethostname(), "pid": os.getpid()}
    holder["started"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if bucket.create(LOCK_NAME, json.dumps(holder).encode()):
        return
    found = lock_holder(bucket)
    if found.get("token") != token:
        raise CorpusExistsError(in_progress(bucket.url, found))


def release_lock(bucket: Bucket, token: str) -> None:
    """Deletes the lock object if the write ``token`` holds it (a failure only warns: the
    lock object blocks no reader, and the same write takes it over)."""
    try:
        if lock_holder(bucket).get("token") == token:
            bucket.delete(LOCK_NAME)
    except CorpusError as err:
        logger.warning("%s: its lock object %s stays: %s", bucket.url, LOCK_NAME, err)
