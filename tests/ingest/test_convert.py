"""Tests for grainpack.convert: .npy, JSON lines and seed/Megatron inputs to the native format."""

from __future__ import annotations

import gzip
import json
import struct

import numpy as np
import pytest

from grainpack.corpus.errors import CorpusExistsError
from grainpack.corpus.formats import open_corpus
from grainpack.ingest.convert import convert_corpus, convert_jsonl, convert_npy
from grainpack.ingest.writer import write_corpus


def _docs(src) -> list[list[int]]:
    return [src[i].tolist() for i in range(len(src))]


def test_convert_npy_one_document_per_1d_file_and_per_2d_row(tmp_path):
    np.save(tmp_path / "b.npy", np.array([[5, 6, 7], [8, 9, 10]], dtype=np.int32))
    np.save(tmp_path / "a.npy", np.array([1, 2], dtype=np.uint16))
    src = convert_npy([tmp_path / "b.npy", tmp_path / "a.npy"], tmp_path / "out", shard_tokens=3)
    assert _docs(src) == [[5, 6, 7], [8, 9, 10], [1, 2]]  # the given order
    assert len(src.shards) == 3
    by_dir = convert_npy(tmp_path, tmp_path / "out2", dtype="uint32", progress=True)
    assert _docs(by_dir) == [[1, 2], [5, 6, 7], [8, 9, 10]]  # a directory: sorted file names
    assert by_dir.dtype == np.uint32


@pytest.mark.parametrize(
    ("array", "error", "match"),
    [
        (np.zeros((2, 2, 2), np.int32), ValueError, r"found shape \(2, 2, 2\)"),
        (np.array([1.5, 2.0]), ValueError, "expected integer token ids, found dtype float64"),
        (np.array([[1, 70000]]), ValueError, r"x\.npy row 0: document 0: token id 70000"),
    ],
)
def test_convert_npy_rejects_bad_arrays(tmp_path, array, error, match):
    np.save(tmp_path / "x.npy", array)
    with pytest.raises(error, match=match):
        convert_npy(tmp_path / "x.npy", tmp_path / "out")
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_convert_npy_missing_input(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such input"):
        convert_npy(tmp_path / "nope.npy", tmp_path / "out")
    with pytest.raises(ValueError, match=r"holds no \.npy files"):
        convert_npy(tmp_path, tmp_path / "out")


def test_convert_jsonl_reads_field_skips_blank_lines_and_gzip(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"input_ids": [1, 2], "text": "x"}\n\n{"input_ids": []}\n')
    with gzip.open(tmp_path / "b.jsonl.gz", "wt") as f:
        f.write('{"input_ids": [3]}\n')
    src = convert_jsonl(tmp_path, tmp_path / "out", vocab_size=4, progress=True)
    assert _docs(src) == [[1, 2], [], [3]]
    assert src.vocab_size == 4
    (tmp_path / "c.jsonl").write_text('{"ids": [7, 8]}\n')
    assert _docs(convert_jsonl(tmp_path / "c.jsonl", tmp_path / "o2", field="ids")) == [[7, 8]]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (
            '{"input_ids": [1]}\n{"input_ids": [2,\n',
            r"bad\.jsonl:2: invalid JSON \(Expecting value at char 18 ",
        ),
        ('{"input_ids": [1], "p": -Infinity}\n', r"bad\.jsonl:1: .*\(-Infinity is not JSON"),
        (
            '{"input_ids": [1]}\n{"tokens": [2]}\n',
            r"bad\.jsonl:2: .*found \['tokens'\]; pass field=",
        ),
        ('"1 2"\n', r"bad\.jsonl:1: expected a list of ids, or an object with one"),
        ('{"input_ids": "1 2"}\n', r"bad\.jsonl:1: expected a list of ids, or an object"),
        ('{"input_ids": [1.5]}\n', r"bad\.jsonl:1: document 0: expected integer token ids"),
        ('\n{"input_ids": [-3]}\n', r"bad\.jsonl:2: document 0: token id -3"),
        ('{"input_ids": [1]}\n{"input_ids": [2], "n": "\xff"}\n', r"bad\.jsonl:2: not UTF-8"),
        ("[1]\n" + "[" * 100_000 + "\n", r"bad\.jsonl:2: the JSON line cannot be read .maximum"),
        ("[1]\n[" + "9" * 5000 + "]\n", r"bad\.jsonl:2: the JSON line cannot be read .Exceeds"),
        ('{"input_ids": [1, 2, 3], "input_ids": [7]}\n', r"bad\.jsonl:1: .*'input_ids' twice"),
    ],
)
def test_convert_jsonl_bad_line_names_file_and_line(tmp_path, text, match):
    (tmp_path / "bad.jsonl").write_bytes(text.encode("latin-1"))
    with pytest.raises(ValueError, match=match):
        convert_jsonl(tmp_path / "bad.jsonl", tmp_path / "out")
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_convert_corpus_flat_layout_with_eos(tmp_path):
    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "s0.bin").write_bytes(struct.pack("<5H", 1, 0, 2, 3, 0))
    (seed / "s1.bin").write_bytes(struct.pack("<2H", 4, 5))
    (seed / "index.json").write_text(json.dumps({"s1.bin": 2, "s0.bin": 5, "s2.bin": 0}))
    src = convert_corpus(seed, tmp_path / "out", eos_id=0, progress=True)
    assert _docs(src) == [[1, 0], [2, 3, 0], [4, 5]]
    assert (src.eos_id, src.dtype) == (0, np.dtype("uint16"))
    assert _docs(open_corpus(tmp_path / "out")) == _docs(src)


def test_convert_corpus_megatron_int32_defaults_to_uint32(tmp_path):
    docs = [[100000, 1], [2]]
    (tmp_path / "m.bin").write_bytes(struct.pack("<3i", 100000, 1, 2))
    idx = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 4, 2, 3)
    idx += struct.pack("<2i", 2, 1) + struct.pack("<2q", 0, 8) + struct.pack("<3q", 0, 1, 2)
    (tmp_path / "m.idx").write_bytes(idx)
    src = convert_corpus(tmp_path / "m", tmp_path / "out")
    assert (_docs(src), src.dtype) == (docs, np.dtype("uint32"))
    with pytest.raises(ValueError, match=r"token id 100000 .*use dtype='uint32'"):
        convert_corpus(tmp_path / "m", tmp_path / "out16", dtype="uint16")


def test_convert_corpus_refuses_same_path(tmp_path):
    write_corpus(tmp_path, [[1]])
    with pytest.raises(ValueError, match="the output must differ from the input corpus"):
        convert_corpus(tmp_path, tmp_path, overwrite=True)


def test_a_copy_refuses_its_output_before_verifying_the_input(tmp_path, monkeypatch):
    # verifying reads every byte: an output that will be refused must be refused first
    from grainpack.corpus import verify
    from grainpack.ingest import convert, writer

    write_corpus(tmp_path / "src", [[1, 2], [3]])
    write_corpus(tmp_path / "out", [[9]])

    def unexpected(*args, **kwargs):
        raise AssertionError("verified before the output was checked")

    monkeypatch.setattr(writer, "verify_corpus", unexpected)  # what both copies call
    monkeypatch.setattr(verify, "verify_corpus", unexpected)
    with pytest.raises(CorpusExistsError, match="already holds a corpus"):
        convert.convert_corpus(tmp_path / "src", tmp_path / "out")
    with pytest.raises(CorpusExistsError, match="already holds a corpus"):
        writer.shuffle_corpus(tmp_path / "src", tmp_path / "out", seed=0)
