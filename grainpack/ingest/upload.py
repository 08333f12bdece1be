"""Writing a corpus to object storage as one transaction: staged locally, then published.

A corpus for ``s3://``, ``gs://`` or ``az://`` is written by the local writers into a
staging folder, ``$GRAINPACK_CACHE/uploads/<sha256 of the URL>/corpus``
(:func:`write_to_url`), then published by :func:`publish`:

1. A URL that holds a ``manifest.json`` is refused before any upload (one byte-identical to
   the staged one: already published, nothing to do).
2. ``URL/.grainpack-write`` is created with a conditional put (``If-None-Match: *``) naming
   this write (host, process, a token kept beside the staging folder): a second writer of
   the URL is refused; the next run from the same staging folder (a killed write resumed)
   takes it over.
3. Every file but the manifest is checked against the manifest's sha256 and uploaded
   (``in_flight`` at a time; multipart in parts of ``part_bytes`` above that size), its
   sha256 stored as the object's ``grainpack-sha256`` metadata (S3 also checks each
   request's body against the sha256 signed with it). An object already there with the
   same size and sha256 (a killed run's upload) is kept, not uploaded again; a multipart
   upload cut short is not resumed: its object is uploaded again, whole.
4. One listing checks every object's size and that its ETag is the one its upload (or the
   check that kept it) saw: an object replaced meanwhile is refused, nothing published.
5. ``manifest.json`` is put with ``If-None-Match: *``: the commit point. A killed or failed
   write leaves no manifest, so nothing names a missing object; readers open only corpora
   whose manifest exists.
6. ``URL/.grainpack-write`` is deleted, then the staging folder.

The client is the read side's (:mod:`grainpack.corpus.remote`: credentials, retries, errors
naming the URL and the credential variables).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import logging
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from grainpack.corpus.cache import cache_root
from grainpack.corpus.errors import CorpusError, CorpusExistsError
from grainpack.corpus.formats import open_corpus
from grainpack.corpus.int_options import IntOptions
from grainpack.corpus.native import MANIFEST_NAME, PathLike, read_manifest
from grainpack.corpus.source import TokenShardSource
from grainpack.corpus.urls import output_url
from grainpack.ingest.bucket import (
    LOCK_NAME,
    Bucket,
    in_progress,
    lock_holder,
    release_lock,
    take_lock,
    token_path,
    write_token,
)
from grainpack.ingest.transaction import write_lock

__all__ = ["LOCK_NAME", "UploadOptions", "publish", "staging_root", "write_to_url"]

logger = logging.getLogger(__name__)

MiB = 1 << 20
SHA256_KEY = "grainpack-sha256"  # the metadata of an uploaded object: its sha256


@dataclasses.dataclass(frozen=True)
class UploadOptions(IntOptions):
    """How a corpus is uploaded (each also set by ``GRAINPACK_UPLOAD_<NAME>``, read when a
    write starts, e.g. ``GRAINPACK_UPLOAD_PART_BYTES=67108864``).

    Attributes:
        part_bytes: Objects larger than this are uploaded in parts of this size (multipart;
            S3 needs >= 5 MiB and at most 10,000 parts an object).
        in_flight: Objects uploaded at once.
        part_concurrency: Parts of one object uploaded at once.
    """

    ENV_PREFIX: ClassVar[str] = "GRAINPACK_UPLOAD_"
    MINIMUMS: ClassVar[Mapping[str, int]] = {"part_bytes": 5 * MiB}

    part_bytes: int = 16 * MiB
    in_flight: int = 8
    part_concurrency: int = 4


def staging_root(url: str, near: PathLike | None = None) -> Path:
    """The folder a write of ``url`` stages in: ``$GRAINPACK_CACHE/uploads/<key>``, or,
    when ``near`` is given and on another file system than the cache (a merge hard-links
    its parts), ``.<key>.upload`` beside ``near``. The corpus goes to ``corpus`` inside it.

    Example:
        >>> staging_root("s3://bucket/web").name == staging_root("s3://bucket/web/").name
        True
    """
    key = hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:24]
    root = cache_root() / "uploads" / key
    if near is None:
        return root
    near = Path(os.path.abspath(near))
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
        if os.stat(root.parent).st_dev == os.stat(near.parent).st_dev:
            return root
    except OSError:
        pass
    return near.parent / f".{key}.upload"


def _files(folder: Path, manifest: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(name, sha256, size) of every file the manifest names, each checked to be there."""
    found = []
    for shard in manifest["shards"]:
        for kind in ("tokens", "offsets", "summary"):
            if f"{kind}_file" in shard:
                name, sha = shard[f"{kind}_file"], shard[f"{kind}_sha256"]
                found.append((name, sha, os.stat(folder / name).st_size))
    return found


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 * MiB):
            digest.update(chunk)
    return digest.hexdigest()


def _upload(
    store: Bucket, folder: Path, item: tuple[str, str, int], options: UploadOptions
) -> tuple[str | None, bool]:
    """Uploads one file unless an object with its size and sha256 is there: its ETag, and
    whether it was uploaded."""
    name, sha, size = item
    found = store.describe(name)
    if found is not None and found[0]["size"] == size and found[1].get(SHA256_KEY) == sha:
        return found[0].get("e_tag"), False
    if _sha256(folder / name) != sha:
        raise CorpusError(
            f"{folder / name}: its sha256 is not the one its manifest records: the staged "
            f"corpus was damaged; delete {folder} and write again (nothing was published)"
        )
    etag = store.upload(
        name, folder / name, {SHA256_KEY: sha}, options.part_bytes, options.part_concurrency
    )
    return etag, True


def _upload_all(
    store: Bucket, folder: Path, files: list[tuple[str, str, int]], options: UploadOptions
) -> list[tuple[str | None, bool]]:
    """:func:`_upload` of every file, ``in_flight`` at a time; on a failure or an interrupt
    the uploads not started are cancelled (those in flight finish)."""
    pool = concurrent.futures.ThreadPoolExecutor(options.in_flight, "grainpack-upload")
    try:
        futures = [pool.submit(_upload, store, folder, item, options) for item in files]
        return [future.result() for future in futures]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _check_listing(store: Bucket, files: list[tuple[str, str, int]], etags: list[Any]) -> None:
    """Every uploaded object is there, of its size, with the ETag its upload saw."""
    listed = store.listing()
    for (name, _, size), etag in zip(files, etags):
        meta = listed.get(name)
        now = None if meta is None else (meta["size"], meta.get("e_tag"))
        if now is None or now[0] != size or (etag and now[1] and now[1] != etag):
            what = "is gone" if now is None else f"now has {now[0]} bytes, ETag {now[1]}"
            raise CorpusError(
                f"{store.url}/{name}: replaced during the upload ({what}; uploaded {size} "
                f"bytes, ETag {etag}): another process writes under {store.url}. Nothing was "
                "published; make sure no other job writes there, then run the write again"
            )


def _exists(url: str) -> CorpusExistsError:
    return CorpusExistsError(
        f"{url} already holds a corpus ({url}/{MANIFEST_NAME}); objects on object storage "
        "are never replaced (readers pin them): write to a new prefix, or delete that "
        "corpus first"
    )


@dataclasses.dataclass(frozen=True)
class PublishReport:
    """What :func:`publish` did: objects ``uploaded`` and ``kept`` (already there from an
    interrupted run), the ``bytes`` uploaded, and whether the corpus was ``already``
    published (a byte-identical manifest at the URL: nothing done)."""

    uploaded: int
    kept: int
    bytes: int
    already: bool = False


def publish(folder: PathLike, url: str, *, options: UploadOptions | None = None) -> PublishReport:
    """Uploads the complete local corpus at ``folder`` to ``url``, manifest last, as one
    transaction (see the module docstring); ``folder`` is left as it is.

    Args:
        folder: A complete native corpus (its files are checked against its manifest).
        url: ``s3://BUCKET/PREFIX``, ``gs://...`` or ``az://...``.
        options: Part size and concurrency (default: :meth:`UploadOptions.from_env`).

    Returns:
        A :class:`PublishReport`.

    Raises:
        CorpusExistsError: ``url`` holds another corpus, another write of it is in
            progress, or another writer published it first.
        CorpusError: A staged file that does not match its manifest, an object replaced
            during the upload, access denied (naming the URL and the credential variables).
        ValueError: ``url`` is not a writable URL.

    Example:
        >>> publish("corpus", "s3://my-bucket/corpora/web")  # doctest: +SKIP
        PublishReport(uploaded=7, kept=0, bytes=402112, already=False)
    """
    target = output_url(url, "publish")
    if target is None:
        raise ValueError(f"publish: {url!r} is not an object-storage URL (s3://, gs://, az://)")
    folder = Path(folder)
    options = UploadOptions.from_env() if options is None else options
    staged = (folder / MANIFEST_NAME).read_bytes()
    files = _files(folder, read_manifest(folder))
    store = Bucket(target)
    lock = write_lock(folder.parent / f"{folder.name}.publish")  # one publish per folder
    try:
        token = write_token(folder)
        existing = store.read(MANIFEST_NAME)
        if existing is not None:
            if existing != staged:
                raise _exists(target)
            release_lock(store, token)
            logger.info("%s: already published (the same manifest is there)", target)
            return PublishReport(0, 0, 0, already=True)
        take_lock(store, token)
        try:
            done = _upload_all(store, folder, files, options)
            _check_listing(store, files, [etag for etag, _ in done])
            if not store.create(MANIFEST_NAME, staged) and store.read(MANIFEST_NAME) != staged:
                raise CorpusExistsError(
                    f"another writer published {target} first ({target}/{MANIFEST_NAME} "
                    "appeared during this upload); nothing of this write was published"
                )
        except Exception:  # (an interrupt keeps the lock object: the same write resumes)
            release_lock(store, token)
            raise
        release_lock(store, token)
    finally:
        lock.release()
    uploaded = [item for item, (_, new) in zip(files, done) if new]
    return PublishReport(
        len(uploaded), len(files) - len(uploaded), sum(size for _, _, size in uploaded)
    )


def check_url_target(url: str, near: PathLike | None = None) -> None:
    """Raises now what publishing at ``url`` would raise later (a corpus there, another
    write in progress), so that a long job fails before its work. A corpus there makes this
    host's staging folder of ``url`` useless: it is removed (with the lock object, if it is
    that folder's: a write killed after publishing), unless a write here still uses it."""
    store = Bucket(url)
    existing = store.read(MANIFEST_NAME)
    root = staging_root(url, near)
    if existing is not None:
        staged = root / "corpus" / MANIFEST_NAME
        ours = staged.is_file() and staged.read_bytes() == existing
        _discard(store, root)
        if ours:
            raise CorpusExistsError(
                f"{url} already holds a corpus: the one an interrupted write from this host "
                "published (its staging folder is now removed); it is complete: open it"
            )
        raise _exists(url)
    holder = lock_holder(store)
    token_file = token_path(root / "corpus")
    mine = token_file.is_file() and token_file.read_text().strip() == holder.get("token")
    if holder and not mine:
        raise CorpusExistsError(in_progress(url, holder))


def _discard(store: Bucket, root: Path) -> None:
    """Removes the staging folder ``root`` of a URL that holds a corpus, and the lock object
    if it is that folder's; nothing if a write on this host holds ``root``."""
    if not root.is_dir():
        return
    try:
        lock = write_lock(root / "write")
    except CorpusExistsError:
        return
    try:
        if (token := token_path(root / "corpus")).is_file():
            release_lock(store, token.read_text().strip())
        shutil.rmtree(root, ignore_errors=True)
    finally:
        lock.release()


def write_to_url(
    url: str,
    write: Callable[[Path], Any],
    *,
    overwrite: bool,
    what: str,
    near: PathLike | None = None,
) -> TokenShardSource:
    """Writes a corpus with ``write(staged)`` (a local writer, replacing what is at the path
    it is given) into the staging folder of ``url`` and publishes it there.

    Args:
        url: A writable URL (:func:`~grainpack.corpus.urls.output_url`).
        write: Writes the corpus at the path it is given.
        overwrite: Must be false: corpora on object storage are never replaced.
        what: The caller, named in errors.
        near: Stage beside this path when the cache is on another file system
            (:func:`staging_root`).

    Returns:
        The published corpus, opened from ``url``.

    Example:
        >>> from grainpack.ingest.writer import write_corpus
        >>> write_to_url(  # doctest: +SKIP
        ...     "s3://my-bucket/web", lambda p: write_corpus(p, [[1, 2]], overwrite=True),
        ...     overwrite=False, what="example",
        ... )
    """
    if overwrite:
        raise ValueError(
            f"{what}: overwrite=True with the URL {url}: corpora on object storage are never "
            "replaced (readers pin their objects); write to a new prefix, or delete the old "
            "corpus first and write without overwrite"
        )
    check_url_target(url, near)  # before the work
    root = staging_root(url, near)
    root.mkdir(parents=True, exist_ok=True)
    staged = root / "corpus"
    lock = write_lock(root / "write")  # one write of the URL from this host at a time
    try:
        try:
            write(staged)
            report = publish(staged, url)
        except KeyboardInterrupt:  # the staging folder stays: the same write resumes
            raise
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)  # its token and a build's parts stay
            raise
        logger.info(
            "%s: published (%d object(s) uploaded, %d kept from an interrupted write)",
            url,
            report.uploaded,
            report.kept,
        )
    finally:
        lock.release()
    shutil.rmtree(root, ignore_errors=True)
    return open_corpus(url)
