"""open_corpus on the flat-shard index.json format and Megatron .bin/.idx (no conversion)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from grainpack.corpus.formats import fingerprint, open_corpus
from grainpack.ingest.writer import shuffle_corpus


def _docs(src) -> list[list[int]]:
    return [src[i].tolist() for i in range(len(src))]


# -- flat-shard format ----------------------------------------------------------------------------


def _write_seed(path: Path, shards: dict[str, list[int]], counts: dict[str, int] | None = None):
    path.mkdir(parents=True, exist_ok=True)
    for name, tokens in shards.items():
        (path / name).write_bytes(struct.pack(f"<{len(tokens)}H", *tokens))
    index = counts if counts is not None else {k: len(v) for k, v in shards.items()}
    (path / "index.json").write_text(json.dumps(index))


SEED = {"b.bin": [5, 0, 6, 7, 0], "a.bin": [1, 2, 0, 3], "c.bin": [], "d.bin": [65535]}


def test_open_corpus_flat_layout_one_document_per_shard(tmp_path):
    _write_seed(tmp_path, SEED)
    src = open_corpus(tmp_path)
    # Sorted names a, b, (c empty: skipped), d.
    assert _docs(src) == [[1, 2, 0, 3], [5, 0, 6, 7, 0], [65535]]
    assert (src.dtype, src.num_tokens, src.eos_id) == (np.dtype("uint16"), 10, None)


def test_open_corpus_flat_layout_splits_after_eos(tmp_path):
    _write_seed(tmp_path, SEED)
    src = open_corpus(tmp_path, eos_id=0)
    # a: [1,2,0] + trailing [3]; b: [5,0], [6,7,0]; d: [65535] (no eos: one document).
    assert _docs(src) == [[1, 2, 0], [3], [5, 0], [6, 7, 0], [65535]]
    assert src.lengths.tolist() == [3, 1, 2, 3, 1]
    assert src.eos_id == 0


def test_open_corpus_flat_layout_reads_only_indexed_tokens(tmp_path):
    _write_seed(tmp_path, {"x.bin": [4, 5, 6]}, counts={"x.bin": 2})
    assert _docs(open_corpus(tmp_path)) == [[4, 5]]


def test_open_corpus_flat_layout_errors(tmp_path):
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


def test_fingerprint_flat_layout_depends_on_eos_and_sizes(tmp_path):
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
    """Writes PREFIX.bin/.idx from Megatron-LM's documented byte layout (struct only)."""
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


@pytest.mark.parametrize("code", [4, 3])  # int32, int16
def test_negative_ids_of_a_signed_megatron_file_never_reach_documents_or_batches(tmp_path, code):
    import grainpack as gp

    _write_megatron(tmp_path / "data", [[5, 6, 7], [8, -1, 9], [1, 2, 3, 4]], code=code)
    src = open_corpus(tmp_path / "data")
    assert src[0].tolist() == [5, 6, 7]
    with pytest.raises(gp.CorpusError, match=r"data.bin: token id -1 at token 4 \(stream posi"):
        src[1]
    for read in (  # the specification's APIs read through read_into
        lambda: src.read_into(np.zeros(10, np.uint32), 0),  # was cast to 4294967295
        lambda: gp.pack_documents(src, [1, 0], 4, pad_id=0, boundary_id=10),
        lambda: [gp.PackedStream(str(tmp_path / "data"), 4, 0).get(w) for w in range(2)],
    ):
        with pytest.raises(gp.CorpusError, match="token id -1 at token 4"):
            read()
    with pytest.raises(gp.CorpusError, match="at token 4 of shard 0 of source 'm' is negative"):
        config = gp.PipelineConfig(
            sources={"m": str(tmp_path / "data")}, block=4, global_batch_size=3, boundary_id=10
        )
        next(iter(gp.make_dataset(config, process_index=0, process_count=1)))


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


@pytest.mark.parametrize(("code", "dtype"), [(1, "uint16"), (3, "uint16"), (4, "uint32")])
def test_shuffling_a_megatron_corpus_keeps_the_smallest_dtype(tmp_path, code, dtype):
    docs = [[1, 2, 3], [4], [200, 5]]
    _write_megatron(tmp_path / "data", docs, code=code)
    out = shuffle_corpus(tmp_path / "data", tmp_path / "out", seed=0)
    assert out.dtype == np.dtype(dtype)  # as convert_corpus: uint16 for 1-2 byte tokens
    assert sorted(_docs(out)) == sorted(docs)
