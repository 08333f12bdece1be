"""Corpus URLs: which corpus paths name object storage, and which of them can be written.

``s3://``, ``gs://``, ``az://`` (and obstore's other Azure spellings) and ``http(s)://``
name a corpus read through :mod:`grainpack.corpus.remote`; ``file://`` names a local folder,
read as its path (memory-mapped). Anything else is a local path, as it always was. Outputs
(:func:`output_url`) may be buckets (``s3``, ``gs``, ``az``: written by
:mod:`grainpack.ingest.upload`), never ``http(s)://`` (read-only) nor an unknown scheme.
Standard library only: importing this never loads obstore.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from typing import Any

__all__ = [
    "REMOTE_SCHEMES",
    "WRITABLE_SCHEMES",
    "is_url",
    "local_path",
    "output_url",
    "refuse_url_output",
]

REMOTE_SCHEMES = ("s3", "s3a", "gs", "az", "azure", "abfs", "abfss", "adl", "http", "https")
WRITABLE_SCHEMES = ("s3", "s3a", "gs", "az", "azure", "abfs", "abfss", "adl")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def _scheme(path: Any) -> str | None:
    if not isinstance(path, str):
        return None
    found = _SCHEME.match(path)
    return found.group(1).lower() if found else None


def is_url(path: Any) -> bool:
    """Whether ``path`` names a corpus on object storage (a ``str`` with a remote scheme).

    Example:
        >>> [is_url(p) for p in ("s3://b/c", "gs://b/c", "https://h/c", "file:///c", "c")]
        [True, True, True, False, False]
    """
    return _scheme(path) in REMOTE_SCHEMES


def local_path(path: Any) -> Any:
    """``path`` with a ``file://`` URL turned into its local path (others are returned as
    they are).

    Example:
        >>> local_path("file:///data/my%20corpus"), local_path("corpus")
        ('/data/my corpus', 'corpus')
    """
    if _scheme(path) != "file":
        return path
    parts = urllib.parse.urlparse(path)
    if parts.netloc not in ("", "localhost"):
        raise ValueError(
            f"{path}: a file:// URL names a path on this machine (file:///PATH); got the host "
            f"{parts.netloc!r}"
        )
    return urllib.parse.unquote(parts.path)


def output_url(path: Any, what: str) -> str | None:
    """The URL a corpus is written to when ``path``, the output of ``what``, names object
    storage (trailing ``/`` removed); ``None`` for a local path (``file://`` URLs included).

    Raises:
        ValueError: An unknown scheme, a read-only one (``http(s)://``) or a URL without a
            bucket (container), naming what was expected and how to fix it.

    Example:
        >>> output_url("s3://bucket/corpora/web/", "write_corpus"), output_url("web", "w")
        ('s3://bucket/corpora/web', None)
    """
    scheme = _scheme(path)
    if scheme is None or scheme == "file":
        return None
    if scheme in ("http", "https"):
        raise ValueError(
            f"{what}: cannot write to {path}: {scheme}:// URLs are read-only (plain HTTP has no "
            "uploads); write to a bucket (s3://BUCKET/PREFIX, gs://..., az://...) and read it "
            "over https:// if it is served there"
        )
    if scheme not in WRITABLE_SCHEMES:
        raise ValueError(
            f"{what}: cannot write to {path}: unknown URL scheme {scheme}://; expected a local "
            f"path or one of {', '.join(s + '://' for s in WRITABLE_SCHEMES)}"
        )
    bucket = urllib.parse.urlparse(path).netloc
    if not bucket:
        raise ValueError(
            f"{what}: cannot write to {path}: the URL names no bucket; expected "
            f"{scheme}://BUCKET/PREFIX (e.g. {scheme}://my-bucket/corpora/web)"
        )
    return path.rstrip("/")


def refuse_url_output(path: str | os.PathLike[str], what: str) -> None:
    """Raises ``ValueError`` if ``path``, the output of ``what`` (a writer of local folders),
    is a URL: :func:`~grainpack.ingest.writer.write_corpus`, ``build_corpus``,
    ``convert_inputs`` and ``merge_corpora`` write to URLs (staged locally, then uploaded)."""
    if output_url(path, what) is not None:
        raise ValueError(
            f"{what}: cannot write to {path}: this writer writes a local folder; write_corpus, "
            "build_corpus, convert_inputs and merge_corpora (and grainpack build/merge) write "
            "corpora to object storage: use one of them, or write locally and publish the "
            "folder with grainpack.ingest.upload.publish"
        )
