"""Concurrent and failed writes: the old corpus stays intact, a second writer is refused.

Part of the bad-input catalogue; helpers in ``tests/bad_inputs.py``.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from bad_inputs import (  # noqa: F401
    DOCS,
    SOURCES,
    documents_of,
    edit_manifest,
    first_batch,
    fresh,
    pipeline,
    restamp,
    small_corpus,
    state_after,
    write_megatron_int64,
)

import grainpack as gp

# -- concurrent and failed writes ---------------------------------------------------------------


def test_second_writer_of_a_path_is_refused_while_the_first_writes(tmp_path):
    path = tmp_path / "c"
    first = gp.ingest.CorpusWriter(path)
    first.add([1, 2])
    message = f"another write to {path} is in progress \\(process {os.getpid()} holds"
    for overwrite in (False, True):
        with pytest.raises(gp.CorpusExistsError, match=message):
            gp.ingest.CorpusWriter(path, overwrite=overwrite)
    assert not path.exists()  # nothing is published before close()
    first.close()
    assert documents_of(path) == [[1, 2]]
    with pytest.raises(gp.CorpusExistsError, match="already holds a corpus"):
        gp.write_corpus(path, [[3]])  # the lock is free again; the corpus is protected
    assert documents_of(path) == [[1, 2]]


def failing_documents() -> Any:
    yield [1, 2]
    raise RuntimeError("the tokenizer crashed")


@pytest.mark.parametrize(
    ("documents", "error"),
    [([[1], [-5]], "token id -5 at position 0 is negative"), (None, "the tokenizer crashed")],
    ids=["bad-document", "generator-raises"],
)
def test_failed_overwrite_leaves_the_old_corpus_intact(tmp_path, documents, error):
    path = small_corpus(tmp_path / "c", shard_tokens=4)
    before = gp.open_corpus(path).fingerprint
    with pytest.raises((ValueError, RuntimeError), match=error):
        gp.write_corpus(path, documents or failing_documents(), overwrite=True)
    assert documents_of(path) == DOCS
    assert gp.verify_corpus(path).fingerprint == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]  # no staging, no lock left


def test_filtering_a_corpus_in_place_reads_the_old_while_writing_the_new(tmp_path):
    path = small_corpus(tmp_path / "c", shard_tokens=4)  # 4 shards: reads cross all of them
    src = gp.open_corpus(path)
    kept = gp.write_corpus(path, (src[i] for i in (4, 0, 2)), overwrite=True)
    assert [d.tolist() for d in kept] == [DOCS[4], DOCS[0], DOCS[2]]
    assert documents_of(path) == [DOCS[4], DOCS[0], DOCS[2]]
    # the old source now points at replaced files: it refuses to read them
    with pytest.raises(gp.CorpusError, match="changed since the corpus was opened"):
        src[1]


@pytest.mark.parametrize("overwrite", [False, True])
def test_writer_refuses_a_directory_with_other_files(tmp_path, overwrite):
    path = tmp_path / "c"
    path.mkdir()
    (path / "notes.txt").write_text("mine")
    with pytest.raises(gp.CorpusExistsError, match=r"holds files that are not part of a corpus"):
        gp.write_corpus(path, [[1]], overwrite=overwrite)
    assert (path / "notes.txt").read_text() == "mine"
