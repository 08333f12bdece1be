"""Tests for grainpack.corpus: native format writer/reader, seed-layout and Megatron readers."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from grainpack.corpus import CorpusError, fingerprint, open_corpus, read_manifest
from grainpack.writer import CorpusWriter, write_corpus

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
        "version": 1,
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


# -- writer validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "kwargs", "error", "match"),
    [
        ([1.0, 2.0], {}, TypeError, "document 1: expected integer token ids"),  # floats
        ([[1, 2]], {}, ValueError, r"document 1: expected a 1-D .* shape \(1, 2\)"),  # 2-D
        ([3, -4], {}, ValueError, "document 1: token id -4 at position 1 is negative"),
        ([1, 70000], {}, ValueError, r"document 1: token id 70000 at position 1 .*dtype='uint32'"),
        ([2**32], {"dtype": "uint32"}, ValueError, "token id 4294967296 at position 0"),
        ([1, 12], {"vocab_size": 12}, ValueError, "token id 12 at position 1 is >= vocab_size=12"),
        (["a"], {}, TypeError, "expected integer token ids"),  # strings
    ],
)
def test_corpus_writer_rejects_bad_documents(tmp_path, doc, kwargs, error, match):
    with pytest.raises(error, match=match), CorpusWriter(tmp_path, **kwargs) as w:
        w.add([0])
        w.add(doc)
    assert not (tmp_path / "manifest.json").exists()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dtype": "int32"}, "dtype must be 'uint16' or 'uint32'"),
        ({"dtype": "float"}, "dtype must be 'uint16' or 'uint32'"),
        ({"vocab_size": 70000}, r"vocab_size must be .*use dtype='uint32'"),
        ({"vocab_size": 0}, "vocab_size must be"),
        ({"vocab_size": 10, "eos_id": 10}, r"eos_id must be an int in \[0, 10\)"),
        ({"eos_id": -1}, "eos_id must be"),
        ({"shard_tokens": 0}, "shard_tokens must be a positive int"),
    ],
)
def test_corpus_writer_rejects_bad_options(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        CorpusWriter(tmp_path, **kwargs)


def test_corpus_writer_refuses_existing_corpus_unless_overwrite(tmp_path):
    write_corpus(tmp_path, [[1, 2, 3], [4]], shard_tokens=1)  # 2 shards
    with pytest.raises(FileExistsError, match="overwrite=True"):
        write_corpus(tmp_path, [[5]])
    src = write_corpus(tmp_path, [[5]], overwrite=True)
    assert _docs(src) == [[5]]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "manifest.json",
        "offsets-00000.bin",
        "tokens-00000.bin",
    ]


def test_corpus_writer_interrupted_leaves_no_corpus_and_rewrite_succeeds(tmp_path):
    with pytest.raises(RuntimeError, match="boom"), CorpusWriter(tmp_path, shard_tokens=2) as w:
        w.add([1, 2])
        w.add([3, 4])
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []  # no manifest; the finished shard 0 is removed too
    with pytest.raises(CorpusError, match="not a corpus"):
        open_corpus(tmp_path)
    (tmp_path / "tokens-00007.bin").write_bytes(b"stale")  # left by a crashed run
    assert _docs(write_corpus(tmp_path, [[9]])) == [[9]]
    assert not (tmp_path / "tokens-00007.bin").exists()


def test_corpus_writer_overwrite_removes_manifest_first(tmp_path):
    write_corpus(tmp_path, [[1]])
    with pytest.raises(RuntimeError), CorpusWriter(tmp_path, overwrite=True) as w:
        w.add([2])
        raise RuntimeError("crash mid-overwrite")
    with pytest.raises(CorpusError, match="not a corpus"):
        open_corpus(tmp_path)


# -- native reader errors -------------------------------------------------------------------------


def test_open_corpus_not_a_corpus(tmp_path):
    with pytest.raises(
        CorpusError, match=r"not a corpus: expected a directory with manifest\.json"
    ):
        open_corpus(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        open_corpus(tmp_path / "nothing")
    (tmp_path / "tokens-00000.bin").write_bytes(b"")
    with pytest.raises(CorpusError, match="no manifest: the write was interrupted"):
        open_corpus(tmp_path)


def _edit_manifest(path: Path, **changes) -> None:
    m = json.loads((path / "manifest.json").read_text())
    m.update(changes)
    (path / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"version": 2}, "version=2 .this grainpack reads 1"),
        ({"dtype": "int64"}, "dtype='int64'"),
        ({"num_tokens": 99}, r"num_tokens=99 \(the shards sum to 3\)"),
        ({"vocab_size": "big"}, "vocab_size='big'"),
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
    with pytest.raises(CorpusError, match="never decrease"):
        src[0]


def test_corpus_writer_accepts_numpy_integer_options(tmp_path):
    src = write_corpus(tmp_path, [[1]], vocab_size=np.int64(5), eos_id=np.uint16(1))
    assert (src.vocab_size, src.eos_id) == (5, 1)
    assert type(open_corpus(tmp_path, eos_id=np.int32(1)).eos_id) is int


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


# -- seed layout ----------------------------------------------------------------------------------


def _write_seed(path: Path, shards: dict[str, list[int]], counts: dict[str, int] | None = None):
    path.mkdir(parents=True, exist_ok=True)
    for name, tokens in shards.items():
        (path / name).write_bytes(struct.pack(f"<{len(tokens)}H", *tokens))
    index = counts if counts is not None else {k: len(v) for k, v in shards.items()}
    (path / "index.json").write_text(json.dumps(index))


SEED = {"b.bin": [5, 0, 6, 7, 0], "a.bin": [1, 2, 0, 3], "c.bin": [], "d.bin": [65535]}


def test_open_corpus_seed_layout_one_document_per_shard(tmp_path):
    _write_seed(tmp_path, SEED)
    src = open_corpus(tmp_path)
    # Sorted names a, b, (c empty: skipped), d.
    assert _docs(src) == [[1, 2, 0, 3], [5, 0, 6, 7, 0], [65535]]
    assert (src.dtype, src.num_tokens, src.eos_id) == (np.dtype("uint16"), 10, None)


def test_open_corpus_seed_layout_splits_after_eos(tmp_path):
    _write_seed(tmp_path, SEED)
    src = open_corpus(tmp_path, eos_id=0)
    # a: [1,2,0] + trailing [3]; b: [5,0], [6,7,0]; d: [65535] (no eos: one document).
    assert _docs(src) == [[1, 2, 0], [3], [5, 0], [6, 7, 0], [65535]]
    assert src.lengths.tolist() == [3, 1, 2, 3, 1]
    assert src.eos_id == 0


def test_open_corpus_seed_layout_reads_only_indexed_tokens(tmp_path):
    _write_seed(tmp_path, {"x.bin": [4, 5, 6]}, counts={"x.bin": 2})
    assert _docs(open_corpus(tmp_path)) == [[4, 5]]


def test_open_corpus_seed_layout_errors(tmp_path):
    _write_seed(tmp_path, {"x.bin": [4, 5]}, counts={"x.bin": 3})
    with pytest.raises(ValueError, match=r"index\.json says 3 uint16 tokens, file is 4 bytes"):
        open_corpus(tmp_path)
    _write_seed(tmp_path, {}, counts={"gone.bin": 3})
    with pytest.raises(ValueError, match="file is missing"):
        open_corpus(tmp_path)
    (tmp_path / "index.json").write_text('{"x.bin": -1}')
    with pytest.raises(ValueError, match="token count"):
        open_corpus(tmp_path)
    _write_seed(tmp_path, {"x.bin": [4, 5]})
    with pytest.raises(ValueError, match="eos_id must fit"):
        open_corpus(tmp_path, eos_id=70000)


def test_fingerprint_seed_layout_depends_on_eos_and_sizes(tmp_path):
    _write_seed(tmp_path / "a", SEED)
    _write_seed(tmp_path / "b", SEED)
    assert fingerprint(tmp_path / "a") == fingerprint(tmp_path / "b")
    assert fingerprint(tmp_path / "a", eos_id=0) != fingerprint(tmp_path / "a")
    (tmp_path / "b" / "a.bin").write_bytes(struct.pack("<5H", 1, 2, 0, 3, 9))  # longer file
    assert fingerprint(tmp_path / "b") != fingerprint(tmp_path / "a")


# -- Megatron -------------------------------------------------------------------------------------

_FORMATS = {8: "H", 4: "i", 3: "h", 1: "B"}  # Megatron dtype code -> struct format


def _write_megatron(
    prefix: Path, docs, *, code=8, version=1, magic=b"MMIDIDX\x00\x00", pointers=None
) -> None:
    """Writes PREFIX.bin/.idx from the byte layout in peers.md §1.1 (struct only)."""
    fmt = _FORMATS.get(code, "H")
    size = struct.calcsize(fmt)
    prefix.with_suffix(".bin").write_bytes(
        b"".join(struct.pack(f"<{len(d)}{fmt}", *d) for d in docs)
    )
    lengths = [len(d) for d in docs]
    if pointers is None:
        pointers = [sum(lengths[:i]) * size for i in range(len(docs))]
    s = len(docs)
    idx = magic + struct.pack("<QBQQ", version, code, s, s + 1)
    idx += struct.pack(f"<{s}i", *lengths) + struct.pack(f"<{s}q", *pointers)
    idx += struct.pack(f"<{s + 1}q", *range(s + 1))
    prefix.with_suffix(".idx").write_bytes(idx)


MEGA = [[1, 2, 3], [], [65535, 4]]


@pytest.mark.parametrize("suffix", ["", ".bin", ".idx"])
def test_open_corpus_megatron_uint16(tmp_path, suffix):
    _write_megatron(tmp_path / "data", MEGA)
    src = open_corpus(f"{tmp_path / 'data'}{suffix}")
    assert _docs(src) == MEGA
    assert (src.dtype, src.num_tokens, src.lengths.tolist()) == (np.dtype("uint16"), 5, [3, 0, 2])


def test_open_corpus_megatron_int32(tmp_path):
    docs = [[100000, 7], [2**31 - 1]]
    _write_megatron(tmp_path / "data", docs, code=4)
    src = open_corpus(tmp_path / "data", eos_id=7)
    assert _docs(src) == docs
    assert (src.dtype, src.eos_id) == (np.dtype("int32"), 7)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"magic": b"NOTANIDX\x00"}, "bad magic"),
        ({"version": 2}, "version 2, only MMIDIDX version 1"),
        ({"code": 6}, "dtype code 6 is not an integer token dtype"),  # float64
        ({"pointers": [0, 8, 8]}, "sequence 1 starts at byte 8, expected 6"),
    ],
)
def test_open_corpus_megatron_rejects_bad_index(tmp_path, kwargs, match):
    _write_megatron(tmp_path / "data", MEGA, **kwargs)
    with pytest.raises(ValueError, match=match):
        open_corpus(tmp_path / "data")


def test_open_corpus_megatron_rejects_truncation(tmp_path):
    _write_megatron(tmp_path / "data", MEGA)
    idx = tmp_path / "data.idx"
    raw = idx.read_bytes()
    idx.write_bytes(raw[:-1])
    with pytest.raises(ValueError, match=r"101 bytes, expected 102 for 3 sequences"):
        open_corpus(tmp_path / "data")
    idx.write_bytes(raw[:20])
    with pytest.raises(ValueError, match="shorter than the 34-byte header"):
        open_corpus(tmp_path / "data")
    idx.write_bytes(raw)
    (tmp_path / "data.bin").write_bytes(b"\x00" * 9)
    with pytest.raises(ValueError, match="9 bytes, the index needs 10"):
        open_corpus(tmp_path / "data")
    (tmp_path / "data.bin").unlink()
    with pytest.raises(ValueError, match=r"data\.bin is missing"):
        open_corpus(tmp_path / "data")


def test_fingerprint_megatron_is_content_derived(tmp_path):
    _write_megatron(tmp_path / "a", MEGA)
    _write_megatron(tmp_path / "b", MEGA)
    _write_megatron(tmp_path / "c", [[1, 2, 3], [], [65535, 5]])  # same idx, other tokens
    assert fingerprint(tmp_path / "a") == fingerprint(tmp_path / "b")
    # Only the .idx and the .bin size enter the digest (a cheap fingerprint; verify checks data).
    assert fingerprint(tmp_path / "c") == fingerprint(tmp_path / "a")
    _write_megatron(tmp_path / "d", [[1, 2], [3], [65535, 4]])
    assert fingerprint(tmp_path / "d") != fingerprint(tmp_path / "a")
