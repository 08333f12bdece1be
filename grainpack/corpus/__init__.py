"""Corpora on disk, the read side: the Grain data source over memmapped shards, the native
format and its summaries, readers for Megatron and the flat-shard ``index.json`` format,
verify, and the host cache. Writing corpora is :mod:`grainpack.ingest`.

Exported: ``open_corpus`` (any format -> ``TokenShardSource``, the Grain
``RandomAccessDataSource``), ``read_manifest``, ``verify_corpus`` and ``describe_corpus``
(-> ``VerifyReport``), and the errors (``CorpusError``, a ``ValueError``;
``CorpusNotFoundError`` and ``CorpusExistsError``, also ``FileNotFoundError`` and
``FileExistsError``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grainpack.lazy import exports

# name -> its module, loaded on first use (tests/test_layers.py checks the imports below).
_EXPORTS = {
    "CorpusError": "grainpack.corpus.errors",
    "CorpusExistsError": "grainpack.corpus.errors",
    "CorpusNotFoundError": "grainpack.corpus.errors",
    "TokenShardSource": "grainpack.corpus.source",
    "VerifyReport": "grainpack.corpus.verify",
    "describe_corpus": "grainpack.corpus.verify",
    "open_corpus": "grainpack.corpus.formats",
    "read_manifest": "grainpack.corpus.native",
    "verify_corpus": "grainpack.corpus.verify",
}

if TYPE_CHECKING:
    from grainpack.corpus.errors import CorpusError as CorpusError
    from grainpack.corpus.errors import CorpusExistsError as CorpusExistsError
    from grainpack.corpus.errors import CorpusNotFoundError as CorpusNotFoundError
    from grainpack.corpus.formats import open_corpus as open_corpus
    from grainpack.corpus.native import read_manifest as read_manifest
    from grainpack.corpus.source import TokenShardSource as TokenShardSource
    from grainpack.corpus.verify import VerifyReport as VerifyReport
    from grainpack.corpus.verify import describe_corpus as describe_corpus
    from grainpack.corpus.verify import verify_corpus as verify_corpus

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = exports(__name__, _EXPORTS)
