"""The corpus errors: every problem with a corpus on disk is one of these (all ``ValueError``)."""

from __future__ import annotations

__all__ = ["CorpusError", "CorpusExistsError", "CorpusNotFoundError"]


class CorpusError(ValueError):
    """A corpus on disk is missing, malformed or inconsistent (the message says what and where)."""


class CorpusNotFoundError(FileNotFoundError, CorpusError):
    """Nothing exists at the corpus path (both a ``FileNotFoundError`` and a ``ValueError``)."""


class CorpusExistsError(FileExistsError, CorpusError):
    """A write would replace a corpus without ``overwrite=True`` (also a ``ValueError``)."""
