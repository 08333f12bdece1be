"""grainpack.corpus: the native format read back, manifest checks, fingerprints."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from grainpack.corpus.errors import CorpusError
from grainpack.corpus.formats import fingerprint, open_corpus
from grainpack.corpus.native import read_manifest
from grainpack.ingest.writer import CorpusWriter, write_corpus

DOCS = [[1, 2, 3], [], [4, 5, 6, 7, 8], [9], [], [10, 11]]


def _docs(src) -> list[list[int]]:
    return [src[i].tolist() for i in range(len(src))]


# -- native round trip ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["uint16", "uint32"])
def test_write_corpus_round_trip_several_shards(tmp_path, dtype):
    docs = [[d + 70000 if dtype == "uint32" else d for d in doc] for doc in DOCS]
    src = write_corpus(tmp_path / "c", docs, dtype=dtype, shard_tokens=4)
    # shard 0: [1,2,3] + [] (3 tokens); [4..8] alone (would exceed 4); [9] + [] + [10,11].
    assert [(s.num_tokens, s.num_documents) for s in src.shards] == [(3, 2), (5, 1), (3, 3)]
    assert src.dtype == np.dtype(dtype)
    reopened = open_corpus(tmp_path / "c")
    assert _docs(reopened) == docs
    assert reopened.offsets.tolist() == [0, 3, 3, 8, 9, 9, 11]
    assert reopened.fingerprint == src.fingerprint


def test_write_corpus_manifest_layout(tmp_path):
    write_corpus(tmp_path, [[1, 2], [3]], vocab_size=10, eos_id=3, shard_tokens=2)
    m = json.loads((tmp_path / "manifest.json").read_text())
    assert {k: m[k] for k in ("format", "version", "dtype", "vocab_size", "eos_id")} == {
        "format": "grainpack",
        "version": 2,
        "dtype": "uint16",
        "vocab_size": 10,
        "eos_id": 3,
    }
    assert (m["num_documents"], m["num_tokens"]) == (2, 3)
    assert [s["tokens_file"] for s in m["shards"]] == ["tokens-00000.bin", "tokens-00001.bin"]
    assert [s["offsets_file"] for s in m["shards"]] == ["offsets-00000.bin", "offsets-00001.bin"]
    # Raw little-endian bytes, independent of grainpack's readers.
    assert (tmp_path / "tokens-00000.bin").read_bytes() == struct.pack("<2H", 1, 2)
    assert (tmp_path / "offsets-00000.bin").read_bytes() == struct.pack("<2q", 0, 2)
    assert (tmp_path / "offsets-00001.bin").read_bytes() == struct.pack("<2q", 0, 1)
    # Block token totals per shard (blocks of 256 documents: one part of block 0 each).
    assert m["summary_block_docs"] == 256
    assert [s["summary_file"] for s in m["shards"]] == ["summary-00000.bin", "summary-00001.bin"]
    assert (tmp_path / "summary-00001.bin").read_bytes() == struct.pack("<q", 1)
    assert m["shards"][0]["summary_sha256"] == hashlib.sha256(struct.pack("<q", 2)).hexdigest()
    assert m["shards"][0]["tokens_sha256"] == hashlib.sha256(b"\x01\x00\x02\x00").hexdigest()
    assert (
        m["shards"][1]["offsets_sha256"]
        == hashlib.sha256(b"\x00" * 8 + b"\x01" + b"\x00" * 7).hexdigest()
    )


def test_write_corpus_accepts_arrays_and_empty_corpus(tmp_path):
    src = write_corpus(tmp_path / "a", [np.array([7, 8], np.int8), np.arange(3, dtype=np.uint64)])
    assert _docs(src) == [[7, 8], [0, 1, 2]]
    empty = write_corpus(tmp_path / "b", [])
    assert (len(empty), empty.num_tokens, empty.offsets.tolist()) == (0, 0, [0])


def test_corpus_writer_add_returns_index_and_counts(tmp_path):
    with CorpusWriter(tmp_path) as w:
        assert [w.add([1]), w.add([]), w.add([2, 3])] == [0, 1, 2]
        assert (w.num_documents, w.num_tokens) == (3, 3)
    with pytest.raises(ValueError, match="closed"):
        w.add([1])


# -- native reader errors -------------------------------------------------------------------------


def test_open_corpus_not_a_corpus(tmp_path):
    with pytest.raises(
        CorpusError, match=r"not a corpus: expected a directory with manifest\.json"
    ):
        open_corpus(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        open_corpus(tmp_path / "nothing")
    (tmp_path / "tokens-00000.bin").write_bytes(b"")
    with pytest.raises(CorpusError, match=r"no manifest: a write interrupted .* overwrite=True"):
        open_corpus(tmp_path)
    write_corpus(tmp_path / "c", [[1, 2]])
    with pytest.raises(CorpusError, match=r"manifest.json is a file of the corpus: open its fold"):
        open_corpus(tmp_path / "c" / "manifest.json")
    with pytest.raises(CorpusError, match=r"tokens-00000.bin is a file of the corpus: open its"):
        open_corpus(tmp_path / "c" / "tokens-00000.bin")  # was "a Megatron prefix: no .idx"
    write_corpus(tmp_path / "all" / "en", [[1]]), write_corpus(tmp_path / "all" / "fr", [[2]])
    with pytest.raises(CorpusError, match=r"all is not a corpus: .* It holds corpora: en, fr\."):
        open_corpus(tmp_path / "all")
    for eos_id in (-1, 2**40):  # 2**40 was taken (no id of any corpus)
        with pytest.raises(ValueError, match=r"eos_id must be a token id \(an int in \[0, 2\*\*31"):
            open_corpus(tmp_path / "c", eos_id=eos_id)


def _edit_manifest(path: Path, **changes) -> None:
    m = json.loads((path / "manifest.json").read_text())
    m.update(changes)
    (path / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"version": 3}, r"version=3 .this grainpack reads \[1, 2\]"),
        ({"summary_block_docs": 0}, "summary_block_docs=0"),
        ({"dtype": "int64"}, "dtype='int64'"),
        ({"num_tokens": 99}, r"num_tokens=99 \(the shards sum to 3\)"),
        ({"vocab_size": "big"}, "vocab_size='big'"),
        ({"vocab_size": 2**16 + 1}, r"vocab_size=65537 \(expected 1 to 65536 for uint16"),
        ({"vocab_size": 0}, r"vocab_size=0 \(expected 1 to 65536"),
        ({"dtype": "uint32", "vocab_size": 2**40}, r"expected 1 to 4294967296 for uint32"),
        ({"format": "other"}, "format='grainpack'"),
        ({"shards": [{"tokens_file": "../x"}]}, r"shards\[0\]\.tokens_file='\.\./x'"),
    ],
)
def test_open_corpus_rejects_bad_manifest(tmp_path, changes, match):
    write_corpus(tmp_path, [[1, 2], [3]])
    _edit_manifest(tmp_path, **changes)
    with pytest.raises(CorpusError, match=match):
        open_corpus(tmp_path)


def test_open_corpus_rejects_truncated_and_missing_shards(tmp_path):
    write_corpus(tmp_path, [[1, 2], [3]])
    tokens = tmp_path / "tokens-00000.bin"
    tokens.write_bytes(tokens.read_bytes()[:-1])
    with pytest.raises(CorpusError, match=r"tokens-00000\.bin: has 5 bytes, expected 6"):
        open_corpus(tmp_path)
    tokens.unlink()
    with pytest.raises(CorpusError, match="missing"):
        open_corpus(tmp_path)


def test_open_corpus_rejects_bad_offsets_on_first_read(tmp_path):
    write_corpus(tmp_path, [[1, 2], [3]])
    (tmp_path / "offsets-00000.bin").write_bytes(struct.pack("<3q", 0, 5, 3))
    src = open_corpus(tmp_path)
    with pytest.raises(CorpusError, match=r"decrease at document 1 \(5 -> 3\)"):
        src[0]


def test_open_corpus_native_eos_must_agree(tmp_path):
    write_corpus(tmp_path, [[1, 2]], eos_id=2)
    assert open_corpus(tmp_path, eos_id=2).eos_id == 2
    with pytest.raises(ValueError, match="records eos_id=2"):
        open_corpus(tmp_path, eos_id=1)


def test_read_manifest_returns_validated_dict(tmp_path):
    write_corpus(tmp_path, [[1, 2], [3]])
    assert read_manifest(tmp_path)["num_tokens"] == 3


def test_fingerprint_is_content_derived(tmp_path):
    a = write_corpus(tmp_path / "a", DOCS).fingerprint
    assert write_corpus(tmp_path / "b", DOCS).fingerprint == a  # same content, other place
    assert write_corpus(tmp_path / "c", [*DOCS, [1]]).fingerprint != a
    assert fingerprint(tmp_path / "a") == a
    assert len(a) == 64 and int(a, 16) >= 0
