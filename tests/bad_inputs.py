"""Helpers of the bad-input catalogue (tests/*/test_bad_*.py): a small corpus of five documents
``[1 2 3] [4 5] [6 7 8 9] [10] [11 12 13]`` (13 uint16 tokens, offsets ``0 3 5 9 10 13``),
manifest edits, and iterators restored from states."""

from __future__ import annotations

import hashlib
import json
import pathlib
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

import grainpack as gp

DOCS = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10], [11, 12, 13]]


def small_corpus(path: pathlib.Path, **options: Any) -> pathlib.Path:
    gp.write_corpus(path, DOCS, **options)
    return path


def edit_manifest(path: pathlib.Path, edit: Callable[[dict[str, Any]], Any]) -> None:
    manifest = json.loads((path / "manifest.json").read_text())
    edit(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))


def restamp(path: pathlib.Path, name: str) -> None:
    """Records ``name``'s current sha256 in the manifest (a writer that checksums bad data)."""
    digest = hashlib.sha256((path / name).read_bytes()).hexdigest()

    def edit(manifest: dict[str, Any]) -> None:
        for shard in manifest["shards"]:
            for kind in ("tokens", "offsets"):
                if shard[f"{kind}_file"] == name:
                    shard[f"{kind}_sha256"] = digest

    edit_manifest(path, edit)


def first_batch(config: gp.PipelineConfig, **options: Any) -> dict[str, np.ndarray]:
    return next(iter(gp.make_dataset(config, process_index=0, process_count=1, **options)))


def pipeline(path: pathlib.Path, **fields: Any) -> gp.PipelineConfig:
    fields = {"block": 4, "global_batch_size": 2} | fields
    return gp.PipelineConfig(sources={"a": str(path)}, **fields)


SOURCES = {"en": "/data/en", "fr": "/data/fr"}


def state_after(config: gp.PipelineConfig, steps: int, **options: Any) -> dict[str, int]:
    it = iter(gp.make_dataset(config, process_index=0, process_count=1, **options))
    for _ in range(steps):
        next(it)
    return it.get_state()


def fresh(config: gp.PipelineConfig, **options: Any) -> gp.PipelineIterator:
    return iter(gp.make_dataset(config, process_index=0, process_count=1, **options))


def documents_of(path: pathlib.Path) -> list[list[int]]:
    src = gp.open_corpus(path)
    return [src[i].tolist() for i in range(len(src))]


def write_megatron_int64(prefix: pathlib.Path, docs: list[list[int]]) -> None:
    """A Megatron ``MMIDIDX`` v1 dataset of dtype code 5 (int64), written with struct."""
    prefix.with_suffix(".bin").write_bytes(b"".join(struct.pack(f"<{len(d)}q", *d) for d in docs))
    lengths = [len(d) for d in docs]
    s = len(docs)
    idx = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 5, s, s + 1)
    idx += struct.pack(f"<{s}i", *lengths)
    idx += struct.pack(f"<{s}q", *(8 * sum(lengths[:i]) for i in range(s)))
    idx += struct.pack(f"<{s + 1}q", *range(s + 1))
    prefix.with_suffix(".idx").write_bytes(idx)


def forged(state: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """``state`` with ``fields`` changed and its check value recomputed: a deliberate edit,
    which only the other checks of a restore can catch."""
    from grainpack.pipeline.state import state_check

    edited = {key: value for key, value in state.items() if key != "check"} | fields
    return edited | {"check": state_check(edited)}
