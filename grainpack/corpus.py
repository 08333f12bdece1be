"""The native on-disk corpus format, its writer, and readers for native/seed/Megatron corpora.

Invariant: a directory is a complete corpus iff ``manifest.json`` exists; it is written last.

Native format (version 1), one directory::

    manifest.json        {"format": "grainpack", "version": 1, "dtype": "uint16"|"uint32",
                          "vocab_size": int|null, "eos_id": int|null, "num_documents": int,
                          "num_tokens": int, "shards": [{"tokens_file", "offsets_file",
                          "num_tokens", "num_documents", "tokens_sha256", "offsets_sha256"}]}
    tokens-00000.bin     raw little-endian token ids of shard 0, documents back to back
    offsets-00000.bin    raw little-endian int64, num_documents + 1 shard-local offsets:
                         first 0, last = the shard's num_tokens; document j of the shard is
                         tokens[offsets[j]:offsets[j + 1]]

Read back with ``np.memmap(dir / "tokens-00000.bin", dtype="<u2", mode="r")``. Documents never
span shards; empty documents are stored (a repeated offset) so document ids match the input.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from grainpack.formats import open_megatron, open_seed_layout
from grainpack.source import CorpusError, ShardRecord, TokenShardSource

__all__ = [
    "MANIFEST_NAME",
    "CorpusError",
    "CorpusWriter",
    "fingerprint",
    "open_corpus",
    "read_manifest",
    "write_corpus",
]

MANIFEST_NAME = "manifest.json"
FORMAT_NAME = "grainpack"
FORMAT_VERSION = 1
DTYPES = ("uint16", "uint32")
_SHARD_FILE = re.compile(r"(tokens|offsets)-\d{5,}\.bin")

PathLike = str | os.PathLike[str]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _plain(value: Any) -> Any:
    """NumPy integer scalars become Python ints (JSON-able); anything else is returned as is."""
    return int(value) if isinstance(value, np.integer) else value


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
    if vocab_size is not None and (not _is_int(vocab_size) or not 0 < vocab_size <= limit):
        fix = "; use dtype='uint32'" if name == "uint16" and _is_int(vocab_size) else ""
        raise ValueError(
            f"vocab_size must be an int in [1, {limit}] for {name}, got {vocab_size=}{fix}"
        )
    bound = limit if vocab_size is None else vocab_size
    if eos_id is not None and (not _is_int(eos_id) or not 0 <= eos_id < bound):
        raise ValueError(f"eos_id must be an int in [0, {bound}) (dtype/vocab_size), got {eos_id=}")
    if not _is_int(shard_tokens) or shard_tokens < 1:
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

    def __init__(self, directory: Path, index: int) -> None:
        self.tokens_file, self.offsets_file = f"tokens-{index:05d}.bin", f"offsets-{index:05d}.bin"
        self.paths = (directory / self.tokens_file, directory / self.offsets_file)
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
        self._write_offset(self.num_tokens)

    def finish(self) -> dict[str, Any]:
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
        }

    def abort(self) -> None:
        for f, path in zip((self.tokens, self.offsets), self.paths, strict=True):
            f.close()
            path.unlink(missing_ok=True)


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

    Raises:
        FileExistsError: ``path`` holds a corpus and ``overwrite`` is false.

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
    ) -> None:
        vocab_size, eos_id, shard_tokens = _plain(vocab_size), _plain(eos_id), _plain(shard_tokens)
        self._dtype = _check_options(dtype, vocab_size, eos_id, shard_tokens)
        self.path, self.vocab_size, self.eos_id = Path(path), vocab_size, eos_id
        self.shard_tokens = shard_tokens
        self._prepare_directory(overwrite)
        self._shards: list[dict[str, Any]] = []
        self._current: _ShardFiles | None = None
        self._num_documents = self._num_tokens = 0
        self._closed = False

    def _prepare_directory(self, overwrite: bool) -> None:
        p = self.path
        if p.exists() and not p.is_dir():
            raise FileExistsError(f"{p} exists and is not a directory; choose another output path")
        if (p / "index.json").exists():
            raise FileExistsError(f"{p} holds a seed-layout corpus (index.json); write elsewhere")
        p.mkdir(parents=True, exist_ok=True)
        if (p / MANIFEST_NAME).exists():
            if not overwrite:
                raise FileExistsError(
                    f"{p} already holds a corpus ({MANIFEST_NAME} present); "
                    "pass overwrite=True to replace it"
                )
            (p / MANIFEST_NAME).unlink()  # first: from here on the directory does not open
            _fsync_dir(p)
        for stale in p.iterdir():  # shard files of a replaced or interrupted corpus
            if _SHARD_FILE.fullmatch(stale.name) or stale.name.startswith(f".{MANIFEST_NAME}."):
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
            current = self._current = _ShardFiles(self.path, len(self._shards))
        current.add(arr)
        self._num_documents += 1
        self._num_tokens += arr.size
        return index

    def close(self) -> None:
        """Finishes the last shard and writes the manifest atomically (idempotent)."""
        if self._closed:
            return
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
            "shards": self._shards,
        }
        tmp = self.path / f".{MANIFEST_NAME}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(manifest, f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path / MANIFEST_NAME)
        _fsync_dir(self.path)

    def abort(self) -> None:
        """Stops writing without a manifest and removes the shard files written so far."""
        if self._closed:
            return
        self._closed = True
        if self._current is not None:
            self._current.abort()
            self._current = None
        for shard in self._shards:
            for key in ("tokens_file", "offsets_file"):
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
    with CorpusWriter(path, overwrite=overwrite, **options) as writer:  # type: ignore[arg-type]
        for doc in documents:
            writer.add(doc)
    return open_corpus(path)


def read_manifest(path: PathLike) -> dict[str, Any]:
    """Loads and schema-checks ``path/manifest.json``; raises :class:`CorpusError` if invalid."""
    file = Path(path) / MANIFEST_NAME
    try:
        m = json.loads(file.read_bytes())
    except FileNotFoundError as err:
        raise CorpusError(_not_a_corpus(Path(path))) from err
    except json.JSONDecodeError as err:
        raise CorpusError(f"{file}: not valid JSON ({err}); rebuild the corpus") from err
    problems = []
    if not isinstance(m, dict) or m.get("format") != FORMAT_NAME:
        raise CorpusError(f"{file}: expected a JSON object with format='grainpack'")
    if m.get("version") != FORMAT_VERSION:
        problems.append(f"version={m.get('version')!r} (this grainpack reads {FORMAT_VERSION})")
    if m.get("dtype") not in DTYPES:
        problems.append(f"dtype={m.get('dtype')!r} (expected 'uint16' or 'uint32')")
    for key in ("vocab_size", "eos_id"):
        if key not in m or not (m[key] is None or (_is_int(m[key]) and m[key] >= 0)):
            problems.append(
                f"{key}={m.get(key, '<missing>')!r} (expected a non-negative int or null)"
            )
    shards = m.get("shards")
    if not isinstance(shards, list):
        problems.append(f"shards={shards!r} (expected a list)")
        shards = []
    totals = {"num_tokens": 0, "num_documents": 0}
    for i, s in enumerate(shards):
        if not isinstance(s, dict):
            problems.append(f"shards[{i}] is {type(s).__name__} (expected an object)")
            continue
        for key in ("tokens_file", "offsets_file"):
            name = s.get(key)
            if not isinstance(name, str) or not name or Path(name).name != name or name[0] == ".":
                problems.append(f"shards[{i}].{key}={name!r} (expected a plain file name)")
        for key in totals:
            if _is_int(s.get(key)) and s[key] >= 0:
                totals[key] += s[key]
            else:
                problems.append(f"shards[{i}].{key}={s.get(key)!r} (expected an int >= 0)")
        for key in ("tokens_sha256", "offsets_sha256"):
            if not (isinstance(s.get(key), str) and re.fullmatch(r"[0-9a-f]{64}", s[key])):
                problems.append(f"shards[{i}].{key}={s.get(key)!r} (expected 64 hex digits)")
    for key, total in totals.items():
        if m.get(key) != total:
            problems.append(f"{key}={m.get(key)!r} (the shards sum to {total})")
    if problems:
        raise CorpusError(f"{file}: invalid manifest: " + "; ".join(problems))
    return m


def _not_a_corpus(path: Path) -> str:
    hint = ""
    if path.is_dir() and any(_SHARD_FILE.fullmatch(p.name) for p in path.iterdir()):
        hint = " It holds shard files but no manifest: the write was interrupted; rewrite it."
    return (
        f"{path} is not a corpus: expected a directory with {MANIFEST_NAME} (grainpack) or "
        f"index.json (seed layout), or a Megatron prefix with PREFIX.bin and PREFIX.idx.{hint}"
    )


def _check_size(file: Path, expected: int, what: str, tokens: int | None = None) -> None:
    try:
        size = file.stat().st_size
    except FileNotFoundError as err:
        raise CorpusError(f"{file}: missing ({what}); the corpus is incomplete") from err
    if size == expected:
        return
    held = [d for d in DTYPES if tokens and size == tokens * np.dtype(d).itemsize]
    if held:
        raise CorpusError(
            f"{file}: has {size} bytes = {tokens} {held[0]} tokens, but the manifest says "
            f"{what}: the manifest's dtype is wrong; set it to {held[0]!r} or rebuild"
        )
    raise CorpusError(
        f"{file}: has {size} bytes, expected {expected} ({what}); the file is "
        "truncated or corrupt; rebuild the corpus"
    )


def _open_native(path: Path, eos_id: int | None) -> TokenShardSource:
    m = read_manifest(path)
    itemsize = np.dtype(m["dtype"]).itemsize
    records = []
    for s in m["shards"]:
        tokens, offsets = path / s["tokens_file"], path / s["offsets_file"]
        _check_size(
            tokens,
            s["num_tokens"] * itemsize,
            f"{s['num_tokens']} {m['dtype']} tokens",
            tokens=s["num_tokens"],
        )
        _check_size(offsets, (s["num_documents"] + 1) * 8, f"{s['num_documents'] + 1} offsets")
        records.append(
            ShardRecord(
                str(tokens),
                s["num_tokens"],
                offsets_kind="file",
                offsets_path=str(offsets),
                num_documents=s["num_documents"],
            )
        )
    if eos_id is not None and m["eos_id"] is not None and eos_id != m["eos_id"]:
        raise ValueError(f"{path} records eos_id={m['eos_id']}, got {eos_id=}; omit eos_id")
    canonical = json.dumps(m, sort_keys=True, separators=(",", ":")).encode()
    return TokenShardSource(
        records,
        dtype=m["dtype"],
        fingerprint=hashlib.sha256(canonical).hexdigest(),
        vocab_size=m["vocab_size"],
        eos_id=m["eos_id"] if eos_id is None else eos_id,
    )


def open_corpus(path: PathLike, *, eos_id: int | None = None) -> TokenShardSource:
    """Opens a native corpus, a seed-layout directory or a Megatron ``.bin``/``.idx`` prefix.

    Args:
        path: A directory with ``manifest.json`` (native) or ``index.json`` (seed layout:
            shard file name -> uint16 token count), or a Megatron ``PREFIX`` (also accepted:
            ``PREFIX.bin`` / ``PREFIX.idx``).
        eos_id: Seed layout: split each shard after every ``eos_id`` (a document ends with its
            eos; tokens after the last eos form a final document); without it each non-empty
            shard is one document. Native/Megatron: recorded on the source only (a native
            corpus's own ``eos_id`` must agree).

    Raises:
        FileNotFoundError: Nothing exists at ``path``.
        CorpusError: (a ``ValueError``) ``path`` is not a corpus, or is malformed/incomplete.

    Example:
        >>> import tempfile
        >>> path = tempfile.mkdtemp()
        >>> _ = write_corpus(path, [[1], [2, 3]])
        >>> src = open_corpus(path)
        >>> len(src), src.num_tokens, src[1].tolist()
        (2, 3, [2, 3])
    """
    eos_id = _plain(eos_id)
    if eos_id is not None and (not _is_int(eos_id) or eos_id < 0):
        raise ValueError(f"eos_id must be a non-negative int or None, got {eos_id=}")
    p = Path(path)
    if p.is_dir():
        if (p / MANIFEST_NAME).is_file():
            return _open_native(p, eos_id)
        if (p / "index.json").is_file():
            return open_seed_layout(p, eos_id=eos_id)
        raise CorpusError(_not_a_corpus(p))
    prefix = p.with_suffix("") if p.suffix in (".bin", ".idx") else p
    if Path(f"{prefix}.idx").exists() or Path(f"{prefix}.bin").exists():
        return open_megatron(prefix, eos_id=eos_id)
    if not p.exists():
        raise FileNotFoundError(_not_a_corpus(p).replace("is not a corpus", "does not exist"))
    raise CorpusError(_not_a_corpus(p))


def fingerprint(path: PathLike, *, eos_id: int | None = None) -> str:
    """Content-derived hex digest of the corpus at ``path`` (see :func:`open_corpus`).

    Native: sha256 of the canonical manifest JSON (which holds every file's sha256). Seed layout:
    sha256 over index.json, ``eos_id`` and the shard file sizes. Megatron: sha256 over the
    ``.idx`` bytes and the ``.bin`` size.
    """
    return open_corpus(path, eos_id=eos_id).fingerprint
