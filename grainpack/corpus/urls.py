"""Corpus URLs: which corpus paths name object storage, and where writing there is refused.

``s3://``, ``gs://``, ``az://`` (and obstore's other Azure spellings) and ``http(s)://``
name a corpus read through :mod:`grainpack.corpus.remote`; ``file://`` names a local folder,
read as its path (memory-mapped). Anything else is a local path, as it always was.
Standard library only: importing this never loads obstore.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from typing import Any

__all__ = ["REMOTE_SCHEMES", "is_url", "local_path", "refuse_url_output"]

REMOTE_SCHEMES = ("s3", "s3a", "gs", "az", "azure", "abfs", "abfss", "adl", "http", "https")
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


def refuse_url_output(path: str | os.PathLike[str], what: str) -> None:
    """Raises ``ValueError`` if ``path``, the output of ``what``, is an object-storage URL:
    writing corpora there is not supported yet (issue 33, phase 2)."""
    if is_url(path):
        raise ValueError(
            f"{what}: cannot write to {path}: writing a corpus to object storage is not "
            "supported yet (grainpack reads corpora there). Write it to a local folder, then "
            "upload that folder with your cloud's tool (aws s3 sync / gcloud storage rsync / "
            "azcopy), uploading manifest.json last so that readers never see a manifest "
            "naming a missing file"
        )
