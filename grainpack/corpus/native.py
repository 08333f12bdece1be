"""The native on-disk corpus format: the manifest, its schema and opening a native corpus.

Invariant: a directory is a complete corpus iff ``manifest.json`` exists; the writer publishes
the whole directory at once, manifest included (:mod:`grainpack.ingest.writer`).

Native format (version 2), one directory::

    manifest.json        {"format": "grainpack", "version": 2, "dtype": "uint16"|"uint32",
                          "vocab_size": int|null, "eos_id": int|null, "num_documents": int,
                          "num_tokens": int, "summary_block_docs": int,
                          "shards": [{"tokens_file", "offsets_file", "summary_file",
                          "num_tokens", "num_documents", "tokens_sha256", "offsets_sha256",
                          "summary_sha256"}], optional (written since they exist):
                          "max_token_id": int|null, "content_sha256": hex,
                          "tokenizer": {"kind", "file", "sha256", ...}, "shuffle_seed": int}
    tokens-00000.bin     raw little-endian token ids of shard 0, documents back to back
    offsets-00000.bin    raw little-endian int64, num_documents + 1 shard-local offsets:
                         first 0, last = the shard's num_tokens; document j of the shard is
                         tokens[offsets[j]:offsets[j + 1]]
    summary-00000.bin    raw little-endian int64 block token totals of shard 0
                         (:mod:`grainpack.corpus.summary`)

Version 1 is version 2 without the summaries (``summary_block_docs``, ``summary_file``,
``summary_sha256``); it is read as well, its totals computed when needed. A corpus written
with ``shuffle=seed`` also records ``"shuffle_seed"`` (stored document ``i`` is input
document ``grainpack.ingest.writer.shuffled_order(i, num_documents, seed)``).

``content_sha256`` is the sha256 of the ASCII text ``"<tokens>:<offsets>"``, where ``<tokens>``
is the hex sha256 of every token file concatenated in order and ``<offsets>`` that of the
corpus-wide int64 document offsets (``num_documents + 1`` values, first 0): it does not depend
on how the stream is cut into shards, so neither does the fingerprint of a corpus that has it.

Read back with ``np.memmap(dir / "tokens-00000.bin", dtype="<u2", mode="r")``. Documents never
span shards; empty documents are stored (a repeated offset) so document ids match the input.
Every file is read inside the directory: a symbolic link among them may point within it, never
out of it (:func:`check_inside`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from stat import S_ISREG
from typing import Any

import numpy as np

from grainpack.corpus.errors import CorpusError, CorpusNotFoundError, os_error
from grainpack.corpus.shards import FileIdentity, OffsetsFile, ShardRecord, read_whole
from grainpack.corpus.source import TokenShardSource
from grainpack.corpus.summary import summary_pieces
from grainpack.index.checks import is_int

__all__ = [
    "MANIFEST_NAME",
    "check_inside",
    "content_digest",
    "is_plain_name",
    "load_json",
    "open_native",
    "read_manifest",
]

MANIFEST_NAME = "manifest.json"
FORMAT_NAME = "grainpack"
FORMAT_VERSION = 2
READ_VERSIONS = (1, 2)
DTYPES = ("uint16", "uint32")
SHARD_FILE = re.compile(r"(tokens|offsets|summary)-\d{5,}\.bin")
# Batches hold int32 ids: the largest id (and vocab_size - 1) a corpus may record.
MAX_TOKEN_ID = 2**31 - 1
_HEX64 = re.compile(r"[0-9a-f]{64}")
_OPEN_ATTEMPTS = 5
# A manifest lists its shards (about 300 bytes each): 1 GiB is millions of shards.
MAX_JSON_BYTES = 1 << 30

PathLike = str | os.PathLike[str]


def plain_int(value: Any) -> Any:
    """NumPy integer scalars become Python ints (JSON-able); anything else is returned as is."""
    return int(value) if isinstance(value, np.integer) else value


def load_json(
    file: Path, fix: str, *, dir_fd: int | None = None, **options: Any
) -> tuple[Any, bytes]:
    """Reads and parses ``file`` (its name relative to ``dir_fd`` if given) as JSON
    (``options`` go to ``json.loads``): the value and the raw bytes. Anything unreadable or
    unparseable is a :class:`CorpusError` naming the file, what is wrong with it and ``fix``."""
    try:
        _, raw = read_whole(file, fix, dir_fd=dir_fd, limit=MAX_JSON_BYTES)
    except OSError as err:
        err.filename = str(file)
        raise os_error(err, "reading") from err
    try:
        return json.loads(raw, **options), raw
    except UnicodeDecodeError as err:
        problem = f"not UTF-8 text ({err.reason} at byte {err.start}): a binary file?"
    except json.JSONDecodeError as err:
        problem = f"not valid JSON ({err})"
    except RecursionError:
        problem = "JSON nested too deeply to be a corpus index"
    raise CorpusError(f"{file}: {problem}; {fix}")


def content_digest(tokens_sha256: str, offsets_sha256: str) -> str:
    """The manifest's ``content_sha256`` from the stream's token and offsets digests.

    Example:
        >>> empty = hashlib.sha256(b"").hexdigest()  # no tokens
        >>> offsets = hashlib.sha256(bytes(8)).hexdigest()  # one offset: 0
        >>> text = f"{empty}:{offsets}".encode()
        >>> content_digest(empty, offsets) == hashlib.sha256(text).hexdigest()
        True
    """
    return hashlib.sha256(f"{tokens_sha256}:{offsets_sha256}".encode()).hexdigest()


def is_plain_name(name: Any) -> bool:
    """A file name inside the corpus directory: no path, no parent, no hidden or odd name."""
    return (
        isinstance(name, str)
        and bool(name)
        and Path(name).name == name
        and name[0] != "."
        and "\x00" not in name
        and "\\" not in name
    )


def check_inside(folder: PathLike, file: PathLike) -> None:
    """Raises :class:`CorpusError` if ``file``, a file of the corpus in ``folder``, is a
    symbolic link that resolves outside ``folder`` (``folder``'s own links resolved first).

    Corpus files are opened only inside their folder: a manifest or index lists plain names,
    and a link is the same escape as a ``..``. A link within the folder is followed. A link
    out of it to something that is not a regular file is left to the checks that refuse
    such files (FIFOs, devices, folders); a dangling one reads as missing.

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> (folder / "tokens-00000.bin").symlink_to(__file__)
        >>> check_inside(folder, folder / "tokens-00000.bin")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        grainpack.corpus.errors.CorpusError: .../tokens-00000.bin: a symbolic link to .../native.py, outside the corpus folder ...
    """  # noqa: E501
    if not os.path.islink(file):
        return
    root, real = os.path.realpath(folder), os.path.realpath(file)
    if real.startswith(root.rstrip(os.sep) + os.sep) or not os.path.isfile(real):
        return
    raise CorpusError(
        f"{file}: a symbolic link to {real}, outside the corpus folder {root}; a corpus "
        "opens only files inside its folder: replace the link by the file itself (cp "
        "--remove-destination TARGET LINK) or by a link to a file inside the folder"
    )


def read_manifest(path: PathLike, *, dir_fd: int | None = None) -> dict[str, Any]:
    """Loads and schema-checks ``path/manifest.json`` (read through ``dir_fd``, the open
    directory, if given).

    Args:
      path: the corpus directory.
      dir_fd: an open descriptor of that directory, so that every file is read from it.

    Returns:
      The manifest as a dict.

    Raises:
      CorpusError: no manifest, or one that is not valid (the message says which field).

    Example:
      >>> import tempfile
      >>> from grainpack import write_corpus
      >>> path = tempfile.mkdtemp()
      >>> _ = write_corpus(path, [[1, 2], [3]], vocab_size=4)
      >>> m = read_manifest(path)
      >>> m["num_documents"], m["num_tokens"], m["dtype"], m["vocab_size"]
      (2, 3, 'uint16', 4)
    """
    file = Path(path) / MANIFEST_NAME
    check_inside(path, file)
    try:
        m, _ = load_json(file, "rebuild the corpus", dir_fd=dir_fd)
    except CorpusNotFoundError:
        raise CorpusError(not_a_corpus(Path(path))) from None
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
    vocab = m.get("vocab_size") if is_int(m.get("vocab_size")) else None
    ids = int(np.iinfo(m["dtype"]).max) + 1 if m.get("dtype") in DTYPES else None
    # (up to 2**32 for uint32: older writers allowed ids past int32, which the pipeline
    # refuses with the fix, a rewrite, and which must stay readable to be rewritten)
    if vocab is not None and ids is not None and not 0 < vocab <= ids:
        problems.append(f"vocab_size={vocab} (expected 1 to {ids} for {m['dtype']})")
    for key in ("eos_id", "max_token_id"):
        value = m.get(key)
        if key == "max_token_id" and not (value is None or (is_int(value) and value >= 0)):
            problems.append(f"max_token_id={value!r} (expected a non-negative int or null)")
        elif vocab is not None and is_int(value) and value >= vocab:
            problems.append(f"{key}={value} (expected < vocab_size={vocab})")
        elif ids is not None and is_int(value) and value >= ids:
            problems.append(f"{key}={value} (expected < {ids} for {m['dtype']})")
    if "content_sha256" in m and not (
        isinstance(m["content_sha256"], str) and _HEX64.fullmatch(m["content_sha256"])
    ):
        problems.append(f"content_sha256={m['content_sha256']!r} (expected 64 hex digits)")
    if not isinstance(m.get("tokenizer", {}), dict):
        problems.append(f"tokenizer={m['tokenizer']!r} (expected an object, or no key)")
    shards = m.get("shards")
    if not isinstance(shards, list):
        problems.append(f"shards={shards!r} (expected a list)")
        shards = []
    totals = {"num_tokens": 0, "num_documents": 0}
    seen: dict[str, str] = {}
    for i, s in enumerate(shards):
        if not isinstance(s, dict):
            problems.append(f"shards[{i}] is {type(s).__name__} (expected an object)")
            continue
        for key in ("tokens_file", "offsets_file", "summary_file")[: 3 if summaries else 2]:
            name = s.get(key)
            if not is_plain_name(name) or name == MANIFEST_NAME:
                problems.append(f"shards[{i}].{key}={name!r} (expected a plain file name)")
            elif name in seen:
                problems.append(
                    f"shards[{i}].{key}={name!r} is also {seen[name]} (each file is listed once)"
                )
            else:
                seen[name] = f"shards[{i}].{key}"
        for key in totals:
            if is_int(s.get(key)) and s[key] >= 0:
                totals[key] += s[key]
            else:
                problems.append(f"shards[{i}].{key}={s.get(key)!r} (expected an int >= 0)")
        for key in ("tokens_sha256", "offsets_sha256", "summary_sha256")[: 3 if summaries else 2]:
            if not (isinstance(s.get(key), str) and _HEX64.fullmatch(s[key])):
                problems.append(f"shards[{i}].{key}={s.get(key)!r} (expected 64 hex digits)")
    for key, total in totals.items():
        if not is_int(m.get(key)):  # 1180.0 == 1180: a float count would pass the sum
            problems.append(f"{key}={m.get(key)!r} (expected an int: the shards sum to {total})")
        elif m[key] != total:
            problems.append(f"{key}={m.get(key)!r} (the shards sum to {total})")
    if problems:
        raise CorpusError(f"{file}: invalid manifest: " + "; ".join(problems) + "; rebuild it")
    return m


def source_fields(manifest: dict[str, Any], where: Any, eos_id: int | None) -> dict[str, Any]:
    """A :class:`TokenShardSource`'s fields from the native ``manifest`` of the corpus at
    ``where``: ``eos_id``, when given, replaces an unrecorded one and must equal a recorded
    one."""
    recorded = manifest["eos_id"]
    if eos_id is not None and recorded is not None and eos_id != recorded:
        raise ValueError(f"{where} records eos_id={recorded}, got {eos_id=}; omit eos_id")
    return {
        "dtype": manifest["dtype"],
        "fingerprint": fingerprint_of(manifest),
        "vocab_size": manifest["vocab_size"],
        "eos_id": recorded if eos_id is None else eos_id,
        "max_token_id": manifest.get("max_token_id"),
        "tokenizer": manifest.get("tokenizer"),
    }


def fingerprint_of(manifest: dict[str, Any]) -> str:
    """The fingerprint of a native corpus: the sha256 of its canonical manifest, without the
    shard list when the manifest records ``content_sha256`` (then how the stream is cut into
    shards does not matter)."""
    described = manifest
    if "content_sha256" in manifest:
        described = {k: v for k, v in manifest.items() if k != "shards"}
    canonical = json.dumps(described, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(canonical).hexdigest()


_INPUT_SUFFIXES = (
    ".txt", ".txt.gz", ".txt.zst", ".jsonl", ".jsonl.gz", ".jsonl.zst", ".json", ".parquet",
    ".npy",
)  # fmt: skip


def leftovers(target: Path, kind: str) -> list[Path]:
    """The folders writers of ``target`` left beside it, ``.NAME.{kind}-<pid>-<8 hex>``
    (``kind``: ``tmp`` staging, ``old`` an overwritten corpus moved aside); only those: the
    lock and folders of a corpus named ``NAME.old-2024`` share the prefix, not the name."""
    own = re.compile(rf"\.{re.escape(target.name)}\.{kind}-[0-9]+-[0-9a-f]{{8}}")
    try:
        names = os.listdir(target.parent)
    except FileNotFoundError:
        return []
    return sorted(target.parent / name for name in names if own.fullmatch(name))


def not_a_corpus(path: Path) -> str:
    """Why ``path`` is not a corpus, with what a killed writer may have left there."""
    hint = ""
    try:
        if path.is_dir() and any(SHARD_FILE.fullmatch(p.name) for p in path.iterdir()):
            hint = (
                " It holds shard files but no manifest: a write interrupted by an older "
                "grainpack, or a copy cut short; write it again with overwrite=True."
            )
        elif path.is_file() and (
            path.name in (MANIFEST_NAME, "index.json") or (path.parent / MANIFEST_NAME).is_file()
        ):
            hint = f" {path.name} is a file of the corpus: open its folder, {path.parent}."
        elif path.is_file() and path.name.endswith(_INPUT_SUFFIXES):
            hint = (
                f" {path.name} is input for a corpus: build one with `grainpack build {path} "
                "-o CORPUS` (text needs --tokenizer; gp.build_corpus, gp.ingest.convert_npy and "
                "gp.ingest.convert_jsonl do the same in Python)."
            )
        elif path.is_dir() and (
            inside := sorted(p.name for p in path.iterdir() if (p / MANIFEST_NAME).is_file())
        ):
            hint = (
                f" It holds corpora: {', '.join(inside[:5])}{', ...' if len(inside) > 5 else ''}."
            )
        elif not path.exists():
            aside = leftovers(path, "old")
            if aside:
                hint = (
                    f" An interrupted overwrite left the previous corpus at {aside[-1]}: the "
                    "next write to this path restores it first, or rename it back yourself."
                )
    except OSError:  # an unreadable directory: the message stays without a hint
        pass
    return (
        f"{path} is not a corpus: expected a directory with {MANIFEST_NAME} (grainpack) or "
        "index.json (flat-shard format), or a Megatron prefix with PREFIX.bin and "
        f"PREFIX.idx.{hint}"
    )


def _check_size(
    file: Path, dir_fd: int, expected: int, what: str, tokens: int | None = None
) -> os.stat_result:
    check_inside(file.parent, file)
    try:
        stat = os.stat(file.name, dir_fd=dir_fd)
    except FileNotFoundError as err:
        raise CorpusError(f"{file}: missing ({what}); the corpus is incomplete") from err
    except OSError as err:
        err.filename = str(file)
        raise os_error(err, "opening") from err
    if not S_ISREG(stat.st_mode):
        raise CorpusError(f"{file}: not a regular file ({what}); rebuild the corpus")
    size = stat.st_size
    if size == expected:
        return stat
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
    """Opens the native corpus at ``path`` as one snapshot: the manifest and every file are
    found through one open handle of the directory, and if ``path`` was replaced meanwhile (a
    writer published), the open starts again on the new directory."""
    for _ in range(_OPEN_ATTEMPTS):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as err:
            raise os_error(err, "opening") from err
        try:
            try:
                source, error = _open_native_at(path, fd, eos_id), None
            except CorpusError as err:
                source, error = None, err
            try:
                now, opened = os.stat(path), os.fstat(fd)
                replaced = (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino)
            except FileNotFoundError:
                replaced = True
        finally:
            os.close(fd)
        if not replaced:
            if error is not None:
                raise error
            return source  # type: ignore[return-value]
    raise CorpusError(
        f"{path} was replaced {_OPEN_ATTEMPTS} times while being opened (writers publishing "
        "over and over?); open it again once they are done"
    )


def _open_native_at(path: Path, dir_fd: int, eos_id: int | None) -> TokenShardSource:
    m = read_manifest(path, dir_fd=dir_fd)
    itemsize = np.dtype(m["dtype"]).itemsize
    block_docs = m.get("summary_block_docs")
    records, first = [], 0
    for s in m["shards"]:
        tokens, offsets = path / s["tokens_file"], path / s["offsets_file"]
        summary = None
        if block_docs is not None:
            summary = path / s["summary_file"]
            pieces = summary_pieces(first, s["num_documents"], block_docs)
            _check_size(summary, dir_fd, 8 * pieces, f"{pieces} block totals")
        first += s["num_documents"]
        tokens_stat = _check_size(
            tokens,
            dir_fd,
            s["num_tokens"] * itemsize,
            f"{s['num_tokens']} {m['dtype']} tokens",
            tokens=s["num_tokens"],
        )
        offsets_stat = _check_size(
            offsets, dir_fd, (s["num_documents"] + 1) * 8, f"{s['num_documents'] + 1} offsets"
        )
        index = OffsetsFile(
            str(offsets), s["num_documents"], identity=FileIdentity.of(offsets_stat)
        )
        records.append(
            ShardRecord(
                str(tokens),
                s["num_tokens"],
                index,
                identity=FileIdentity.of(tokens_stat),
                summary_path=None if summary is None else str(summary),
            )
        )
    return TokenShardSource(
        records, **source_fields(m, path, eos_id), summary_block_docs=block_docs
    )
