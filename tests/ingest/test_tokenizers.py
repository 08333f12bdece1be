"""Tokenizers: each kind gives its library's own ids, loads from local files, pickles small."""

from __future__ import annotations

import base64
import hashlib
import pickle

import numpy as np
import pytest

from grainpack.demo import documents
from grainpack.ingest import tokenizers as tk
from grainpack.ingest.tokenizers import ByteTokenizer, TiktokenTokenizer, load_tokenizer

TEXTS = [*documents("en")[:40], "", "naïve café ☕ <|endoftext|>", "  two  spaces\n\nand lines"]


def library_encode(kind, path):
    """The library's own single-text encode, loaded independently of grainpack."""
    if kind == "huggingface":
        import tokenizers

        model = tokenizers.Tokenizer.from_file(str(path))
        return lambda text: model.encode(text).ids
    if kind == "sentencepiece":
        import sentencepiece

        model = sentencepiece.SentencePieceProcessor(model_file=str(path))
        return model.encode
    model = load_tokenizer(path).model  # a tiktoken.Encoding built from the local ranks file
    return model.encode_ordinary


@pytest.mark.parametrize("kind", ["huggingface", "sentencepiece", "tiktoken"])
def test_encode_batch_equals_the_librarys_encode(tokenizer_files, kind):
    path = tokenizer_files[kind]
    tokenizer = load_tokenizer(path)
    assert type(tokenizer).kind == kind
    encode = library_encode(kind, path)
    expected = [list(encode(text)) for text in TEXTS]
    assert [list(ids) for ids in tokenizer.encode_batch(TEXTS)] == expected
    assert [list(ids) for ids in tokenizer.with_threads(1).encode_batch(TEXTS)] == expected
    assert max(max(ids, default=0) for ids in expected) < tokenizer.vocab_size


def test_a_tokenizer_json_padding_and_truncation_are_turned_off(tokenizer_files, tmp_path):
    # as sentence-transformers files ship: pads to a batch's longest text, cuts at max_length
    import tokenizers

    model = tokenizers.Tokenizer.from_file(str(tokenizer_files["huggingface"]))
    plain = [model.encode(text).ids for text in TEXTS]
    model.enable_padding(pad_id=0)
    model.enable_truncation(max_length=8)
    model.save(str(tmp_path / "tokenizer.json"))
    assert [len(e.ids) for e in model.encode_batch(TEXTS[:2])] == [8, 8]  # the file's settings
    tokenizer = load_tokenizer(tmp_path / "tokenizer.json")
    got = tokenizer.encode_batch(TEXTS)
    assert [list(ids) for ids in got] == plain and max(map(len, plain)) > 8
    # recorded: a build or merge never mixes these ids with ones that honoured the file
    assert tokenizer.identity()["turned_off"] == ["padding", "truncation"]
    assert "turned_off" not in load_tokenizer(tokenizer_files["huggingface"]).identity()


def test_tiktoken_encoding_is_the_plain_text_encoding(tokenizer_files):
    encoding = load_tokenizer(tokenizer_files["tiktoken"]).model
    assert encoding.encode(TEXTS[0]) == encoding.encode_ordinary(TEXTS[0])
    assert encoding.decode(encoding.encode_ordinary(TEXTS[-2])) == TEXTS[-2]


def test_byte_tokenizer_is_utf8():
    ids = ByteTokenizer().encode_batch(["aé", ""])
    assert [x.tolist() for x in ids] == [[97, 195, 169], []]
    assert ByteTokenizer().identity() == {"kind": "bytes", "vocab_size": 256}


def test_identity_names_the_file_and_its_hash(tokenizer_files):
    path = tokenizer_files["sentencepiece"]
    assert load_tokenizer(path).identity() == {
        "kind": "sentencepiece",
        "file": "spm.model",
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "vocab_size": 300,
    }
    assert load_tokenizer(tokenizer_files["tiktoken"]).identity()["pattern"] == "cl100k_base"


def test_specs_kind_prefix_and_directory(tokenizer_files, tmp_path):
    json_file = tokenizer_files["huggingface"]
    assert load_tokenizer(json_file.parent).path == json_file  # a directory with tokenizer.json
    renamed = tmp_path / "spm.bin"
    renamed.write_bytes(tokenizer_files["sentencepiece"].read_bytes())
    assert load_tokenizer(f"sp:{renamed}").vocab_size == 300
    assert load_tokenizer(f"sentencepiece:{renamed}").kind == "sentencepiece"
    assert load_tokenizer("bytes").vocab_size == 256


def test_bad_specs_and_files(tmp_path):
    with pytest.raises(ValueError, match=r"expected 'bytes', a tokenizer.json"):
        load_tokenizer(tmp_path / "vocab.txt")
    with pytest.raises(FileNotFoundError, match="no such huggingface tokenizer file"):
        load_tokenizer(tmp_path / "missing.json")
    (tmp_path / "broken.json").write_text('{"not": "a tokenizer"}')
    with pytest.raises(ValueError, match="could not load it as a huggingface tokenizer"):
        load_tokenizer(tmp_path / "broken.json")
    (tmp_path / "broken.model").write_bytes(b"\x00garbage")
    with pytest.raises(ValueError, match="could not load it as a sentencepiece tokenizer"):
        load_tokenizer(tmp_path / "broken.model")
    (tmp_path / "broken.tiktoken").write_text("not-base64 x\n")
    with pytest.raises(ValueError, match="could not load it as a tiktoken tokenizer"):
        load_tokenizer(tmp_path / "broken.tiktoken")
    ranks = [f"{base64.b64encode(bytes([b])).decode()} {b}\n" for b in range(256) if b != 122]
    (tmp_path / "noz.tiktoken").write_text("".join(ranks))  # tiktoken panicked on a "z"
    with pytest.raises(ValueError, match=r"1 of the 256 single bytes have no rank \(e.g. b'z'\)"):
        load_tokenizer(tmp_path / "noz.tiktoken")


def test_token_ids_of_strings(tokenizer_files):
    hf = load_tokenizer(tokenizer_files["huggingface"])
    assert hf.token_id("<|endoftext|>") == 0
    with pytest.raises(ValueError, match="no token '</s>'"):
        hf.token_id("</s>")
    sp = load_tokenizer(tokenizer_files["sentencepiece"])
    assert sp.token_id("</s>") == 2
    with pytest.raises(ValueError, match="no piece"):
        sp.token_id("<|endoftext|>")
    with pytest.raises(ValueError, match="no token strings"):
        ByteTokenizer().token_id("x")


def test_pickle_holds_no_model(tokenizer_files):
    tokenizer = load_tokenizer(tokenizer_files["huggingface"])
    data = pickle.dumps(tokenizer)
    assert len(data) < 1000  # the path and options, not the model
    assert pickle.loads(data).encode_batch(TEXTS[:3]) == tokenizer.encode_batch(TEXTS[:3])


def test_known_tiktoken_files_get_their_pattern_and_special_tokens(tokenizer_files, monkeypatch):
    path = tokenizer_files["tiktoken"]
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    monkeypatch.setitem(tk._TIKTOKEN_FILES, digest, ("o200k_base", {"<|endoftext|>": 399}))
    tokenizer = load_tokenizer(path)
    assert tokenizer.pattern == "o200k_base" and tokenizer.token_id("<|endoftext|>") == 399
    assert tokenizer.vocab_size == 400
    ids = tokenizer.encode_batch(["a <|endoftext|>"])[0]
    assert 399 not in ids  # text is data: the special token is not produced from text
    assert np.all(np.asarray(ids) < 399)


def test_tiktoken_patterns_by_name_and_refused_ones(tokenizer_files):
    path = tokenizer_files["tiktoken"]
    text = ["It's 12345 apples!\n"]
    r50k = TiktokenTokenizer(path, pattern="r50k_base").encode_batch(text)
    assert TiktokenTokenizer(path, pattern="p50k_base").encode_batch(text) == r50k
    with pytest.raises(ValueError, match="unknown tiktoken encoding name 'cl100k'"):
        TiktokenTokenizer(path, pattern="cl100k")
    # a regex that leaves text unmatched would silently drop it: refused when loaded
    with pytest.raises(ValueError, match=r"split pattern '\[a-z\]\+' does not cover all text"):
        TiktokenTokenizer(path, pattern="[a-z]+").encode_batch(text)


def test_an_unknown_tiktoken_file_warns_which_pattern_splits_it(tokenizer_files, recwarn):
    path = tokenizer_files["tiktoken"]  # a BPE of its own: not a published encoding
    with pytest.warns(UserWarning, match="split with cl100k_base's pattern; pass pattern="):
        assert load_tokenizer(path).pattern == "cl100k_base"
    recwarn.clear()
    assert load_tokenizer(path, pattern="r50k_base").pattern == "r50k_base"
    assert not [w for w in recwarn if "tiktoken" in str(w.message)]
