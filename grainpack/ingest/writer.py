# Over 400 lines, one module: one class, CorpusWriter, with its validation and shuffle; the
# transaction lives apart.
"""``CorpusWriter``/``write_corpus``: the native format's writer (see :mod:`grainpack.corpus`).

Every write is a :class:`~grainpack.ingest.transaction.Transaction`: shards and the
manifest go to a private folder next to the target, published by one atomic rename under an
exclusive lock, so the target holds the old complete corpus or the new one at every instant.

With ``shuffle=seed`` documents are stored in a seeded random order, so storage order
carries no clustering into the blocks of the blocked order: stored document ``i`` is input
document ``shuffled_order(i, N, seed)`` (a keyed bijection; the seed is recorded in the
manifest as ``shuffle_seed``). The input is first written to a corpus inside the private
folder and copied out in that order (twice the disk while writing, ``O(1)`` memory).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import numpy as np

from grainpack.corpus.errors import CorpusError
from grainpack.corpus.formats import open_corpus
from grainpack.corpus.native import (
    DTYPES,
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST_NAME,
    MAX_TOKEN_ID,
    PathLike,
    content_digest,
    plain_int,
)
from grainpack.corpus.source import TokenShardSource
from grainpack.corpus.summary import SUMMARY_BLOCK_DOCS, ShardSummary
from grainpack.corpus.urls import output_url, refuse_url_output
from grainpack.corpus.verify import verify_corpus
from grainpack.index.blocked import feistel, mix_key
from grainpack.index.checks import check_seed, is_int
from grainpack.index.options import OptionError
from grainpack.ingest.transaction import Transaction, check_target
from grainpack.ingest.upload import write_to_url

__all__ = ["CorpusWriter", "shuffle_corpus", "shuffled_order", "write_corpus"]

SHUFFLE_STREAM = 0x5AFF1E
SHUFFLE_STAGING = ".shuffle-input"  # inside the private folder: the input in input order


def shuffled_order(stored: Any, num_documents: int, seed: int) -> np.ndarray:
    """Input index of stored documents ``stored`` of a corpus written with ``shuffle=seed``.

    Example:
        >>> sorted(shuffled_order(np.arange(5), 5, seed=1).tolist())
        [0, 1, 2, 3, 4]
    """
    return feistel(np.asarray(stored), num_documents, mix_key(seed, SHUFFLE_STREAM))


def _check_options(
    dtype: Any, vocab_size: int | None, eos_id: int | None, shard_tokens: int
) -> np.dtype:
    if dtype is None:  # the smallest that holds the vocabulary
        large = is_int(vocab_size) and vocab_size > 1 << 16
        dtype = "uint32" if large else "uint16"
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = None
    if name not in DTYPES:
        raise OptionError("{dtype} must be 'uint16' or 'uint32', got {dtype=}", dtype=dtype)
    limit = min(int(np.iinfo(name).max), MAX_TOKEN_ID) + 1
    if vocab_size is not None and (not is_int(vocab_size) or not 0 < vocab_size <= limit):
        options: dict[str, Any] = {"vocab_size": vocab_size}
        if name == "uint16" and is_int(vocab_size) and vocab_size > limit:
            fix, options["dtype"] = "; use {dtype=}", "uint32"
        elif name == "uint32" and is_int(vocab_size) and vocab_size > limit:
            fix = " (batches hold int32 ids, so ids must be < 2**31)"
        else:
            fix = ""
        raise OptionError(
            f"{{vocab_size}} must be an int in [1, {limit}] for {name}, got {{vocab_size=}}{fix}",
            **options,
        )
    bound = limit if vocab_size is None else vocab_size
    if eos_id is not None and (not is_int(eos_id) or not 0 <= eos_id < bound):
        raise OptionError(
            f"{{eos_id}} must be an int in [0, {bound}) ({{dtype}}/{{vocab_size}}), "
            "got {eos_id=}",
            eos_id=eos_id,
            dtype=name,
            vocab_size=vocab_size,
        )
    if not is_int(shard_tokens) or shard_tokens < 1:
        raise OptionError(
            "{shard_tokens} must be a positive int, got {shard_tokens=}", shard_tokens=shard_tokens
        )
    return np.dtype(name).newbyteorder("<")


def _negative(index: int, value: Any, pos: int) -> ValueError:
    return ValueError(
        f"document {index}: token id {value} at position {pos} is negative; token ids must be "
        ">= 0 (check the tokenizer output)"
    )


def _check_document(tokens: Any, index: int, dmax: int, vocab_size: int | None) -> np.ndarray:
    """``tokens`` as a 1-D integer array whose ids are all in ``[0, dmax]`` and below
    ``vocab_size``, or raises naming the document, the id and the fix."""
    if isinstance(tokens, str | bytes):
        raise TypeError(
            f"document {index}: expected token ids, found text ({tokens[:40]!r}); tokenize it "
            "first: gp.build_corpus(files, out, tokenizer=...) or `grainpack build FILES "
            "--tokenizer SPEC -o OUT` build a corpus from text"
        )
    try:
        arr = tokens if isinstance(tokens, np.ndarray) else np.asarray(tokens)
    except (ValueError, OverflowError) as err:
        raise ValueError(f"document {index}: expected a 1-D sequence of token ids ({err})") from err
    if arr.ndim != 1:
        raise ValueError(
            f"document {index}: expected a 1-D sequence of token ids, found shape "
            f"{arr.shape}; give one document (a list or 1-D array of ids) at a time"
        )
    if arr.size == 0:
        return arr
    given = arr if arr.dtype == object or isinstance(tokens, np.ndarray) else tokens
    if arr.dtype.kind in "fO" and all(is_int(t) for t in given):  # ints no one dtype holds?
        pos = next((i for i, t in enumerate(given) if not 0 <= t <= dmax), None)
        if pos is None:  # an object array of ints that fit
            return _check_document(np.array(given, dtype=np.int64), index, dmax, vocab_size)
        if given[pos] < 0:
            raise _negative(index, given[pos], pos)
        raise ValueError(
            f"document {index}: token id {given[pos]} at position {pos} does not fit any token "
            f"dtype (max {dmax}); check the tokenizer output"
        )
    if arr.dtype.kind not in "iu":
        raise TypeError(
            f"document {index}: expected integer token ids, found dtype "
            f"{arr.dtype}; convert the ids to integers first"
        )
    if not isinstance(tokens, np.ndarray) and {bool, np.bool_} & set(map(type, tokens)):
        pos = next(i for i, t in enumerate(tokens) if isinstance(t, bool | np.bool_))
        raise TypeError(  # numpy made it 0 or 1
            f"document {index}: expected integer token ids, found {tokens[pos]!r} at position "
            f"{pos}; convert the ids to integers first"
        )
    if arr.dtype.kind == "i" and int(arr.min()) < 0:
        pos = int(np.argmax(arr < 0))
        raise _negative(index, arr[pos], pos)
    largest = (1 << (8 * arr.dtype.itemsize - (arr.dtype.kind == "i"))) - 1  # of arr's dtype
    if vocab_size is None and largest <= dmax:
        return arr  # every id fits: no scan
    high = int(arr.max())
    if vocab_size is not None and high >= vocab_size:  # the cause, also when the dtype is short
        pos = int(np.argmax(arr >= vocab_size))
        raise OptionError(
            f"document {index}: token id {arr[pos]} at position {pos} is >= "
            "{vocab_size=}; fix the ids or pass the right {vocab_size}",
            vocab_size=vocab_size,
        )
    if high > dmax:
        pos = int(np.argmax(arr > dmax))
        if dmax < MAX_TOKEN_ID and arr[pos] <= MAX_TOKEN_ID:
            where, fix = f"dtype='uint16' (max {dmax})", "use {dtype=}"
        elif dmax < MAX_TOKEN_ID:
            where, fix = f"dtype='uint16' (max {dmax}) nor the int32 batches", "ids must be < 2**31"
        else:
            where, fix = f"the int32 batch ids (max {dmax})", "ids must be < 2**31"
        raise OptionError(
            f"document {index}: token id {arr[pos]} at position {pos} does not fit {where}; {fix}",
            dtype="uint32",
        )
    return arr


# Tokens buffered per shard before one write: the digests, the offsets and the largest id are
# then computed per buffer, not per document (a document is often a few hundred tokens).
FLUSH_TOKENS = 1 << 18


class _Stream:
    """What the manifest records about the whole stream: ``content_sha256`` (see
    :mod:`grainpack.corpus.native`) and the largest id, fed buffer by buffer."""

    def __init__(self) -> None:
        self.tokens, self.offsets = hashlib.sha256(), hashlib.sha256(struct.pack("<q", 0))
        self.max_id = -1

    def update(self, tokens: np.ndarray, ends: np.ndarray) -> None:
        self.tokens.update(tokens.data)
        self.offsets.update(ends.data)
        if tokens.size:
            self.max_id = max(self.max_id, int(tokens.max()))


@contextlib.contextmanager
def _naming(file: BinaryIO) -> Iterator[None]:
    """Names ``file`` in an ``OSError`` raised inside (a full disk's names no file)."""
    try:
        yield
    except OSError as err:
        if err.filename is None:
            err.filename = file.name
        raise


class _ShardFiles:
    """One shard being written: token and offset files with running sha256 digests.

    Documents are copied into a buffer of ``FLUSH_TOKENS`` and written buffer by buffer (a
    copy: the caller may reuse its array); a longer document is written on its own.
    """

    def __init__(
        self,
        directory: Path,
        index: int,
        dtype: np.dtype,
        base: int,
        stream: _Stream,
        first_document: int,
    ) -> None:
        self.tokens_file, self.offsets_file = f"tokens-{index:05d}.bin", f"offsets-{index:05d}.bin"
        self.summary_file = f"summary-{index:05d}.bin"
        self.directory = directory
        self.paths = (directory / self.tokens_file, directory / self.offsets_file)
        self.summary = ShardSummary(first_document)
        self.tokens, self.offsets = open(self.paths[0], "wb"), open(self.paths[1], "wb")  # noqa: SIM115
        self.tokens_hash, self.offsets_hash = hashlib.sha256(), hashlib.sha256()
        self.base, self.stream = base, stream  # stream position of the shard's first token
        self.buffer, self.filled, self.ends = np.empty(FLUSH_TOKENS, dtype), 0, []
        self.num_tokens = self.num_documents = 0
        first = struct.pack("<q", 0)
        self.offsets.write(first)
        self.offsets_hash.update(first)

    def add(self, tokens: np.ndarray) -> None:
        n = tokens.size
        if self.filled + n > FLUSH_TOKENS:
            self.flush()
        self.summary.add(n)
        self.num_tokens += n
        self.num_documents += 1
        if n > FLUSH_TOKENS:
            self._write(np.ascontiguousarray(tokens, dtype=self.buffer.dtype), [self.num_tokens])
            return
        self.buffer[self.filled : self.filled + n] = tokens
        self.filled += n
        self.ends.append(self.num_tokens)

    def flush(self) -> None:
        if self.ends:
            self._write(self.buffer[: self.filled], self.ends)
            self.filled, self.ends = 0, []

    def _write(self, tokens: np.ndarray, ends: list[int]) -> None:
        offsets = np.array(ends, dtype="<i8")
        with _naming(self.tokens):
            self.tokens.write(tokens.data)
        self.tokens_hash.update(tokens.data)
        with _naming(self.offsets):
            self.offsets.write(offsets.data)
        self.offsets_hash.update(offsets.data)
        self.stream.update(tokens, offsets + self.base)

    def finish(self) -> dict[str, Any]:
        self.flush()
        summary = self.summary.to_bytes()
        with open(self.directory / self.summary_file, "wb") as f, _naming(f):
            f.write(summary)
            f.flush()
            os.fsync(f.fileno())
        for f in (self.tokens, self.offsets):
            with _naming(f):
                f.flush()
                os.fsync(f.fileno())
            f.close()
        return {
            "tokens_file": self.tokens_file,
            "offsets_file": self.offsets_file,
            "num_tokens": self.num_tokens,
            "num_documents": self.num_documents,
            "tokens_sha256": self.tokens_hash.hexdigest(),
            "offsets_sha256": self.offsets_hash.hexdigest(),
            "summary_file": self.summary_file,
            "summary_sha256": hashlib.sha256(summary).hexdigest(),
        }

    def close(self) -> None:
        """Closes the files being discarded; a full disk's error at the last flush is
        ignored, so that the caller's error and clean-up go on."""
        for f in (self.tokens, self.offsets):
            with contextlib.suppress(OSError):
                f.close()


# -- the transaction: lock, target, staging folder, publish ----------------------------------


class CorpusWriter:
    """Writes a native corpus document by document, as one transaction.

    Empty documents are stored (their offset repeats) so that document ids stay aligned with
    the input. A shard is closed when the next document would push it past ``shard_tokens`` and
    it already holds tokens (a longer document gets a shard of its own). Everything is written
    into a private folder next to ``path``; ``close()`` publishes it with one atomic rename
    (see :mod:`grainpack.ingest.writer`). If the ``with`` block raises, or the process dies,
    nothing at ``path`` changes.

    Args:
        path: Output directory: must not exist, or be empty, or hold a corpus (replaced only
            with ``overwrite=True``) or the leftovers of an interrupted write.
        dtype: ``"uint16"`` (ids < 65536) or ``"uint32"`` (ids < 2**31: batches hold int32);
            ``None`` (default): ``"uint32"`` if ``vocab_size`` exceeds 65536, else
            ``"uint16"``.
        vocab_size: If given, every id must be below it; stored in the manifest.
        eos_id: End-of-document id to record in the manifest (not inserted).
        shard_tokens: Token budget per shard file.
        overwrite: Replace a complete corpus at ``path``; it stays readable (and is what
            ``path`` holds) until the new one is complete.
        tokenizer: What made the ids (a JSON object, e.g. ``Tokenizer.identity()``): recorded
            in the manifest under ``"tokenizer"`` (omitted when ``None``).

    Raises:
        CorpusExistsError: ``path`` holds a corpus and ``overwrite`` is false, holds other
            files, or another write to it is in progress (a ``FileExistsError`` and a
            ``ValueError``).
        CorpusError: ``path`` cannot be written (a file in the way, permissions, a mount point).

    Example:
        >>> import tempfile
        >>> with CorpusWriter(tempfile.mkdtemp(), dtype="uint32", shard_tokens=4) as w:
        ...     w.add([70000, 1, 2]), w.add([]), w.add(np.array([3, 4]))
        (0, 1, 2)
    """

    def __init__(
        self,
        path: PathLike,
        *,
        dtype: str | None = None,
        vocab_size: int | None = None,
        eos_id: int | None = None,
        shard_tokens: int = 1 << 28,
        overwrite: bool = False,
        tokenizer: dict[str, Any] | None = None,
        shuffle: int | None = None,
    ) -> None:
        if tokenizer is not None and not isinstance(tokenizer, dict):
            raise TypeError(f"tokenizer must be a dict (JSON object) or None, got {tokenizer!r}")
        try:  # strict JSON: the manifest is read back with NaN and Infinity refused
            self.tokenizer = (
                None if tokenizer is None else json.loads(json.dumps(tokenizer, allow_nan=False))
            )
        except (TypeError, ValueError) as err:
            raise type(err)(
                f"tokenizer must be a JSON object (strings, finite numbers, bools, None, lists "
                f"and dicts of them): {err}; convert the values, e.g. to strings"
            ) from None
        vocab_size, eos_id, shard_tokens = (
            plain_int(vocab_size),
            plain_int(eos_id),
            plain_int(shard_tokens),
        )
        self._dtype = _check_options(dtype, vocab_size, eos_id, shard_tokens)
        shuffle = None if shuffle is None else check_seed("shuffle", plain_int(shuffle))
        refuse_url_output(path, "writing a corpus")
        self.path, self.vocab_size, self.eos_id = Path(path), vocab_size, eos_id
        self.shard_tokens, self.overwrite = shard_tokens, overwrite
        self._transaction = Transaction(self.path, overwrite=overwrite)
        try:  # (a Ctrl-C here: the caller never gets the writer to abort)
            self._staging = self._transaction.staging
            self._shards: list[dict[str, Any]] = []
            self._current: _ShardFiles | None = None
            self._num_documents = self._num_tokens = 0
            self._stream = _Stream()
            self._dmax = min(int(np.iinfo(self._dtype).max), MAX_TOKEN_ID)
            self._closed = False
            self.shuffle = shuffle  # checked before the transaction: nothing to undo
            self._input: CorpusWriter | None = None  # with shuffle: the input, in input order
            if self.shuffle is not None:
                self._input = CorpusWriter(
                    self._staging / SHUFFLE_STAGING,
                    dtype=self._dtype.name,
                    vocab_size=vocab_size,
                    eos_id=eos_id,
                    shard_tokens=shard_tokens,
                )
        except BaseException:
            self._transaction.abort()
            raise

    @property
    def num_documents(self) -> int:
        return self._num_documents

    @property
    def num_tokens(self) -> int:
        return self._num_tokens

    def add(self, tokens: Any) -> int:
        """Appends one document (a 1-D sequence of int ids) and returns its index."""
        if self._closed:
            raise ValueError(f"CorpusWriter for {self.path} is closed; open a new writer")
        if self._input is not None:
            return self._input.add(tokens)
        return self._append(tokens)

    def _append(self, tokens: Any) -> int:
        index = self._num_documents
        arr = _check_document(tokens, index, self._dmax, self.vocab_size)
        current = self._current
        try:
            full = current is not None and current.num_tokens + arr.size > self.shard_tokens
            if full and current.num_tokens:  # type: ignore[union-attr]
                self._shards.append(current.finish())  # type: ignore[union-attr]
                current = None
            if current is None:
                current = self._current = _ShardFiles(
                    self._staging,
                    len(self._shards),
                    self._dtype,
                    self._num_tokens,
                    self._stream,
                    index,
                )
            current.add(arr)
        except OSError as err:
            raise self._transaction.failed(err) from err
        self._num_documents += 1
        self._num_tokens += arr.size
        return index

    def close(self) -> None:
        """Finishes the last shard and the manifest, and publishes the corpus (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._finish()
        except BaseException as err:
            self._discard()
            if isinstance(err, OSError) and not isinstance(err, CorpusError):
                raise self._transaction.failed(err) from err
            raise
        try:
            self._transaction.publish()
        except KeyboardInterrupt:  # one as publish begins: it aborts (a no-op once published)
            self._transaction.abort()
            raise

    def _finish(self) -> None:
        if self._input is not None:
            self._input.close()
            self._copy_shuffled(open_corpus(self._input.path))
            shutil.rmtree(self._input.path)
        if self._current is not None:
            self._shards.append(self._current.finish())
            self._current = None
        manifest: dict[str, Any] = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "dtype": self._dtype.name,
            "vocab_size": self.vocab_size,
            "eos_id": self.eos_id,
            "num_documents": self._num_documents,
            "num_tokens": self._num_tokens,
            "summary_block_docs": SUMMARY_BLOCK_DOCS,
            "max_token_id": None if self._stream.max_id < 0 else self._stream.max_id,
            "content_sha256": content_digest(
                self._stream.tokens.hexdigest(), self._stream.offsets.hexdigest()
            ),
            "shards": self._shards,
        }
        if self.tokenizer is not None:
            manifest["tokenizer"] = self.tokenizer
        if self.shuffle is not None:
            manifest["shuffle_seed"] = self.shuffle
        self._transaction.write_manifest(manifest)

    def _copy_shuffled(self, source: TokenShardSource) -> None:
        """Appends the documents of ``source`` in the order of ``shuffle``."""
        n, seed = len(source), self.shuffle
        for lo in range(0, n, 1 << 16):
            for document in shuffled_order(np.arange(lo, min(lo + (1 << 16), n)), n, seed):
                self._append(source[int(document)])

    def abort(self) -> None:
        """Stops writing: removes what was written; nothing at ``path`` changes."""
        if self._closed:
            return
        self._closed = True
        self._discard()

    def _discard(self) -> None:
        """Closes the files being written and aborts the transaction (whatever fails)."""
        try:
            if self._input is not None:
                self._input.abort()
        finally:
            if self._current is not None:
                self._current.close()
                self._current = None
            self._transaction.abort()

    def __enter__(self) -> CorpusWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_corpus(
    path: PathLike,
    documents: Iterable[Any],
    *,
    dtype: str | None = None,
    vocab_size: int | None = None,
    eos_id: int | None = None,
    shard_tokens: int = 1 << 28,
    overwrite: bool = False,
    tokenizer: dict[str, Any] | None = None,
    shuffle: int | None = None,
) -> TokenShardSource:
    """Writes ``documents`` (each a 1-D sequence of ids) as a native corpus and opens it.

    With ``overwrite=True`` the documents may be read from the corpus being replaced: it
    stays in place until the new one is complete.

    Args:
        path: Output directory (as :class:`CorpusWriter`'s ``path``), or a bucket's URL
            (``s3://``, ``gs://``, ``az://``): staged locally, then published
            (:func:`~grainpack.ingest.upload.write_to_url`).
        documents: Iterable of 1-D integer sequences (lists, numpy arrays), one per document;
            empty ones are stored.
        dtype: ``"uint16"``, ``"uint32"`` or ``None`` (``"uint32"`` when ``vocab_size``
            exceeds 65536, else ``"uint16"``).
        vocab_size: If given, every id must be below it; stored in the manifest.
        eos_id: End-of-document id recorded in the manifest (not inserted).
        shard_tokens: Token budget per shard file.
        overwrite: Replace a complete corpus at ``path``.
        tokenizer: What made the ids (a JSON object), recorded in the manifest.
        shuffle: If given, the seed of a random order the documents are stored in (the
            manifest records it as ``"shuffle_seed"``).

    Returns:
        The written corpus, opened (:func:`open_corpus`).

    Example:
        >>> import tempfile
        >>> path = tempfile.mkdtemp()
        >>> src = write_corpus(path, [[5, 6], [7]], vocab_size=8, eos_id=7)
        >>> [d.tolist() for d in src], src.dtype.name, src.eos_id
        ([[5, 6], [7]], 'uint16', 7)
        >>> kept = write_corpus(path, (src[i] for i in [1]), overwrite=True)  # in place
        >>> [d.tolist() for d in kept]
        [[7]]
    """
    options = dict(dtype=dtype, vocab_size=vocab_size, eos_id=eos_id, shard_tokens=shard_tokens)
    options.update(overwrite=overwrite, tokenizer=tokenizer, shuffle=shuffle)
    if not isinstance(documents, Iterable) or isinstance(documents, (str, bytes)):
        raise TypeError(
            f"documents must be an iterable of documents (lists or 1-D arrays of token ids), "
            f"got {type(documents).__name__}; for one document pass [ids]"
        )
    if (url := output_url(path, "write_corpus")) is not None:  # staged here, then uploaded
        local = {**options, "overwrite": True}
        return write_to_url(
            url,
            lambda staged: write_corpus(staged, documents, **local),  # type: ignore[arg-type]
            overwrite=overwrite,
            what="write_corpus",
        )
    with CorpusWriter(path, **options) as writer:  # type: ignore[arg-type]
        for doc in documents:
            writer.add(doc)
    return open_corpus(path)


def open_to_copy(
    source: PathLike,
    out: PathLike,
    *,
    overwrite: bool,
    eos_id: int | None = None,
    verify: bool = True,
    progress: bool = False,
) -> TokenShardSource:
    """The corpus at ``source``, opened to be copied to ``out``: ``out`` is checked first, as
    publishing the copy would check it, and a native source is verified (unless ``verify``
    is false): the copy gets new checksums, which must not bless flipped bytes."""
    check_target(out, overwrite=overwrite)  # before the work
    if verify and (Path(source) / MANIFEST_NAME).is_file():
        verify_corpus(source, progress=progress)
    return open_corpus(source, eos_id=eos_id)


def copy_dtype(src: TokenShardSource) -> str:
    """The native dtype a copy of ``src`` is written in by default: ``uint16`` for 1- and
    2-byte tokens (Megatron's small dtypes included), else ``uint32``."""
    return "uint16" if src.dtype.itemsize <= 2 else "uint32"


def shuffle_corpus(
    source: PathLike,
    path: PathLike,
    *,
    seed: int,
    shard_tokens: int = 1 << 28,
    overwrite: bool = False,
    verify: bool = True,
) -> TokenShardSource:
    """Copies the corpus at ``source`` (any format :func:`open_corpus` reads) to a native
    corpus at ``path`` whose documents are stored in the random order of ``seed``. A native
    source is verified first (:func:`~grainpack.corpus.verify_corpus`; ``verify=False``
    skips it, for a corpus just written): the copy gets new checksums, which must not bless
    flipped bytes.

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> _ = write_corpus(f"{d}/a", [[1], [2], [3]])
        >>> [x.tolist() for x in shuffle_corpus(f"{d}/a", f"{d}/b", seed=0)]
        [[2], [1], [3]]
    """
    seed = check_seed("seed", plain_int(seed))
    src = open_to_copy(source, path, overwrite=overwrite, verify=verify)
    with CorpusWriter(
        path,
        dtype=copy_dtype(src),
        vocab_size=src.vocab_size,
        eos_id=src.eos_id,
        shard_tokens=shard_tokens,
        overwrite=overwrite,
        tokenizer=src.tokenizer,
    ) as writer:
        writer.shuffle = seed
        writer._copy_shuffled(src)
    return open_corpus(path)
