"""Shuffled writes: build_corpus(shuffle=), convert_inputs(shuffle=), resumed and locked."""

from __future__ import annotations

import numpy as np
import pytest

from grainpack.corpus.errors import CorpusExistsError
from grainpack.corpus.formats import open_corpus
from grainpack.corpus.native import read_manifest
from grainpack.ingest import build, shuffled
from grainpack.ingest.build import build_corpus
from grainpack.ingest.convert import convert_inputs
from grainpack.ingest.transaction import write_lock
from grainpack.ingest.writer import shuffle_corpus


@pytest.fixture
def texts(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text("".join(f'{{"text": "doc {i}"}}\n' for i in range(6)))
    return path


def test_build_corpus_shuffle_is_the_build_copied_shuffled(tmp_path, texts):
    # what `grainpack build --shuffle 3` wrote before it was a library option
    build_corpus(texts, tmp_path / "plain", tokenizer="bytes", eos=256, workers=1)
    shuffle_corpus(tmp_path / "plain", tmp_path / "before", seed=3, verify=False)
    src = build_corpus(texts, tmp_path / "s", tokenizer="bytes", eos=256, workers=1, shuffle=3)
    assert [bytes(d[:-1].tolist()).decode() for d in src] == [
        "doc 5", "doc 2", "doc 0", "doc 4", "doc 1", "doc 3",
    ]  # fmt: skip
    assert read_manifest(tmp_path / "s") == read_manifest(tmp_path / "before")
    for name in ("tokens-00000.bin", "offsets-00000.bin", "summary-00000.bin"):
        assert (tmp_path / "s" / name).read_bytes() == (tmp_path / "before" / name).read_bytes()
    assert read_manifest(tmp_path / "s")["shuffle_seed"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl", "before", "plain", "s"]


def test_an_interrupted_shuffle_resumes_without_tokenizing(tmp_path, texts, monkeypatch, caplog):
    copy, part, built = shuffled.shuffle_corpus, build.build_part, []

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(shuffled, "shuffle_corpus", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build_corpus(texts, tmp_path / "o", tokenizer="bytes", workers=1, shuffle=3)
    staged = tmp_path / ".o.unshuffled"
    assert open_corpus(staged).num_documents == 6 and shuffled.key_file(staged).is_file()
    monkeypatch.setattr(shuffled, "shuffle_corpus", copy)
    monkeypatch.setattr(build, "build_part", lambda *a, **k: built.append(a))
    with caplog.at_level("INFO", logger="grainpack.ingest"):
        src = build_corpus(texts, tmp_path / "o", tokenizer="bytes", workers=1, shuffle=3)
    assert built == [] and "written before (by an interrupted write)" in caplog.text
    assert bytes(src[2].tolist()).decode() == "doc 0"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl", "o"]  # staging removed
    # a build with other options (another plan) does not take the staged corpus
    monkeypatch.setattr(build, "build_part", part)
    monkeypatch.setattr(shuffled, "shuffle_corpus", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build_corpus(texts, tmp_path / "p", tokenizer="bytes", workers=1, shuffle=3)
    monkeypatch.setattr(shuffled, "shuffle_corpus", copy)
    src = build_corpus(texts, tmp_path / "p", tokenizer="bytes", eos=256, workers=1, shuffle=3)
    assert src[2].tolist() == [*b"doc 0", 256]  # with the eos: tokenized again


def test_a_shuffled_write_is_refused_while_another_runs(tmp_path, texts):
    lock = write_lock(tmp_path / ".o.unshuffled.key")
    try:
        with pytest.raises(CorpusExistsError, match=r"another shuffled write of .* in progress"):
            build_corpus(texts, tmp_path / "o", tokenizer="bytes", workers=1, shuffle=1)
    finally:
        lock.release()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl"]


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"a.npy": [[1, 2], [3, 4]], "b.npy": [5, 6]}, [[1, 2], [3, 4], [5, 6]]),  # npy
        ({"a.jsonl": "[1, 2]\n[3]\n", "b.jsonl": '{"input_ids": [4]}\n'}, [[1, 2], [3], [4]]),
    ],
)
def test_convert_inputs_takes_the_converter_of_the_files(tmp_path, files, expected):
    (tmp_path / "in").mkdir()
    for name, content in files.items():
        if name.endswith(".npy"):
            np.save(tmp_path / "in" / name, np.array(content))
        else:
            (tmp_path / "in" / name).write_text(content)
    assert [d.tolist() for d in convert_inputs(tmp_path / "in", tmp_path / "o")] == expected
    src = convert_inputs([tmp_path / "in"], tmp_path / "s", shuffle=3)
    assert [d.tolist() for d in src] == [expected[i] for i in (0, 2, 1)]
    assert read_manifest(tmp_path / "s")["shuffle_seed"] == 3
    copy = convert_inputs(tmp_path / "o", tmp_path / "c", dtype="uint32")  # one corpus
    assert [d.tolist() for d in copy] == expected and copy.dtype == np.uint32


def test_convert_inputs_refuses_text_and_mixed_kinds(tmp_path):
    (tmp_path / "a.txt").write_text("hi")
    np.save(tmp_path / "b.npy", np.array([1]))
    (tmp_path / "c.jsonl").write_text("[1]\n")
    for inputs in ([tmp_path / "a.txt"], [tmp_path / "b.npy", tmp_path / "c.jsonl"]):
        with pytest.raises(ValueError, match=r"inputs must be .npy files.*text needs a tokenizer"):
            convert_inputs(inputs, tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_convert_inputs_warns_of_an_eos_id_it_does_not_split(tmp_path):
    np.save(tmp_path / "s.npy", np.array([5, 0, 6]))
    np.save(tmp_path / "m.npy", np.array([[5, 0, 6]]))
    assert [d.tolist() for d in convert_inputs(tmp_path / "s.npy", tmp_path / "a", eos_id=0)] == [
        [5, 0],
        [6],
    ]
    with pytest.warns(UserWarning, match=r"documents of .*m\.npy are kept as they are; 0 is"):
        convert_inputs(tmp_path / "m.npy", tmp_path / "b", eos_id=0)
