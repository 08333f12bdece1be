"""``CorpusWriter``/``write_corpus``: the native format's writer (see :mod:`grainpack.corpus`).

Shards are written under their final names and the manifest last, atomically (temp name,
fsync, rename, directory fsync): a directory whose writing was interrupted never opens as a
complete corpus, and rerunning the build replaces its leftovers.

With ``shuffle=seed`` documents are stored in a seeded random order, so storage order
carries no clustering into the blocks of the blocked order: stored document ``i`` is input
document ``shuffled_order(i, N, seed)`` (a keyed bijection; the seed is recorded in the
manifest as ``shuffle_seed``). The input is staged in ``.shuffle-staging/`` inside the
output directory and copied out in that order (twice the disk while writing, ``O(1)``
memory).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from grainpack.checks import check_int, is_int
from grainpack.corpus.errors import CorpusExistsError
from grainpack.corpus.formats import open_corpus
from grainpack.corpus.native import (
    DTYPES,
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST_NAME,
    SHARD_FILE,
    PathLike,
    plain_int,
)
from grainpack.corpus.source import TokenShardSource
from grainpack.corpus.summary import SUMMARY_BLOCK_DOCS, ShardSummary
from grainpack.index.blocked import feistel, mix_key

__all__ = ["CorpusWriter", "shuffle_corpus", "shuffled_order", "write_corpus"]

SHUFFLE_STREAM = 0x5AFF1E
STAGING = ".shuffle-staging"


def shuffled_order(stored: Any, num_documents: int, seed: int) -> np.ndarray:
    """Input index of stored documents ``stored`` of a corpus written with ``shuffle=seed``.

    Example:
        >>> sorted(shuffled_order(np.arange(5), 5, seed=1).tolist())
        [0, 1, 2, 3, 4]
    """
    return feistel(np.asarray(stored), num_documents, mix_key(seed, SHUFFLE_STREAM))


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _check_options(
    dtype: Any, vocab_size: int | None, eos_id: int | None, shard_tokens: int
) -> np.dtype:
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = None
    if name not in DTYPES:
        raise ValueError(f"dtype must be 'uint16' or 'uint32', got {dtype=}")
    limit = int(np.iinfo(name).max) + 1
    if vocab_size is not None and (not is_int(vocab_size) or not 0 < vocab_size <= limit):
        fix = "; use dtype='uint32'" if name == "uint16" and is_int(vocab_size) else ""
        raise ValueError(
            f"vocab_size must be an int in [1, {limit}] for {name}, got {vocab_size=}{fix}"
        )
    bound = limit if vocab_size is None else vocab_size
    if eos_id is not None and (not is_int(eos_id) or not 0 <= eos_id < bound):
        raise ValueError(f"eos_id must be an int in [0, {bound}) (dtype/vocab_size), got {eos_id=}")
    if not is_int(shard_tokens) or shard_tokens < 1:
        raise ValueError(f"shard_tokens must be a positive int, got {shard_tokens=}")
    return np.dtype(name).newbyteorder("<")


def _check_document(tokens: Any, index: int, dtype: np.dtype, vocab_size: int | None) -> np.ndarray:
    """Returns ``tokens`` as a contiguous little-endian array of ``dtype``, or raises."""
    try:
        arr = tokens if isinstance(tokens, np.ndarray) else np.asarray(tokens)
    except (ValueError, OverflowError) as err:
        raise ValueError(f"document {index}: expected a 1-D sequence of token ids ({err})") from err
    if arr.ndim != 1:
        raise ValueError(
            f"document {index}: expected a 1-D sequence of token ids, found shape "
            f"{arr.shape}; add one document per add() call"
        )
    if arr.size == 0:
        return np.empty(0, dtype)
    if arr.dtype.kind not in "iu":
        raise TypeError(
            f"document {index}: expected integer token ids, found dtype "
            f"{arr.dtype}; convert the ids to integers first"
        )
    dmax = int(np.iinfo(dtype).max)
    needs_max = vocab_size is not None or np.iinfo(arr.dtype).max > dmax
    if arr.dtype.kind == "i" and int(arr.min()) < 0:
        pos = int(np.argmax(arr < 0))
        raise ValueError(
            f"document {index}: token id {arr[pos]} at position {pos} is negative; "
            "token ids must be >= 0 (check the tokenizer output)"
        )
    if needs_max:
        high = int(arr.max())
        if high > dmax:
            pos = int(np.argmax(arr > dmax))
            fix = "use dtype='uint32'" if dtype.itemsize == 2 else "ids must be < 2**32"
            raise ValueError(
                f"document {index}: token id {arr[pos]} at position {pos} does not fit "
                f"dtype='{dtype.name}' (max {dmax}); {fix}"
            )
        if vocab_size is not None and high >= vocab_size:
            pos = int(np.argmax(arr >= vocab_size))
            raise ValueError(
                f"document {index}: token id {arr[pos]} at position {pos} is >= "
                f"{vocab_size=}; fix the ids or pass the right vocab_size"
            )
    return np.ascontiguousarray(arr, dtype=dtype)


class _ShardFiles:
    """One shard being written: token and offset files with running sha256 digests."""

    def __init__(self, directory: Path, index: int, first_document: int) -> None:
        self.tokens_file, self.offsets_file = f"tokens-{index:05d}.bin", f"offsets-{index:05d}.bin"
        self.summary_file = f"summary-{index:05d}.bin"
        self.paths = (directory / self.tokens_file, directory / self.offsets_file)
        self.summary = ShardSummary(first_document)
        self.tokens, self.offsets = open(self.paths[0], "wb"), open(self.paths[1], "wb")  # noqa: SIM115
        self.tokens_hash, self.offsets_hash = hashlib.sha256(), hashlib.sha256()
        self.num_tokens = self.num_documents = 0
        self._write_offset(0)

    def _write_offset(self, value: int) -> None:
        packed = struct.pack("<q", value)
        self.offsets.write(packed)
        self.offsets_hash.update(packed)

    def add(self, tokens: np.ndarray) -> None:
        if tokens.size:
            self.tokens.write(tokens.data)
            self.tokens_hash.update(tokens.data)
        self.num_tokens += tokens.size
        self.num_documents += 1
        self.summary.add(tokens.size)
        self._write_offset(self.num_tokens)

    def finish(self) -> dict[str, Any]:
        summary = self.summary.to_bytes()
        with open(self.paths[0].parent / self.summary_file, "wb") as f:
            f.write(summary)
            f.flush()
            os.fsync(f.fileno())
        for f in (self.tokens, self.offsets):
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

    def abort(self) -> None:
        for f, path in zip((self.tokens, self.offsets), self.paths, strict=True):
            f.close()
            path.unlink(missing_ok=True)
        (self.paths[0].parent / self.summary_file).unlink(missing_ok=True)


class CorpusWriter:
    """Writes a native corpus document by document; the manifest appears only on success.

    Empty documents are stored (their offset repeats) so that document ids stay aligned with
    the input. A shard is closed when the next document would push it past ``shard_tokens`` and
    it already holds tokens (a longer document gets a shard of its own). If the ``with`` block
    raises, no manifest is written and the shard files written so far are removed.

    Args:
        path: Output directory (created if needed).
        dtype: ``"uint16"`` (ids < 65536) or ``"uint32"``.
        vocab_size: If given, every id must be below it; stored in the manifest.
        eos_id: End-of-document id to record in the manifest (not inserted).
        shard_tokens: Token budget per shard file.
        overwrite: Replace a complete corpus at ``path``; its manifest is removed first, so a
            crash mid-overwrite leaves a directory that does not open.
        shuffle: Store the documents in the random order of this seed (see the module
            docstring); ``add`` still returns input indices.

    Raises:
        CorpusExistsError: ``path`` holds a corpus and ``overwrite`` is false (a
            ``FileExistsError`` and a ``ValueError``).

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
        dtype: str = "uint16",
        vocab_size: int | None = None,
        eos_id: int | None = None,
        shard_tokens: int = 1 << 28,
        overwrite: bool = False,
        shuffle: int | None = None,
    ) -> None:
        vocab_size, eos_id, shard_tokens = (
            plain_int(vocab_size),
            plain_int(eos_id),
            plain_int(shard_tokens),
        )
        self._dtype = _check_options(dtype, vocab_size, eos_id, shard_tokens)
        self.path, self.vocab_size, self.eos_id = Path(path), vocab_size, eos_id
        self.shard_tokens = shard_tokens
        self._prepare_directory(overwrite)
        self._shards: list[dict[str, Any]] = []
        self._current: _ShardFiles | None = None
        self._num_documents = self._num_tokens = 0
        self._closed = False
        self.shuffle = None if shuffle is None else check_int("shuffle", plain_int(shuffle))
        self._staging: CorpusWriter | None = None
        if self.shuffle is not None:
            options = dict(dtype=self._dtype.name, vocab_size=vocab_size, eos_id=eos_id)
            self._staging = CorpusWriter(
                self.path / STAGING, shard_tokens=shard_tokens, overwrite=True, **options
            )

    def _prepare_directory(self, overwrite: bool) -> None:
        p = self.path
        if p.exists() and not p.is_dir():
            raise CorpusExistsError(
                f"{p} exists and is not a directory; choose another output path"
            )
        if (p / "index.json").exists():
            raise CorpusExistsError(f"{p} holds a seed-layout corpus (index.json); write elsewhere")
        p.mkdir(parents=True, exist_ok=True)
        if (p / MANIFEST_NAME).exists():
            if not overwrite:
                raise CorpusExistsError(
                    f"{p} already holds a corpus ({MANIFEST_NAME} present); "
                    "pass overwrite=True to replace it"
                )
            (p / MANIFEST_NAME).unlink()  # first: from here on the directory does not open
            _fsync_dir(p)
        for stale in p.iterdir():  # shard files of a replaced or interrupted corpus
            if SHARD_FILE.fullmatch(stale.name) or stale.name.startswith(f".{MANIFEST_NAME}."):
                stale.unlink()

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
        if self._staging is not None:
            return self._staging.add(tokens)
        return self._append(tokens)

    def _append(self, tokens: Any) -> int:
        index = self._num_documents
        arr = _check_document(tokens, index, self._dtype, self.vocab_size)
        current = self._current
        if (
            current is not None
            and current.num_tokens
            and (current.num_tokens + arr.size > self.shard_tokens)
        ):
            self._shards.append(current.finish())
            current = None
        if current is None:
            current = self._current = _ShardFiles(self.path, len(self._shards), index)
        current.add(arr)
        self._num_documents += 1
        self._num_tokens += arr.size
        return index

    def close(self) -> None:
        """Finishes the last shard and writes the manifest atomically (idempotent)."""
        if self._closed:
            return
        if self._staging is not None:
            self._staging.close()
            self._copy_shuffled(open_corpus(self._staging.path))
            shutil.rmtree(self._staging.path)
        self._closed = True
        if self._current is not None:
            self._shards.append(self._current.finish())
            self._current = None
        manifest = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "dtype": self._dtype.name,
            "vocab_size": self.vocab_size,
            "eos_id": self.eos_id,
            "num_documents": self._num_documents,
            "num_tokens": self._num_tokens,
            "summary_block_docs": SUMMARY_BLOCK_DOCS,
            "shards": self._shards,
        } | ({} if self.shuffle is None else {"shuffle_seed": self.shuffle})
        tmp = self.path / f".{MANIFEST_NAME}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(manifest, f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path / MANIFEST_NAME)
        _fsync_dir(self.path)

    def _copy_shuffled(self, source: TokenShardSource) -> None:
        """Appends the documents of ``source`` in the order of ``shuffle``."""
        n = len(source)
        for lo in range(0, n, 1 << 16):
            for document in shuffled_order(np.arange(lo, min(lo + (1 << 16), n)), n, self.shuffle):
                self._append(source[int(document)])

    def abort(self) -> None:
        """Stops writing without a manifest and removes the shard files written so far."""
        if self._closed:
            return
        if self._staging is not None:
            self._staging.abort()
            shutil.rmtree(self._staging.path, ignore_errors=True)
        self._closed = True
        if self._current is not None:
            self._current.abort()
            self._current = None
        for shard in self._shards:
            for key in ("tokens_file", "offsets_file", "summary_file"):
                (self.path / shard[key]).unlink(missing_ok=True)

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
    dtype: str = "uint16",
    vocab_size: int | None = None,
    eos_id: int | None = None,
    shard_tokens: int = 1 << 28,
    overwrite: bool = False,
    shuffle: int | None = None,
) -> TokenShardSource:
    """Writes ``documents`` (each a 1-D sequence of ids) as a native corpus and opens it.

    Options are those of :class:`CorpusWriter`.

    Example:
        >>> import tempfile
        >>> src = write_corpus(tempfile.mkdtemp(), [[5, 6], [7]], vocab_size=8, eos_id=7)
        >>> [d.tolist() for d in src], src.dtype.name, src.eos_id
        ([[5, 6], [7]], 'uint16', 7)
    """
    options = dict(dtype=dtype, vocab_size=vocab_size, eos_id=eos_id, shard_tokens=shard_tokens)
    with CorpusWriter(path, overwrite=overwrite, shuffle=shuffle, **options) as writer:  # type: ignore[arg-type]
        for doc in documents:
            writer.add(doc)
    return open_corpus(path)


def shuffle_corpus(
    source: PathLike,
    path: PathLike,
    *,
    seed: int,
    shard_tokens: int = 1 << 28,
    overwrite: bool = False,
) -> TokenShardSource:
    """Copies the corpus at ``source`` (any format :func:`open_corpus` reads) to a native
    corpus at ``path`` whose documents are stored in the random order of ``seed``.

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> _ = write_corpus(f"{d}/a", [[1], [2], [3]])
        >>> [x.tolist() for x in shuffle_corpus(f"{d}/a", f"{d}/b", seed=0)]
        [[2], [1], [3]]
    """
    src = open_corpus(source)
    with CorpusWriter(
        path,
        dtype=src.dtype.name if src.dtype.name in DTYPES else "uint32",
        vocab_size=src.vocab_size,
        eos_id=src.eos_id,
        shard_tokens=shard_tokens,
        overwrite=overwrite,
    ) as writer:
        writer.shuffle = check_int("seed", seed)
        writer._copy_shuffled(src)
    return open_corpus(path)
