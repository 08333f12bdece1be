"""What a resumed build relies on is fsync'd before it is relied on (issue 37, point 4): the
key file of a shuffled write, and a text build's plan."""

from __future__ import annotations

import os

import pytest

from grainpack.ingest.shuffled import key_file, staged_path, write_shuffled
from grainpack.ingest.transaction import write_synced
from grainpack.ingest.writer import write_corpus


@pytest.fixture
def synced(monkeypatch) -> list[str]:
    """The paths that ``os.fsync`` is called on, in order."""
    calls: list[str] = []
    fsync = os.fsync

    def record(fd: int) -> None:
        calls.append(os.readlink(f"/proc/self/fd/{fd}"))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", record)
    return calls


def test_write_synced_syncs_the_file_and_its_folder_and_leaves_no_temporary(tmp_path, synced):
    write_synced(tmp_path / "plan.json", b'{"key": 1}')
    assert synced == [str(tmp_path / "plan.json.tmp"), str(tmp_path)]
    assert (tmp_path / "plan.json").read_bytes() == b'{"key": 1}'
    assert os.listdir(tmp_path) == ["plan.json"]


def test_the_key_file_of_a_shuffled_write_is_synced_before_the_copy(tmp_path, synced):
    out = tmp_path / "out"
    key = key_file(staged_path(out))
    write_shuffled(
        out,
        lambda p: write_corpus(p, [[1], [2], [3]], overwrite=True),
        seed=0,
        shard_tokens=1 << 20,
        overwrite=False,
        key="plan-key",
    )
    assert f"{key}.tmp" in synced  # it was written with write(), never fsync'd
    first = synced.index(f"{key}.tmp")
    assert synced[first + 1] == str(tmp_path)  # its folder: the rename is durable too
    copy = [k for k, path in enumerate(synced) if "/.out.tmp-" in path]
    assert copy and min(copy) > first  # before the shuffled copy is written


def test_a_builds_plan_is_synced_before_any_part_is_written(tmp_path, synced):
    from grainpack.ingest.build import build_corpus

    inputs = []
    for k in range(3):
        inputs.append(tmp_path / f"{k}.jsonl")
        inputs[-1].write_text(f'{{"text": "document {k}"}}\n')
    build_corpus(inputs, tmp_path / "out", tokenizer="bytes", workers=1, part_bytes=1)
    plan = str(tmp_path / ".out.parts" / "plan.json.tmp")
    assert plan in synced  # it was written with write_text, never fsync'd
    first = synced.index(plan)
    assert synced[first + 1] == str(tmp_path / ".out.parts")  # and the rename
    parts = [k for k, path in enumerate(synced) if "/.part-" in path]
    assert parts and min(parts) > first  # before the first part is written
