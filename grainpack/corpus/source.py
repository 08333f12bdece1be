# Over 400 lines, one module: one class, TokenShardSource: reads, maps and checks share its per-
# shard caches.
"""TokenShardSource: a Grain random-access source of documents stored in memory-mapped shards.

Invariant: the token stream is the shards concatenated in order; document ``i`` is
``stream[offsets[i]:offsets[i + 1]]`` and lies inside one shard.

Files that change under a reader are detected: each file's :class:`FileIdentity` (device,
inode, size, modification time) is recorded when the corpus is opened and compared with the
file on disk before every read of it (one ``stat``), so a shard that was truncated, rewritten
or replaced raises a :class:`CorpusError` naming it instead of a ``SIGBUS`` or a silent mix of
old and new tokens.
Native offsets files are memory-mapped, never copied: a 10**9-document corpus has 8 GB of
them, shared through the page cache by every process of a host. Whole-corpus arrays
(``offsets`` of a multi-shard corpus, ``lengths``) are built only when asked for;
:meth:`TokenShardSource.document_offsets` and :meth:`TokenShardSource.offsets_between` read
what they need from the maps.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import faulthandler
import functools
import itertools
import mmap
import operator
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from grainpack.corpus.cache import cached_array
from grainpack.corpus.errors import CorpusError, os_error
from grainpack.corpus.shards import (
    FileIdentity,
    OffsetsFile,
    ShardRecord,
    check_offsets,
    max_mapped_shards,
    offsets_path_of,
    raise_open_file_limit,
)

# A process maps every shard it reads, and Python's mmap keeps a descriptor per map (two per
# shard: tokens and offsets). Past this many mapped shards in a source, the least recently
# used are dropped (a map closes once no reader holds a view of it): descriptors stay
# bounded whatever the number of shards.
MAX_MAPPED_SHARDS = max_mapped_shards()

_TRANSIENT = (
    "_recent",
    "_recent_lock",
    "_maps",
    "_mmaps",
    "_ends",
    "_mapped",
    "_buffers",
    "_offsets",
    "_lengths",
    "_locals",
    "_checked",
    "_doc_starts",
    "_starts",
    "_starts_list",
    "_lock",
    "_num_docs",
)


def _faulthandler_on() -> None:
    """Enables :mod:`faulthandler` before a shard is mapped: a file truncated between a read's
    check and its copy raises ``SIGBUS``, and a Python traceback then shows where, instead of
    a silent exit 135."""
    if not faulthandler.is_enabled():
        with contextlib.suppress(RuntimeError, ValueError, OSError):  # no usable sys.stderr
            faulthandler.enable()


class TokenShardSource:
    """Documents of a token corpus, read lazily from memory-mapped shards.

    Structurally a ``grain.sources.RandomAccessDataSource``: ``len(src)`` is the number of
    documents and ``src[i]`` a copy of document ``i``'s tokens. Memmaps and derived arrays are
    built lazily per process and dropped when pickled, so the pickle holds only shard records.
    Normally built by :func:`grainpack.corpus.open_corpus`.

    Args:
        shards: Shard records in stream order.
        dtype: Token dtype of every shard file (little-endian on disk).
        fingerprint: Stable content-derived hex digest of the corpus.
        vocab_size: Vocabulary size if known.
        eos_id: End-of-document token id if known (required by ``"eos"`` shards).
        max_token_id: Largest token id if recorded (native corpora written since it is).
        tokenizer: The tokenizer a native corpus records (kind, file, sha256, ...), if any.
        summary_block_docs: Documents per block of the shards' ``summary_path`` files.

    Example:
        >>> import tempfile
        >>> from grainpack import write_corpus
        >>> src = write_corpus(tempfile.mkdtemp(), [[1, 2, 3], [], [4, 5]])
        >>> len(src), src[2].tolist(), src.lengths.tolist(), src.read_tokens(1, 4).tolist()
        (3, [4, 5], [3, 0, 2], [2, 3, 4])
    """

    def __init__(
        self,
        shards: Sequence[ShardRecord],
        *,
        dtype: np.typing.DTypeLike,
        fingerprint: str,
        vocab_size: int | None = None,
        eos_id: int | None = None,
        max_token_id: int | None = None,
        tokenizer: dict[str, Any] | None = None,
        summary_block_docs: int | None = None,
    ) -> None:
        if not all(isinstance(s, ShardRecord) for s in shards):
            raise TypeError(f"shards must be ShardRecord objects, got {list(map(type, shards))}")
        dt = np.dtype(dtype)
        if dt.kind not in "iu":
            raise TypeError(f"token dtype must be an integer dtype, got {dtype=}")
        self._shards = tuple(shards)
        self._dtype = dt.newbyteorder("=")
        self._file_dtype = dt.newbyteorder("<")
        self._fingerprint = str(fingerprint)
        self._vocab_size = vocab_size
        self._eos_id = eos_id
        self._max_token_id = max_token_id
        self._tokenizer = tokenizer
        self.summary_block_docs = summary_block_docs
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._recent: collections.OrderedDict[int, None] = collections.OrderedDict()
        self._recent_lock = threading.RLock()  # not _lock: offsets are built holding that
        self._maps: list[np.ndarray | None] = [None] * len(self._shards)
        self._mmaps: list[mmap.mmap | None] = [None] * len(self._shards)
        self._ends = [  # the bytes of each token file its tokens need
            s.byte_offset + s.num_tokens * self._file_dtype.itemsize for s in self._shards
        ]
        # identity of each mapped file: recorded at open, else taken when it is first mapped
        self._mapped: list[FileIdentity | None] = [s.identity for s in self._shards]
        self._buffers: list[memoryview | None] = [None] * len(self._shards)
        self._offsets: np.ndarray | None = None
        self._lengths: np.ndarray | None = None
        self._locals: list[np.ndarray | None] = [None] * len(self._shards)
        self._checked = [False] * len(self._shards)
        starts = [0]
        for s in self._shards:
            starts.append(starts[-1] + s.num_tokens)
        # Python list for bisect (20x faster than np.searchsorted on a scalar); array for users.
        self._starts_list = starts
        self._starts = np.asarray(starts, dtype=np.int64)
        counts = [s.num_documents for s in self._shards]
        self._doc_starts: list[int] | None = None  # first document of each shard, then N
        if None not in counts:
            self._doc_starts = [0, *itertools.accumulate(counts)]  # type: ignore[arg-type]
        self._num_docs = None if self._doc_starts is None else self._doc_starts[-1]

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for key in _TRANSIENT:
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def __repr__(self) -> str:
        return (
            f"TokenShardSource(fingerprint={self._fingerprint[:16]}, documents={len(self)}, "
            f"tokens={self.num_tokens})"
        )

    # -- metadata -------------------------------------------------------------------------------

    @property
    def shards(self) -> tuple[ShardRecord, ...]:
        """The shard records, in stream order."""
        return self._shards

    @property
    def dtype(self) -> np.dtype:
        """Token dtype (``uint16``/``uint32`` for native corpora; Megatron may give others)."""
        return self._dtype

    @property
    def vocab_size(self) -> int | None:
        return self._vocab_size

    @property
    def eos_id(self) -> int | None:
        return self._eos_id

    @property
    def max_token_id(self) -> int | None:
        """Largest token id if the corpus records it, else ``None`` (unknown, or no tokens)."""
        return self._max_token_id

    @property
    def id_bound(self) -> int:
        """Largest token id the source can hold, from what is known without reading tokens:
        the dtype, ``vocab_size`` and the recorded ``max_token_id``.

        Example:
            >>> import tempfile
            >>> from grainpack import write_corpus
            >>> write_corpus(tempfile.mkdtemp(), [[7, 3]], dtype="uint32").id_bound
            7
        """
        bound = int(np.iinfo(self._dtype).max)
        if self._vocab_size is not None:
            bound = min(bound, self._vocab_size - 1)
        if self._max_token_id is not None:
            bound = min(bound, self._max_token_id)
        return bound

    @property
    def tokenizer(self) -> dict[str, Any] | None:
        """The tokenizer recorded by the corpus (``None`` if it records none)."""
        return self._tokenizer

    @property
    def fingerprint(self) -> str:
        """Stable content-derived hex digest (same corpus -> same string in any process)."""
        return self._fingerprint

    @property
    def num_tokens(self) -> int:
        return self._starts_list[-1]

    @property
    def num_documents(self) -> int:
        return len(self)

    @property
    def shard_starts(self) -> np.ndarray:
        """int64 ``(num_shards + 1,)``: stream position where each shard starts, then the end."""
        return self._starts

    @property
    def offsets(self) -> np.ndarray:
        """int64 ``(num_documents + 1,)``: document starts in the token stream (read-only).

        For a one-shard native corpus this is the map of its offsets file; otherwise the
        array is built (8 bytes per document) on first use. Index math at scale uses
        :meth:`document_offsets` and :meth:`offsets_between` instead.
        """
        if self._offsets is None:
            with self._lock:
                if self._offsets is None:
                    self._offsets = self._build_offsets()
        return self._offsets

    @property
    def lengths(self) -> np.ndarray:
        """int64 ``(num_documents,)``: tokens per document, from offsets only (read-only)."""
        if self._lengths is None:
            lengths = np.empty(len(self), dtype=np.int64)
            starts = self._document_starts()
            for k in range(len(self._shards)):
                local = self._current_local(k, check=True)
                np.subtract(local[1:], local[:-1], out=lengths[starts[k] : starts[k + 1]])
            lengths.flags.writeable = False
            self._lengths = lengths
        return self._lengths

    def _build_offsets(self) -> np.ndarray:
        starts = self._document_starts()
        if len(self._shards) == 1:
            offsets = self._current_local(0, check=True)
        else:
            offsets = np.zeros(starts[-1] + 1, dtype=np.int64)
            for k in range(len(self._shards)):
                local = self._current_local(k, check=True)
                np.add(
                    local[1:], self._starts_list[k], out=offsets[starts[k] + 1 : starts[k + 1] + 1]
                )
        offsets.flags.writeable = False
        return offsets

    def _local(self, k: int, *, check: bool = False) -> np.ndarray:
        """Shard ``k``'s local offsets (``n_k + 1`` int64): the map of a native offsets
        file, else computed by the shard's :class:`DocumentIndex`; fully checked with
        ``check`` (once)."""
        local = self._locals[k]
        record = self._shards[k]
        if isinstance(record.documents, OffsetsFile):
            self._touch(k)
        if local is None:
            index = record.documents
            if isinstance(index, OffsetsFile):
                local = index.mapped()
            else:
                local = index.local_offsets(record, functools.partial(self._shard, k))
                local.flags.writeable = False
                self._checked[k] = True
            if record.num_documents is not None and local.size != record.num_documents + 1:
                raise CorpusError(
                    f"{record.tokens_path}: expected {record.num_documents} documents, "
                    f"found {local.size - 1}; rebuild the corpus"
                )
            self._locals[k] = local
        if check and not self._checked[k]:
            check_offsets(local, record.num_tokens, offsets_path_of(record))
            self._checked[k] = True
        return local

    def _current_local(self, k: int, *, check: bool = False) -> np.ndarray:
        """:meth:`_local` after checking that its offsets file is still the one opened (one
        ``stat``), so that a file truncated in place raises instead of ``SIGBUS``."""
        index = self._shards[k].documents
        if isinstance(index, OffsetsFile) and index.identity is not None:
            index.identity.check(index.path)
        return self._local(k, check=check)

    def _document_starts(self) -> list[int]:
        """First document of each shard, then the number of documents (scans shards whose
        document count is unknown, e.g. split after ``eos_id``)."""
        if self._doc_starts is None:
            counts = [self._local(k).size - 1 for k in range(len(self._shards))]
            self._doc_starts = [0, *itertools.accumulate(counts)]
            self._num_docs = self._doc_starts[-1]
        return self._doc_starts

    def _checked_documents(self, documents: np.ndarray) -> tuple[np.ndarray, list[int]]:
        """``documents`` as int64 ids in ``[0, num_documents]`` (the end allowed), and the
        shards' first documents; ``IndexError`` for an id outside."""
        docs = np.asarray(documents, dtype=np.int64)
        starts = self._document_starts()
        if docs.size and (docs.min() < 0 or docs.max() > starts[-1]):
            raise IndexError(
                f"document ids {docs.min()}..{docs.max()} are outside [0, {starts[-1]}] "
                "(num_documents is allowed: the end of the stream)"
            )
        return docs, starts

    def document_offsets(self, documents: np.ndarray) -> np.ndarray:
        """int64 stream offsets of document ids ``documents`` (any shape; ``num_documents``
        allowed, giving ``num_tokens``), gathered from the maps.

        Example:
            >>> import tempfile
            >>> from grainpack import write_corpus
            >>> src = write_corpus(tempfile.mkdtemp(), [[1, 2], [3], [4, 5]], shard_tokens=2)
            >>> src.document_offsets(np.array([2, 0, 3])).tolist()
            [3, 0, 5]
        """
        docs, starts = self._checked_documents(documents)
        if len(self._shards) == 1:
            return self._checked_values(0, self._current_local(0)[docs])
        flat = docs.reshape(-1)
        shard = np.searchsorted(starts, flat, side="right") - 1
        np.minimum(shard, len(self._shards) - 1, out=shard)  # document N: the last shard's end
        order = np.argsort(shard, kind="stable")  # one contiguous run of requests per shard
        cuts = np.searchsorted(shard[order], np.arange(len(self._shards) + 1))
        out = np.empty(flat.shape, dtype=np.int64)
        for k in np.flatnonzero(np.diff(cuts)).tolist():
            mine = order[cuts[k] : cuts[k + 1]]
            values = self._checked_values(k, self._current_local(k)[flat[mine] - starts[k]])
            out[mine] = values + self._starts_list[k]
        return out.reshape(docs.shape)

    def _checked_values(self, k: int, values: np.ndarray) -> np.ndarray:
        """``values`` read from shard ``k``'s offsets, after checking that they lie inside the
        shard (else the full check of its offsets names the fault)."""
        if values.size and (values.min() < 0 or values.max() > self._shards[k].num_tokens):
            self._fault(k)
        return values

    def _fault(self, k: int) -> None:
        """Raises :class:`CorpusError` for shard ``k``'s offsets, which a read found
        inconsistent (the full check names the first bad document)."""
        record = self._shards[k]
        where = offsets_path_of(record)
        check_offsets(self._local(k), record.num_tokens, where)
        raise CorpusError(f"{where}: inconsistent document offsets; rebuild the corpus")

    def read_ahead(self, runs: Sequence[tuple[int, int]], *, ahead: int = 1) -> None:
        """Asks the kernel to start reading the offsets of document runs ``[first, stop)``
        (``posix_fadvise(WILLNEED)``): the blocked order reads a window's runs from many
        files, and they then arrive in parallel instead of one seek at a time. Advice holds
        no memory of ours: how many windows ``ahead`` of the one being read they are does
        not matter here."""
        starts = self._document_starts()
        for first, stop in runs:
            k = min(max(bisect.bisect_right(starts, first) - 1, 0), len(self._shards) - 1)
            index = self._shards[k].documents
            if not isinstance(index, OffsetsFile) or not hasattr(os, "posix_fadvise"):
                continue
            a = first - starts[k]
            b = min(stop, starts[k + 1]) - starts[k]
            try:
                fd = os.open(index.path, os.O_RDONLY)
            except OSError:  # only advice: the read that follows names the problem
                continue
            try:
                os.posix_fadvise(
                    fd, index.byte_offset + 8 * a, 8 * (b - a + 1), os.POSIX_FADV_WILLNEED
                )
            finally:
                os.close(fd)

    def offsets_between(self, first: int, stop: int) -> np.ndarray:
        """int64 stream offsets of documents ``first .. stop`` (``stop - first + 1`` values:
        the starts of documents ``[first, stop)`` and the end of the last), read from the
        maps and checked (non-decreasing, inside their shards).

        Example:
            >>> import tempfile
            >>> from grainpack import write_corpus
            >>> src = write_corpus(tempfile.mkdtemp(), [[1, 2], [3], [4, 5]], shard_tokens=2)
            >>> src.offsets_between(1, 3).tolist()
            [2, 3, 5]
        """
        starts = self._document_starts()
        if not 0 <= first <= stop <= starts[-1]:
            raise IndexError(
                f"documents [{first}, {stop}) are outside [0, {starts[-1]}); "
                "use 0 <= first <= stop <= num_documents"
            )
        if not self._shards:  # an empty corpus
            return np.zeros(1, dtype=np.int64)
        k = max(bisect.bisect_right(starts, first) - 1, 0)
        k = min(k, len(self._shards) - 1)
        pieces = []
        while True:
            record, local = self._shards[k], self._current_local(k)
            a, b = first - starts[k], min(stop, starts[k + 1]) - starts[k]
            piece = local[a : b + 1]
            if piece.size and (
                piece[0] < 0
                or piece[-1] > record.num_tokens
                or (np.diff(piece) < 0).any()
                or (a == 0 and piece[0] != 0)
                or (b == starts[k + 1] - starts[k] and piece[-1] != record.num_tokens)
            ):
                check_offsets(local, record.num_tokens, offsets_path_of(record))  # names the fault
            pieces.append(piece[1:] if pieces else piece)
            pieces[-1] = pieces[-1] + self._starts_list[k]
            if stop <= starts[k + 1] or k + 1 == len(self._shards):
                break
            k, first = k + 1, starts[k + 1]
        return np.concatenate(pieces) if len(pieces) > 1 else pieces[0]

    def documents_at(self, positions: np.ndarray) -> np.ndarray:
        """int64 id of the document holding each stream position (``0 <= p < num_tokens``);
        empty documents hold no position.

        Example:
            >>> import tempfile
            >>> from grainpack import write_corpus
            >>> src = write_corpus(tempfile.mkdtemp(), [[1, 2], [], [3], [4, 5]], shard_tokens=2)
            >>> src.documents_at(np.array([0, 1, 2, 3, 4])).tolist()
            [0, 0, 2, 3, 3]
        """
        pos = np.asarray(positions, dtype=np.int64)
        starts = self._document_starts()
        if pos.size and (pos.min() < 0 or pos.max() >= self.num_tokens):
            raise IndexError(
                f"stream positions {pos.min()}..{pos.max()} are outside [0, {self.num_tokens})"
            )
        shard = np.searchsorted(self._starts, pos, side="right") - 1
        out = np.empty(pos.shape, dtype=np.int64)
        for k in np.unique(shard).tolist():
            mine = shard == k
            local, here = self._current_local(k), pos[mine] - self._starts_list[k]
            found = np.searchsorted(local, here, side="right") - 1
            # the document found must hold the position: unsorted offsets break the search
            if (
                found.min() < 0
                or found.max() >= local.size - 1
                or (local[found] > here).any()
                or (local[found + 1] <= here).any()
            ):
                self._fault(k)
            out[mine] = starts[k] + found
        return out

    def __len__(self) -> int:
        return self._document_starts()[-1]

    # -- reads ----------------------------------------------------------------------------------

    def _touch(self, k: int) -> None:
        """Marks shard ``k`` as just used, and drops the maps of the least recently used
        shards past ``MAX_MAPPED_SHARDS`` (they are mapped again when next read)."""
        with self._recent_lock:
            recent = self._recent
            recent[k] = None
            recent.move_to_end(k)
            while len(recent) > MAX_MAPPED_SHARDS:
                j, _ = recent.popitem(last=False)
                self._maps[j] = self._mmaps[j] = self._buffers[j] = None
                if isinstance(self._shards[j].documents, OffsetsFile):
                    self._locals[j] = None  # mapped, not computed: cheap to map again

    def _shard(self, k: int) -> np.ndarray:
        """Shard ``k``'s tokens, mapped on first use; the file is checked against its
        identity on every call, so a changed file raises before its pages are touched."""
        record = self._shards[k]
        if record.num_tokens == 0:  # mmap cannot map zero bytes
            return np.empty(0, self._file_dtype)
        self._touch(k)
        tokens, identity = self._maps[k], self._mapped[k]
        if tokens is not None:
            identity.check(record.tokens_path)  # type: ignore[union-attr]
            return tokens
        _faulthandler_on()
        raise_open_file_limit()
        if identity is not None:
            identity.check(record.tokens_path)  # names a deleted or replaced file as such
        try:
            with open(record.tokens_path, "rb") as f:
                stat = os.fstat(f.fileno())
                if identity is not None:
                    identity.check(record.tokens_path, stat)
                end = self._ends[k]
                if stat.st_size < end:
                    raise CorpusError(
                        f"{record.tokens_path}: has {stat.st_size} bytes, the corpus needs "
                        f"{end} ({record.num_tokens} tokens at byte {record.byte_offset}); the "
                        "file is truncated: verify or rebuild the corpus"
                    )
                start = record.byte_offset - record.byte_offset % mmap.ALLOCATIONGRANULARITY
                mapped = mmap.mmap(f.fileno(), end - start, access=mmap.ACCESS_READ, offset=start)
        except OSError as err:
            if identity is not None:  # replaced or deleted since the check above: say so
                identity.check(record.tokens_path)
            raise os_error(err, "mapping", record.tokens_path) from err
        tokens = np.frombuffer(
            mapped, self._file_dtype, record.num_tokens, record.byte_offset - start
        )
        self._mapped[k] = identity or FileIdentity.of(stat)
        self._mmaps[k] = mapped
        self._maps[k] = tokens  # a racing thread maps the same bytes: harmless
        return tokens

    def read_into(self, out: np.ndarray, start: int) -> None:
        """Fills ``out`` with stream tokens ``[start, start + len(out))``, crossing shards.

        Args:
            out: 1-D integer array of any int dtype (values are cast, e.g. into int32).
            start: Stream position of ``out[0]``.

        Raises:
            TypeError: ``out`` is not a 1-D integer array or ``start`` is not an integer.
            IndexError: The range leaves ``[0, num_tokens]``.
        """
        if not isinstance(out, np.ndarray) or out.ndim != 1 or out.dtype.kind not in "iu":
            raise TypeError(
                f"out must be a 1-D integer numpy array, got {type(out).__name__} "
                f"{getattr(out, 'dtype', None)} {getattr(out, 'shape', None)}"
            )
        start = operator.index(start)
        n = out.shape[0]
        starts = self._starts_list
        if start < 0 or start + n > starts[-1]:
            raise IndexError(
                f"stream range [{start}, {start + n}) is outside [0, {starts[-1]}]; "
                "read within the corpus's num_tokens"
            )
        k = bisect.bisect_right(starts, start) - 1
        pos, filled = start, 0
        while filled < n:
            take = min(starts[k + 1] - pos, n - filled)
            if take > 0:
                local = pos - starts[k]
                out[filled : filled + take] = self._ids(k, local, local + take)
                filled += take
                pos += take
            k += 1

    def check_files(self, shards: Iterable[int]) -> None:
        """Raises :class:`CorpusError` if the token file of one of ``shards`` changed since
        the corpus was opened (or since it was mapped, without a recorded identity); one
        ``stat`` each. Reads check by themselves; this is for holders of :meth:`shard_view`
        buffers, which are read later."""
        for k in shards:
            identity = self._mapped[k]
            if identity is not None:
                identity.check(self._shards[k].tokens_path)

    def cached_array(
        self, name: str, shape: tuple[int, ...], compute: Callable[[], np.ndarray]
    ) -> np.ndarray:
        """An int64 array derived from this corpus (``name`` says how), computed once per
        host: ``compute()``, kept in the cache folder under the corpus fingerprint (see
        :mod:`grainpack.corpus.cache`), so other processes and workers read it."""
        return cached_array(f"{self.fingerprint[:32]}-{len(self)}-{name}", shape, compute)

    def size_check(self, shard: int) -> Callable[[], None]:
        """A check to run before each read of a :meth:`shard_view` buffer of ``shard``: it
        raises :class:`CorpusError` if the mapped file is now shorter than its tokens
        (touching them would raise ``SIGBUS``). One ``fstat`` of the map, cheap enough for
        every read (:meth:`check_files` also sees replaced and rewritten files); bound to
        the current map, which the buffer is a view of.

        Example:
            >>> import tempfile
            >>> from grainpack import write_corpus
            >>> src = write_corpus(tempfile.mkdtemp(), [[1, 2, 3], [4, 5]])
            >>> view, check = src.shard_view(0), src.size_check(0)
            >>> _ = open(src.shards[0].tokens_path, "r+b").truncate(2)
            >>> check()  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            grainpack.corpus.errors.CorpusError: ...tokens-00000.bin: changed since ... (size 10 -> 2 bytes)...
        """  # noqa: E501
        with self._recent_lock:  # no other thread drops the map in between
            if self._mmaps[shard] is None:  # else mapped and checked by shard_view just now
                self._shard(shard)
            mapped, identity = self._mmaps[shard], self._mapped[shard]
        end, path = self._ends[shard], self._shards[shard].tokens_path

        def check() -> None:
            if mapped is None or mapped.size() >= end:
                return
            identity.check(path)  # type: ignore[union-attr]
            raise CorpusError(  # the path names another file now, shorter than the mapped one
                f"{path}: the mapped file was truncated to {mapped.size()} bytes (the corpus "
                f"needs {end}) while being read; reopen the corpus"
            )

        return check

    def shard_view(self, shard: int) -> memoryview:
        """Shard ``shard``'s tokens as a zero-copy buffer of the mapped file (cached).

        Slices of it joined with ``b"".join`` gather many ranges in one C loop, the fast path
        of row assembly (a numpy slice assignment per range costs several times more).

        Example:
            >>> import tempfile
            >>> from grainpack import write_corpus
            >>> src = write_corpus(tempfile.mkdtemp(), [[1, 2, 3], [4, 5]], shard_tokens=3)
            >>> view = src.shard_view(1)
            >>> np.frombuffer(b"".join([view[1:], src.shard_view(0)[1:2]]), src.dtype).tolist()
            [5, 2]
        """
        tokens = self._shard(shard)  # checks the file every call: once per Grain element
        view = self._buffers[shard]
        if view is None:
            view = memoryview(tokens)
            self._buffers[shard] = view
        return view

    def read_tokens(self, start: int, stop: int) -> np.ndarray:
        """Returns a copy of stream tokens ``[start, stop)`` (may cross shards)."""
        start, stop = operator.index(start), operator.index(stop)
        if not 0 <= start <= stop <= self._starts_list[-1]:
            raise IndexError(
                f"stream range [{start}, {stop}) is outside [0, {self._starts_list[-1]}] or "
                "reversed; use 0 <= start <= stop <= num_tokens"
            )
        k = bisect.bisect_right(self._starts_list, start) - 1
        if k < len(self._shards) and stop <= self._starts_list[k + 1]:  # one shard: one copy
            local = start - self._starts_list[k]
            return np.array(self._ids(k, local, local + stop - start), dtype=self._dtype)
        out = np.empty(stop - start, dtype=self._dtype)
        self.read_into(out, start)
        return out

    def _ids(self, k: int, first: int, stop: int) -> np.ndarray:
        """Tokens ``[first, stop)`` of shard ``k`` (a view of its map), refused if a signed
        token file (Megatron's int dtypes) holds a negative id there."""
        ids = self._shard(k)[first:stop]
        if self._dtype.kind == "i" and len(ids) and ids.min() < 0:
            at = first + int(np.argmax(ids < 0))
            raise CorpusError(
                f"{self._shards[k].tokens_path}: token id {ids[at - first]} at token {at} "
                f"(stream position {self._starts_list[k] + at}) is negative (a signed token "
                "file); token ids are non-negative, so the file is corrupt or not a token "
                "file (`grainpack verify` checks every id)"
            )
        return ids

    def _check_document(self, index: Any) -> int:
        if isinstance(index, bool | np.bool_) or not isinstance(index, int | np.integer):
            raise TypeError(f"document index must be an int, got {type(index).__name__} {index!r}")
        i = int(index)
        n = len(self)
        if not 0 <= i < n:
            raise IndexError(f"document index {i} is outside [0, {n}); no negative indexing")
        return i

    def _document_range(self, i: int) -> tuple[int, int]:
        """Stream range of document ``i`` (its shard's offsets checked on first use)."""
        starts = self._document_starts()
        k = bisect.bisect_right(starts, i) - 1
        local = self._current_local(k, check=True)
        base = self._starts_list[k]
        return base + int(local[i - starts[k]]), base + int(local[i - starts[k] + 1])

    def __getitem__(self, index: int) -> np.ndarray:
        return self.read_tokens(*self._document_range(self._check_document(index)))

    def _getitems(self, indices: Sequence[int]) -> list[np.ndarray]:
        return [self[i] for i in indices]

    def read_span(self, document: int, start: int, stop: int) -> np.ndarray:
        """Returns a copy of tokens ``[start, stop)`` of ``document`` (bounds-checked)."""
        i = self._check_document(document)
        start, stop = operator.index(start), operator.index(stop)
        a, b = self._document_range(i)
        if not 0 <= start <= stop <= b - a:
            raise IndexError(
                f"span [{start}, {stop}) is outside document {i} of length {b - a}; "
                "use 0 <= start <= stop <= length"
            )
        return self.read_tokens(a + start, a + stop)
