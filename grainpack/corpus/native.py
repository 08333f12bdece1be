"""The native on-disk corpus format: the manifest, its schema and opening a native corpus.

Invariant: a directory is a complete corpus iff ``manifest.json`` exists; it is written last.

Native format (version 2), one directory::

    manifest.json        {"format": "grainpack", "version": 2, "dtype": "uint16"|"uint32",
                          "vocab_size": int|null, "eos_id": int|null, "num_documents": int,
                          "num_tokens": int, "summary_block_docs": int,
                          "shards": [{"tokens_file", "offsets_file", "summary_file",
                          "num_tokens", "num_documents", "tokens_sha256", "offsets_sha256",
                          "summary_sha256"}]}
    tokens-00000.bin     raw little-endian token ids of shard 0, documents back to back
    offsets-00000.bin    raw little-endian int64, num_documents + 1 shard-local offsets:
                         first 0, last = the shard's num_tokens; document j of the shard is
                         tokens[offsets[j]:offsets[j + 1]]
    summary-00000.bin    raw little-endian int64 block token totals of shard 0
                         (:mod:`grainpack.corpus.summary`)

Version 1 is version 2 without the summaries (``summary_block_docs``, ``summary_file``,
``summary_sha256``); it is read as well, its totals computed when needed. A corpus written
with ``shuffle=seed`` also records ``"shuffle_seed"`` (stored document ``i`` is input
document ``grainpack.corpus.writer.shuffled_order(i, num_documents, seed)``).

Read back with ``np.memmap(dir / "tokens-00000.bin", dtype="<u2", mode="r")``. Documents never
span shards; empty documents are stored (a repeated offset) so document ids match the input.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from grainpack.checks import is_int
from grainpack.corpus.errors import CorpusError
from grainpack.corpus.source import OffsetsFile, ShardRecord, TokenShardSource
from grainpack.corpus.summary import summary_pieces

__all__ = ["MANIFEST_NAME", "open_native", "read_manifest"]

MANIFEST_NAME = "manifest.json"
FORMAT_NAME = "grainpack"
FORMAT_VERSION = 2
READ_VERSIONS = (1, 2)
DTYPES = ("uint16", "uint32")
SHARD_FILE = re.compile(r"(tokens|offsets|summary)-\d{5,}\.bin")

PathLike = str | os.PathLike[str]


def plain_int(value: Any) -> Any:
    """NumPy integer scalars become Python ints (JSON-able); anything else is returned as is."""
    return int(value) if isinstance(value, np.integer) else value


def read_manifest(path: PathLike) -> dict[str, Any]:
    """Loads and schema-checks ``path/manifest.json``; raises :class:`CorpusError` if invalid."""
    file = Path(path) / MANIFEST_NAME
    try:
        m = json.loads(file.read_bytes())
    except FileNotFoundError as err:
        raise CorpusError(not_a_corpus(Path(path))) from err
    except json.JSONDecodeError as err:
        raise CorpusError(f"{file}: not valid JSON ({err}); rebuild the corpus") from err
    problems = []
    if not isinstance(m, dict) or m.get("format") != FORMAT_NAME:
        raise CorpusError(f"{file}: expected a JSON object with format='grainpack'")
    version = m.get("version")
    if version not in READ_VERSIONS:
        problems.append(f"version={version!r} (this grainpack reads {list(READ_VERSIONS)})")
    summaries = version == 2
    block_docs = m.get("summary_block_docs")
    if summaries and not (is_int(block_docs) and block_docs >= 1):
        problems.append(f"summary_block_docs={block_docs!r} (expected an int >= 1)")
    if "shuffle_seed" in m and not (is_int(m["shuffle_seed"]) and m["shuffle_seed"] >= 0):
        problems.append(f"shuffle_seed={m['shuffle_seed']!r} (expected an int >= 0)")
    if m.get("dtype") not in DTYPES:
        problems.append(f"dtype={m.get('dtype')!r} (expected 'uint16' or 'uint32')")
    for key in ("vocab_size", "eos_id"):
        if key not in m or not (m[key] is None or (is_int(m[key]) and m[key] >= 0)):
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
        for key in ("tokens_file", "offsets_file", "summary_file")[: 3 if summaries else 2]:
            name = s.get(key)
            if not isinstance(name, str) or not name or Path(name).name != name or name[0] == ".":
                problems.append(f"shards[{i}].{key}={name!r} (expected a plain file name)")
        for key in totals:
            if is_int(s.get(key)) and s[key] >= 0:
                totals[key] += s[key]
            else:
                problems.append(f"shards[{i}].{key}={s.get(key)!r} (expected an int >= 0)")
        for key in ("tokens_sha256", "offsets_sha256", "summary_sha256")[: 3 if summaries else 2]:
            if not (isinstance(s.get(key), str) and re.fullmatch(r"[0-9a-f]{64}", s[key])):
                problems.append(f"shards[{i}].{key}={s.get(key)!r} (expected 64 hex digits)")
    for key, total in totals.items():
        if m.get(key) != total:
            problems.append(f"{key}={m.get(key)!r} (the shards sum to {total})")
    if problems:
        raise CorpusError(f"{file}: invalid manifest: " + "; ".join(problems))
    return m


def not_a_corpus(path: Path) -> str:
    hint = ""
    if path.is_dir() and any(SHARD_FILE.fullmatch(p.name) for p in path.iterdir()):
        hint = " It holds shard files but no manifest: the write was interrupted; rewrite it."
    return (
        f"{path} is not a corpus: expected a directory with {MANIFEST_NAME} (grainpack) or "
        "index.json (flat-shard layout), or a Megatron prefix with PREFIX.bin and "
        f"PREFIX.idx.{hint}"
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


def open_native(path: Path, eos_id: int | None) -> TokenShardSource:
    m = read_manifest(path)
    itemsize = np.dtype(m["dtype"]).itemsize
    block_docs = m.get("summary_block_docs")
    records, first = [], 0
    for s in m["shards"]:
        tokens, offsets = path / s["tokens_file"], path / s["offsets_file"]
        summary = None
        if block_docs is not None:
            summary = path / s["summary_file"]
            pieces = summary_pieces(first, s["num_documents"], block_docs)
            _check_size(summary, 8 * pieces, f"{pieces} block totals")
        first += s["num_documents"]
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
                OffsetsFile(str(offsets), s["num_documents"]),
                summary_path=None if summary is None else str(summary),
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
        summary_block_docs=block_docs,
    )
