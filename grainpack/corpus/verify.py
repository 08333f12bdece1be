"""Deep corpus checks (``grainpack verify``) and corpus statistics (``grainpack inspect``).

Invariant: :func:`verify_corpus` either returns a report or raises :class:`CorpusError` whose
message names the file and the first problem found.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import tqdm

from grainpack.corpus.errors import CorpusError, os_error
from grainpack.corpus.formats import open_corpus
from grainpack.corpus.native import MANIFEST_NAME, check_inside, content_digest, read_manifest
from grainpack.corpus.shards import check_offsets
from grainpack.corpus.source import TokenShardSource
from grainpack.corpus.summary import shard_totals
from grainpack.corpus.urls import is_url, local_path
from grainpack.index.checks import is_int

__all__ = ["CorpusError", "VerifyReport", "describe_corpus", "verify_corpus"]

# Tokens per scan step: 16M tokens = 32-64 MB of memory whatever the corpus size.
CHUNK_TOKENS = 1 << 24
# The most a caller may ask for: 2^30 tokens = 2-4 GiB read at once (and as much again for
# the comparisons with vocab_size); more is a typo (10**18 raised a MemoryError).
MAX_CHUNK_TOKENS = 1 << 30


@dataclasses.dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify_corpus` checked and found.

    Attributes:
        path: The corpus path as given.
        kind: ``"grainpack"``, ``"flat-shard"`` or ``"megatron"``.
        num_documents, num_tokens, num_shards: Sizes.
        dtype: Token dtype name.
        vocab_size: Vocabulary size if recorded (then every id was checked against it).
        max_token_id: Largest token id (``None`` for an empty corpus).
        fingerprint: The source's fingerprint.
        checks: Human-readable names of the checks that passed.

    Example:
        >>> import tempfile, grainpack as gp
        >>> path = tempfile.mkdtemp()
        >>> _ = gp.write_corpus(path, [[1, 2, 3], [4, 5]], vocab_size=10)
        >>> report = gp.verify_corpus(path)
        >>> report.kind, report.num_documents, report.max_token_id
        ('grainpack', 2, 5)
    """

    path: str
    kind: str
    num_documents: int
    num_tokens: int
    num_shards: int
    dtype: str
    vocab_size: int | None
    max_token_id: int | None
    fingerprint: str
    checks: tuple[str, ...]


def _check_eos(source: TokenShardSource, where: str) -> None:
    """The recorded (or given) ``eos_id`` must be an id the corpus can hold."""
    bound = int(np.iinfo(source.dtype).max) + 1
    if source.vocab_size is not None:
        bound = min(bound, source.vocab_size)
    if not 0 <= source.eos_id < bound:  # type: ignore[operator]
        raise CorpusError(
            f"{where}: eos_id={source.eos_id} is not a token id of this corpus (must be < "
            f"{bound}: dtype {source.dtype.name}"
            f"{f', vocab_size={source.vocab_size}' if source.vocab_size is not None else ''}); "
            "record the tokenizer's end-of-text id"
        )


def _kind(path: Path) -> str:
    if path.is_dir():
        return "grainpack" if (path / MANIFEST_NAME).is_file() else "flat-shard"
    return "megatron"


def _scan_ids(tokens: np.ndarray, position: int, vocab_size: int | None, where: str) -> int:
    """The max of a non-empty chunk; raises if an id is >= vocab_size (reads refuse the
    negative ids of a signed file themselves)."""
    high = int(tokens.max())
    if vocab_size is not None and high >= vocab_size:
        i = int(np.argmax(tokens >= vocab_size))
        raise CorpusError(
            f"{where}: token id {tokens[i]} at stream position {position + i} is "
            f">= vocab_size={vocab_size}; rebuild the corpus with correct ids"
        )
    return high


def _mismatch(file: Path | str, what: str) -> CorpusError:
    return CorpusError(
        f"{file}: {what} mismatch with {MANIFEST_NAME}: the file changed after writing "
        "(corrupt); rebuild the corpus"
    )


def _checked_bytes(file: Path, sha256: str) -> bytes:
    """The bytes of ``file``, after checking them against the manifest's ``sha256``."""
    check_inside(file.parent, file)  # as when it was opened: no link out of the folder
    try:
        data = file.read_bytes()
    except OSError as err:
        raise os_error(err, "verifying") from err
    if hashlib.sha256(data).hexdigest() != sha256:
        raise _mismatch(file, "sha256")
    return data


def _verify_native_files(path: Path, bar: tqdm.tqdm, chunk_tokens: int) -> tuple[int | None, list]:
    """Checksums, offsets and ids of every shard file, and the manifest's ``content_sha256``
    and ``max_token_id`` when it records them; returns the max token id and the checks."""
    m = read_manifest(path)
    dtype = np.dtype(m["dtype"]).newbyteorder("<")
    high: int | None = None
    position = documents = 0
    stream, offsets_hash = hashlib.sha256(), hashlib.sha256(struct.pack("<q", 0))
    for s in m["shards"]:
        tokens_file, offsets_file = path / s["tokens_file"], path / s["offsets_file"]
        raw = _checked_bytes(offsets_file, s["offsets_sha256"])
        local = np.frombuffer(raw, "<i8")
        check_offsets(local, s["num_tokens"], str(offsets_file))
        if "summary_file" in s:  # per-block document totals (format version 2)
            summary = path / s["summary_file"]
            stored = np.frombuffer(_checked_bytes(summary, s["summary_sha256"]), "<i8")
            totals = shard_totals(np.diff(local), documents, m["summary_block_docs"])
            if not np.array_equal(stored, totals):
                raise CorpusError(
                    f"{summary}: its block totals are not those of the shard's documents in "
                    f"blocks of summary_block_docs={m['summary_block_docs']} ({MANIFEST_NAME}); "
                    "rebuild the corpus"
                )
        documents += len(local) - 1
        offsets_hash.update((local[1:] + position).astype("<i8").tobytes())
        check_inside(path, tokens_file)
        try:
            with open(tokens_file, "rb") as f:
                reads = iter(lambda: f.read(chunk_tokens * dtype.itemsize), b"")
                chunks = (np.frombuffer(chunk, dtype) for chunk in reads)
                h = _scan_shard(
                    chunks,
                    s["tokens_sha256"],
                    str(tokens_file),
                    m["vocab_size"],
                    position,
                    stream,
                    bar,
                )
        except OSError as err:
            raise os_error(err, "verifying") from err
        high = _larger(high, h)
        position += s["num_tokens"]
    checks = ["sha256 checksums", "shard offsets"]
    content = content_digest(stream.hexdigest(), offsets_hash.hexdigest())
    checks += _check_stream(m, f"{path / MANIFEST_NAME}", content, high)
    return high, checks


def _scan_shard(
    chunks: Iterable[np.ndarray],
    sha256: str,
    where: str,
    vocab_size: int | None,
    position: int,
    stream: Any,
    bar: tqdm.tqdm,
) -> int | None:
    """Checks a shard's tokens, read in non-empty ``chunks``: their sha256 against the
    manifest's and their ids against ``vocab_size`` (the first token at stream ``position``);
    adds them to the whole ``stream``'s digest. Returns the shard's largest id (``None``:
    no tokens)."""
    digest, bad_id, high = hashlib.sha256(), None, None
    for tokens in chunks:
        digest.update(tokens.tobytes())
        stream.update(tokens.tobytes())
        try:
            h = _scan_ids(tokens, position, vocab_size, where)
        except CorpusError as err:  # reported after the checksum: which is it?
            bad_id = bad_id or err
            h = int(tokens.max())
        high = _larger(high, h)
        position += tokens.size
        bar.update(tokens.size)
    if digest.hexdigest() != sha256:
        error = _mismatch(where, "sha256")
        if bad_id is not None:  # a changed byte reads as an odd id: the checksum says why
            raise CorpusError(f"{error} (it now also holds a bad id: {bad_id})") from None
        raise error
    if bad_id is not None:
        raise bad_id
    return high


def _larger(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _check_stream(m: dict[str, Any], manifest: str, content: str, high: int | None) -> list[str]:
    """The manifest's whole-stream records (``content_sha256``, ``max_token_id``) against
    what reading every token found; the names of the checks made."""
    checks = []
    if "content_sha256" in m:
        if content != m["content_sha256"]:
            raise _mismatch(manifest, "content_sha256 (of the whole stream)")
        checks.append("content_sha256")
    if "max_token_id" in m:
        if m["max_token_id"] != high:
            raise CorpusError(
                f"{manifest}: max_token_id={m['max_token_id']} but the largest "
                f"token id is {high}; rebuild the corpus"
            )
        checks.append(f"max_token_id={high}")
    return checks


def _check_chunk_tokens(chunk_tokens: Any) -> None:
    if not is_int(chunk_tokens) or not 1 <= chunk_tokens <= MAX_CHUNK_TOKENS:
        raise ValueError(
            "chunk_tokens must be a positive int up to 2**30 (tokens read per scan step: "
            f"memory grows with it), got {chunk_tokens=}; omit it for the default {CHUNK_TOKENS}"
        )


def _scan_source(
    source: TokenShardSource, bar: tqdm.tqdm, chunk_tokens: int, where: str | None
) -> int | None:
    """Max token id of the stream (chunked reads); with ``where``, raises on ids out of range."""
    high: int | None = None
    buffer = np.empty(min(chunk_tokens, source.num_tokens), source.dtype)
    for start in range(0, source.num_tokens, chunk_tokens):
        chunk = buffer[: min(chunk_tokens, source.num_tokens - start)]
        source.read_into(chunk, start)
        vocab = None if where is None else source.vocab_size
        h = _scan_ids(chunk, start, vocab, where or "")
        high = h if high is None else max(high, h)
        bar.update(chunk.size)
    return high


def verify_corpus(
    path: str | os.PathLike[str],
    *,
    eos_id: int | None = None,
    progress: bool = False,
    chunk_tokens: int = CHUNK_TOKENS,
) -> VerifyReport:
    """Checks a corpus end to end and reports what it holds.

    Native corpora: manifest schema (each file listed once), file sizes against the counts
    (truncation), sha256 of every file (flipped bytes) and of the whole stream
    (``content_sha256``), offsets (start 0, never decreasing, end = shard tokens), ids < vocab
    size when recorded, the recorded ``max_token_id``. Flat-shard format and Megatron: index
    structure and sizes, offsets, ids >= 0. Every format: ``eos_id`` (recorded or given) is an
    id the corpus can hold.
    Token files are scanned ``chunk_tokens`` at a time, so memory stays bounded.

    Args:
        path: Anything :func:`~grainpack.corpus.open_corpus` accepts (a native corpus's
            URL too: every object is then read once, by range, none kept).
        eos_id: Passed to ``open_corpus`` (flat-shard format: split documents at eos).
        progress: Show a tqdm progress bar over tokens.
        chunk_tokens: Tokens per scan step, 1 to ``MAX_CHUNK_TOKENS`` (2^30).

    Raises:
        CorpusError: (a ``ValueError``) naming the file and the first problem.

    Example:
        >>> import tempfile
        >>> from grainpack import write_corpus
        >>> d = tempfile.mkdtemp()
        >>> _ = write_corpus(d, [[1, 2], [3]], vocab_size=4)
        >>> report = verify_corpus(d)
        >>> report.num_documents, report.num_tokens, report.max_token_id
        (2, 3, 3)
    """
    _check_chunk_tokens(chunk_tokens)
    if is_url(path):  # object storage: every object read once, by range
        return _verify_remote(
            str(path), eos_id=eos_id, progress=progress, chunk_tokens=chunk_tokens
        )
    p = Path(local_path(path))
    source = open_corpus(p, eos_id=eos_id)  # structure, manifest schema, file sizes
    kind = _kind(p)
    checks = ["manifest schema", "file sizes"] if kind == "grainpack" else ["index", "file sizes"]
    with tqdm.tqdm(
        total=source.num_tokens, unit="tok", unit_scale=True, disable=not progress
    ) as bar:
        if kind == "grainpack":
            high, native_checks = _verify_native_files(p, bar, chunk_tokens)
            checks += native_checks
        else:
            high = _scan_source(source, bar, chunk_tokens, str(path))
    if kind == "flat-shard":  # the window loader reads a shard's indexed tokens only
        longer = [s for s in source.shards if os.path.getsize(s.tokens_path) > 2 * s.num_tokens]
        if longer:
            checks.append(
                f"note: {len(longer)} shard file(s) hold more than index.json counts (e.g. "
                f"{longer[0].tokens_path}: {os.path.getsize(longer[0].tokens_path):,} bytes for "
                f"{longer[0].num_tokens:,} tokens); the rest is not read"
            )
    return report(source, str(path), kind, high, checks)


def report(
    source: TokenShardSource, path: str, kind: str, high: int | None, checks: list[str]
) -> VerifyReport:
    """The checks every format shares (offsets, ids, eos) and the :class:`VerifyReport` of
    ``source``, whose tokens were scanned (largest id ``high``) and passed ``checks``."""
    check_offsets(source.offsets, source.num_tokens, path)
    checks += ["each file listed once", "document offsets", "token ids >= 0"]
    if source.vocab_size is not None:
        checks.append(f"token ids < vocab_size={source.vocab_size}")
    else:
        checks.append("token ids < vocab_size: skipped (no vocab_size recorded)")
    if source.eos_id is not None:
        _check_eos(source, path)
        checks.append(f"eos_id={source.eos_id} is a token id")
    return VerifyReport(
        path=path,
        kind=kind,
        num_documents=len(source),
        num_tokens=source.num_tokens,
        num_shards=len(source.shards),
        dtype=source.dtype.name,
        vocab_size=source.vocab_size,
        max_token_id=high,
        fingerprint=source.fingerprint,
        checks=tuple(checks),
    )


def _verify_remote(
    url: str, *, eos_id: int | None = None, progress: bool = False, chunk_tokens: int
) -> VerifyReport:
    """:func:`verify_corpus` of a native corpus at ``url``: opening checks
    the manifest, the objects' sizes and the metadata's sha256; then every token object is
    read once, ``chunk_tokens`` at a time by range, for its sha256, ids and the stream's
    ``content_sha256``; the summaries are recomputed from the offsets."""
    from grainpack.corpus.remote import open_with_manifest

    source, m = open_with_manifest(url, eos_id)
    url = source.url
    checks = ["manifest schema", "file sizes", "sha256 checksums", "shard offsets"]
    high: int | None = None
    position = documents = 0
    stream, offsets_hash = hashlib.sha256(), hashlib.sha256(struct.pack("<q", 0))
    with tqdm.tqdm(
        total=source.num_tokens, unit="tok", unit_scale=True, disable=not progress
    ) as bar:
        for k, s in enumerate(m["shards"]):
            local = source._current_local(k, check=True)  # sha256 checked when cached
            if source.summary_block_docs is not None:
                stored = np.fromfile(source.shards[k].summary_path, "<i8")  # type: ignore[arg-type]
                totals = shard_totals(np.diff(local), documents, source.summary_block_docs)
                if not np.array_equal(stored, totals):
                    raise CorpusError(
                        f"{url}/{s['summary_file']}: its block totals are not those of the "
                        "shard's documents; upload the corpus again"
                    )
            documents += len(local) - 1
            offsets_hash.update((local[1:] + position).astype("<i8").tobytes())
            n = s["num_tokens"]
            chunks = (
                source._ids(k, lo, min(lo + chunk_tokens, n)) for lo in range(0, n, chunk_tokens)
            )
            where = f"{url}/{s['tokens_file']}"
            h = _scan_shard(
                chunks, s["tokens_sha256"], where, m["vocab_size"], position, stream, bar
            )
            high = _larger(high, h)
            position += n
    content = content_digest(stream.hexdigest(), offsets_hash.hexdigest())
    checks += _check_stream(m, f"{url}/{MANIFEST_NAME}", content, high)
    return report(source, url, "grainpack", high, checks)


def describe_corpus(
    source: TokenShardSource | str | os.PathLike[str],
    *,
    progress: bool = False,
    chunk_tokens: int = CHUNK_TOKENS,
) -> dict[str, Any]:
    """Corpus statistics for ``grainpack inspect`` (JSON-serialisable plain types).

    Args:
        source: An opened corpus or a path for :func:`~grainpack.corpus.open_corpus`.
        progress: Show a progress bar (tqdm) over the token scan.
        chunk_tokens: Tokens read at a time by the scan for ``max_token_id`` (1 to 2^30).

    Returns:
        A dict with the keys ``documents``, ``tokens``, ``dtype``, ``vocab_size``,
        ``eos_id``, ``shards``, ``fingerprint``, ``empty_documents``, ``length``
        (document-length ``p0``, ``p50``, ``p90``, ``p99``, ``p100`` by linear
        interpolation, and ``mean``; ``None`` without documents), ``max_token_id`` (chunked
        scan of the tokens; ``None`` without tokens) and ``tokenizer`` (what the corpus
        records about its tokenizer, or ``None``).

    Example:
        >>> import tempfile
        >>> from grainpack import write_corpus
        >>> stats = describe_corpus(write_corpus(tempfile.mkdtemp(), [[1, 2], [], [9]]))
        >>> stats["documents"], stats["empty_documents"], stats["max_token_id"]
        (3, 1, 9)
        >>> stats["length"]
        {'p0': 0.0, 'p50': 1.0, 'p90': 1.8, 'p99': 1.98, 'p100': 2.0, 'mean': 1.0}
    """
    _check_chunk_tokens(chunk_tokens)
    if isinstance(source, str | os.PathLike):
        source = open_corpus(source)
    lengths = source.lengths
    length = None
    if lengths.size:
        p0, p50, p90, p99, p100 = np.percentile(lengths, [0, 50, 90, 99, 100]).tolist()
        length = {"p0": p0, "p50": p50, "p90": p90, "p99": p99, "p100": p100}
        length["mean"] = float(lengths.mean())
    with tqdm.tqdm(
        total=source.num_tokens, unit="tok", unit_scale=True, disable=not progress
    ) as bar:
        if getattr(source, "remote", False) and source.max_token_id is not None:
            high = source.max_token_id  # recorded (verify checks it): no download of every token
        else:
            high = _scan_source(source, bar, chunk_tokens, None)
    return {
        "documents": len(source),
        "tokens": source.num_tokens,
        "dtype": source.dtype.name,
        "vocab_size": source.vocab_size,
        "eos_id": source.eos_id,
        "shards": len(source.shards),
        "fingerprint": source.fingerprint,
        "empty_documents": int((lengths == 0).sum()),
        "length": length,
        "max_token_id": high,
        "tokenizer": source.tokenizer,
    }
