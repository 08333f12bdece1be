"""Per-block token totals of a corpus: what the blocked order locates rows with.

Block ``b`` of ``C`` documents holds the stored documents ``[b*C, (b+1)*C)``; its total is
their tokens. The blocked order (:class:`~grainpack.index.blocked.BlockedOrder`) needs
``ceil(N / C)`` totals per source, never the ``N`` document lengths.

Native corpora written by grainpack (format version 2) store them with the shards, in blocks
of ``SUMMARY_BLOCK_DOCS`` documents::

    summary-00000.bin   raw little-endian int64: the tokens of each block that lies (in part)
                        in shard 0, in block order; a block cut by a shard end is counted in
                        both shards, each with its own part (the parts add up)

listed in the manifest (``summary_file``, ``summary_sha256`` per shard, and
``summary_block_docs``). Any multiple of that block size is a sum of stored totals. For
every other case (format version 1, Megatron, the ``index.json`` format, another block
size) the totals are computed in one streaming pass over the memory-mapped offsets and
cached outside the corpus, in ``$GRAINPACK_CACHE/summaries`` (default
``~/.cache/grainpack/summaries``), keyed by the corpus fingerprint and the block size: a
read-only corpus is never written to.
"""

from __future__ import annotations

import logging
import os
import time

import numpy as np

from grainpack.corpus.errors import CorpusError
from grainpack.corpus.source import TokenShardSource

__all__ = [
    "SUMMARY_BLOCK_DOCS",
    "ShardSummary",
    "block_tokens",
    "shard_totals",
    "summary_pieces",
]

logger = logging.getLogger(__name__)

SUMMARY_BLOCK_DOCS = 256  # 8 bytes per 256 documents: 31 MB for 10**9 documents
_SCAN_DOCS = 1 << 22  # documents read at once by the streaming pass (32 MB of offsets)


def summary_pieces(first_document: int, num_documents: int, block_docs: int) -> int:
    """How many totals a shard of ``num_documents`` starting at ``first_document`` stores.

    Example:
        >>> summary_pieces(250, 10, 256)  # documents 250..259 touch blocks 0 and 1
        2
    """
    if num_documents == 0:
        return 0
    return (first_document + num_documents - 1) // block_docs - first_document // block_docs + 1


def shard_totals(lengths: np.ndarray, first_document: int, block_docs: int) -> np.ndarray:
    """The block totals (``summary-NNNNN.bin``, as int64) of a shard whose documents, of
    ``lengths`` tokens, start at ``first_document`` of the corpus: what
    :class:`ShardSummary` counts while writing, from the lengths of a shard already written.

    Example:
        >>> shard_totals(np.array([3, 4, 5]), first_document=255, block_docs=256).tolist()
        [3, 9]
    """
    heads = np.arange(-first_document % block_docs, len(lengths), block_docs)
    if len(lengths) and (len(heads) == 0 or heads[0] != 0):
        heads = np.concatenate([[0], heads])
    if not len(lengths):
        return np.zeros(0, dtype=np.int64)
    return np.add.reduceat(np.asarray(lengths, dtype=np.int64), heads)


class ShardSummary:
    """Running block totals of one shard being written (the writer's hook).

    Example:
        >>> s = ShardSummary(first_document=255, block_docs=256)
        >>> for tokens in (3, 4, 5):
        ...     s.add(tokens)
        >>> s.totals()
        [3, 9]
    """

    def __init__(self, first_document: int, block_docs: int = SUMMARY_BLOCK_DOCS) -> None:
        self.next_document, self.block_docs = first_document, block_docs
        self._totals: list[int] = []
        self._current = 0
        self._started = False

    def add(self, tokens: int) -> None:
        """Counts the next document of the shard."""
        if self._started and self.next_document % self.block_docs == 0:
            self._totals.append(self._current)
            self._current = 0
        self._started = True
        self._current += tokens
        self.next_document += 1

    def totals(self) -> list[int]:
        """The shard's block totals, in block order."""
        return [*self._totals, self._current] if self._started else []

    def to_bytes(self) -> bytes:
        """The ``summary-NNNNN.bin`` content."""
        return np.array(self.totals(), dtype="<i8").tobytes()


def block_tokens(source: TokenShardSource, block_docs: int) -> np.ndarray:
    """int64 tokens of every block of ``block_docs`` documents (``ceil(N / block_docs)``).

    Read from the corpus's stored summary when ``block_docs`` is a multiple of its block,
    else from the cache or one streaming pass (then cached; see the module docstring).

    Example:
        >>> import tempfile
        >>> from grainpack import write_corpus
        >>> src = write_corpus(tempfile.mkdtemp(), [[1, 2], [3], [4, 5, 6]], shard_tokens=2)
        >>> block_tokens(src, 512).tolist()  # a multiple of the stored block: read, not cached
        [6]
    """
    base = source.summary_block_docs
    if base and block_docs % base == 0:
        return _stored(source, base, block_docs)
    expected = -(-len(source) // block_docs)
    return source.cached_array(str(block_docs), (expected,), lambda: _scan(source, block_docs))


def _stored(source: TokenShardSource, base: int, block_docs: int) -> np.ndarray:
    """Totals per block of ``block_docs`` (a multiple of ``base``) from the stored totals per
    block of ``base`` documents, reduced shard by shard: memory ``O(N / block_docs)``."""
    missing = [r.tokens_path for r in source.shards if r.summary_path is None]
    if missing:
        raise CorpusError(f"{missing[0]}: the manifest lists no summary file")
    _read_ahead([r.summary_path for r in source.shards])  # type: ignore[misc]
    out = np.zeros(-(-len(source) // block_docs), dtype=np.int64)
    first = 0
    for record in source.shards:
        n = record.num_documents or 0
        count = summary_pieces(first, n, base)
        totals = np.fromfile(record.summary_path, dtype="<i8")  # type: ignore[arg-type]
        if totals.size != count or int(totals.sum()) != record.num_tokens or (totals < 0).any():
            raise CorpusError(
                f"{record.summary_path}: expected {count} non-negative block totals summing to "
                f"the shard's {record.num_tokens} tokens, found {totals.size} summing to "
                f"{int(totals.sum())}; rebuild the corpus"
            )
        if count:  # part b of the shard belongs to block (first // base + b) * base // C
            blocks = (first // base + np.arange(count)) * base // block_docs
            heads = np.flatnonzero(np.r_[True, blocks[1:] != blocks[:-1]])
            out[blocks[heads]] += np.add.reduceat(totals.astype(np.int64), heads)
        first += n
    return out


def _read_ahead(paths: list[str]) -> None:
    """Starts reading many small files at once (from a cold page cache each is a seek)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        finally:
            os.close(fd)


def _scan(source: TokenShardSource, block_docs: int) -> np.ndarray:
    """One streaming pass over the offsets: ``O(N)`` time once, ``O(N / block_docs)`` memory."""
    started = time.perf_counter()
    n = len(source)
    out = np.zeros(-(-n // block_docs), dtype=np.int64)
    step = block_docs * max(1, _SCAN_DOCS // block_docs)
    for first in range(0, n, step):
        offsets = source.offsets_between(first, min(first + step, n))
        cuts = np.r_[np.arange(0, len(offsets) - 1, block_docs), len(offsets) - 1]
        out[first // block_docs : first // block_docs + len(cuts) - 1] = np.diff(offsets[cuts])
    logger.info(
        "computed %d block totals of %d documents for %r in %.2f s",
        len(out),
        block_docs,
        source,
        time.perf_counter() - started,
    )
    return out
