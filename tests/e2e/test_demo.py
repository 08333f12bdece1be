"""The embedded demo corpus: real text, byte-level tokens, two scripts."""

from __future__ import annotations

import pytest

import grainpack as gp
from grainpack import demo


def test_encode_decode_round_trip_and_boundaries():
    tokens = demo.encode("Zen αβ")
    assert tokens.tolist() == [90, 101, 110, 32, 206, 177, 206, 178]  # UTF-8 bytes
    assert demo.decode(tokens) == "Zen αβ"
    assert demo.decode([72, 105, demo.BOUNDARY_ID]) == "Hi¶"


def test_greek_script_is_the_same_text_in_more_bytes():
    en, el = demo.documents("en"), demo.documents("el")
    assert len(en) == len(el) > 100
    assert all(len(e) == len(g) for e, g in zip(en, el))  # one letter for one letter
    ratio = sum(len(d.encode()) for d in el) / sum(len(d.encode()) for d in en)
    assert 1.5 < ratio < 2.0  # Greek letters take two UTF-8 bytes
    with pytest.raises(ValueError, match="'en' or 'el'"):
        demo.documents("fr")


def test_demo_corpus_is_written_once_and_verifies(tmp_path):
    paths = demo.write_demo_corpus(tmp_path)
    first = {k: gp.open_corpus(p).fingerprint for k, p in paths.items()}
    assert demo.write_demo_corpus(tmp_path) == paths  # cached: not rewritten
    assert {k: gp.open_corpus(p).fingerprint for k, p in paths.items()} == first
    for path in paths.values():
        report = gp.verify_corpus(path)
        assert report.vocab_size == demo.VOCAB_SIZE and report.max_token_id < 256


def test_run_demo_explains_itself_and_refuses_bad_steps(tmp_path, capsys):
    with pytest.raises(ValueError, match="steps must be >= 1, got steps=0"):
        demo.run_demo(directory=tmp_path, steps=0)
    assert capsys.readouterr().out == ""  # nothing printed before the error
    result = demo.run_demo(directory=tmp_path, steps=2, block=64, batch_size=4)
    out = capsys.readouterr().out
    assert result["tokens_per_second"] > 0
    assert "1.71x the tokens" in out and "target: share of rows" in out
    assert "(en) holds" in out and out.rstrip().endswith("resumes it")
