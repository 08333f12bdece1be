"""The window loader's flat-shard layout: a directory with ``index.json`` (shard file name ->
uint16 token count) and raw uint16 shards, read without conversion.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from grainpack.checks import is_int
from grainpack.corpus.errors import CorpusError
from grainpack.corpus.source import (
    ShardRecord,
    SplitAfter,
    TokenShardSource,
    WholeShard,
)


def open_flat_layout(path: Path, *, eos_id: int | None = None) -> TokenShardSource:
    """The window loader's layout: ``index.json`` (file name -> uint16 token count) + shards.

    Shards are read in sorted name order and empty ones skipped, as the window loader does. Each
    shard is one document, or, with ``eos_id``, split after every ``eos_id``.
    """
    raw = (path / "index.json").read_bytes()
    try:
        index = json.loads(raw)
    except json.JSONDecodeError as err:
        raise CorpusError(f"{path / 'index.json'}: not valid JSON ({err})") from err
    if not isinstance(index, dict) or not all(is_int(n) and n >= 0 for n in index.values()):
        raise CorpusError(
            f"{path / 'index.json'}: expected an object mapping shard file name -> "
            "token count (int >= 0)"
        )
    if eos_id is not None and not 0 <= eos_id < 1 << 16:
        raise ValueError(f"eos_id must fit the flat-shard layout's uint16 ids, got {eos_id=}")
    # The salt keeps its historical name: fingerprints in saved checkpoints depend on it.
    digest = hashlib.sha256(b"grainpack/seed-layout\n" + raw + f"\neos_id={eos_id}\n".encode())
    records = []
    for name in sorted(
        index
    ):  # the window loader reads shards in sorted name order, skipping empty ones
        count = index[name]
        if count == 0:
            continue
        file = path / name
        size = file.stat().st_size if file.is_file() else None
        if size is None or size < 2 * count:
            found = "missing" if size is None else f"{size} bytes = {size // 2} tokens"
            raise CorpusError(
                f"{file}: index.json says {count} uint16 tokens, file is {found}; "
                "the shard is truncated: regenerate it or fix index.json"
            )
        digest.update(f"{name}\t{size}\n".encode())
        documents = WholeShard() if eos_id is None else SplitAfter(eos_id)
        records.append(ShardRecord(str(file), count, documents))
    return TokenShardSource(records, dtype="uint16", fingerprint=digest.hexdigest(), eos_id=eos_id)
