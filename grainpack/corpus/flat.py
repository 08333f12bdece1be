"""The window loader's flat-shard format: a directory with ``index.json`` (shard file name ->
uint16 token count) and raw uint16 shards, read without conversion.
"""

from __future__ import annotations

import collections
import hashlib
import os
from pathlib import Path
from typing import Any

from grainpack.corpus.errors import CorpusError, os_error
from grainpack.corpus.native import MANIFEST_NAME, check_inside, is_plain_name, load_json
from grainpack.corpus.shards import FileIdentity, ShardRecord, SplitAfter, WholeShard
from grainpack.corpus.source import TokenShardSource
from grainpack.index.checks import is_int

_FIX = "expected an object mapping shard file name -> token count (int >= 0); fix index.json"


def open_flat_shards(path: Path, *, eos_id: int | None = None) -> TokenShardSource:
    """The window loader's layout: ``index.json`` (file name -> uint16 token count) + shards.

    Shards are read in sorted name order and empty ones skipped, as the window loader does. Each
    shard is one document, or, with ``eos_id``, split after every ``eos_id``. Shard names must
    be plain file names inside ``path``, each listed once; ``index.json`` and the shards may
    be symbolic links within ``path``, never out of it
    (:func:`~grainpack.corpus.native.check_inside`).
    """
    file = path / "index.json"

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        counts = collections.Counter(name for name, _ in pairs)
        twice = sorted(name for name, n in counts.items() if n > 1)
        if twice:
            raise CorpusError(f"{file}: shards listed twice: {twice}; list each shard once")
        return dict(pairs)

    check_inside(path, file)
    index, raw = load_json(file, _FIX, object_pairs_hook=no_duplicates)
    if not isinstance(index, dict) or not all(is_int(n) and n >= 0 for n in index.values()):
        raise CorpusError(f"{file}: {_FIX}")
    bad = [
        name for name in index if not is_plain_name(name) or name in ("index.json", MANIFEST_NAME)
    ]
    if bad:
        raise CorpusError(
            f"{file}: shard names must be plain file names inside {path}, got {bad[:5]}; "
            "move the shards into the folder and list them by name"
        )
    if eos_id is not None and not 0 <= eos_id < 1 << 16:
        raise ValueError(f"eos_id must fit the flat-shard format's uint16 ids, got {eos_id=}")
    # The salt keeps its historical name: fingerprints in saved checkpoints depend on it.
    digest = hashlib.sha256(b"grainpack/seed-layout\n" + raw + f"\neos_id={eos_id}\n".encode())
    records = []
    for name in sorted(index):  # the window loader reads shards sorted by name, skipping empty ones
        count = index[name]
        if count == 0:
            continue
        shard = path / name
        check_inside(path, shard)
        try:
            stat = os.stat(shard)
        except FileNotFoundError:
            stat = None
        except OSError as err:
            raise os_error(err, "opening") from err
        if stat is None or not os.path.isfile(shard) or stat.st_size < 2 * count:
            found = f"{stat.st_size} bytes = {stat.st_size // 2} tokens" if stat else "missing"
            found = found if stat is None or os.path.isfile(shard) else "a directory"
            raise CorpusError(
                f"{shard}: index.json says {count} uint16 tokens, file is {found}; "
                "the shard is truncated: regenerate it or fix index.json"
            )
        digest.update(f"{name}\t{stat.st_size}\n".encode())
        documents = WholeShard() if eos_id is None else SplitAfter(eos_id)
        records.append(ShardRecord(str(shard), count, documents, identity=FileIdentity.of(stat)))
    return TokenShardSource(records, dtype="uint16", fingerprint=digest.hexdigest(), eos_id=eos_id)
