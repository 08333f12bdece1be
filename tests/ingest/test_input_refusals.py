"""Small refusals of issue 37 (point 4) for text inputs: a pattern that matches nothing, an
input with no documents."""

from __future__ import annotations

import re

import pytest

from grainpack.ingest.build import build_corpus
from grainpack.ingest.text import InputNotFoundError, find_inputs


def test_a_pattern_that_matches_nothing_is_a_value_error_naming_it_and_why(tmp_path):
    # It was a bare FileNotFoundError (not a ValueError, and no fix).
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.jsonl").write_text('{"text": "x"}\n')
    cases = {
        f"{tmp_path}/missing/*.jsonl": f"{tmp_path}/missing does not exist",
        f"{tmp_path}/data/*.parquet": f"nothing in {tmp_path}/data matches it",
        f"{tmp_path}/data/a.jsonl/*": f"{tmp_path}/data/a.jsonl is a file, not a folder",
    }
    for pattern, why in cases.items():
        with pytest.raises(ValueError, match=re.escape(
            f"{pattern}: the pattern matches no file: {why}; check the pattern"
        )) as caught:  # fmt: skip
            find_inputs(pattern)
        assert isinstance(caught.value, InputNotFoundError | FileNotFoundError)


def test_a_relative_pattern_names_the_folder_it_was_read_from(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    message = (
        f"nothing/*.txt: the pattern matches no file: nothing does not exist (relative to "
        f"{tmp_path})"
    )
    with pytest.raises(InputNotFoundError, match=re.escape(message)):
        find_inputs("nothing/*.txt")


def test_a_pattern_matching_only_folders_without_input_names_what_it_matched(tmp_path):
    (tmp_path / "new").mkdir()
    (tmp_path / "notes").mkdir()
    with pytest.raises(ValueError, match=re.escape(
        f"{tmp_path}/n*: the pattern matches no file of a known format (it matches 2: "
        "new, notes); expected names ending in .jsonl"
    )):  # fmt: skip
        find_inputs(f"{tmp_path}/n*")
    with pytest.raises(ValueError, match=r"missing\.jsonl: no such input file or directory"):
        find_inputs(tmp_path / "missing.jsonl")


@pytest.mark.parametrize(
    ("name", "content", "lines", "problem"),
    [
        ("empty.jsonl", "", False, "the input is empty: 1 file(s) of 0 bytes: {path}; build"),
        ("blank.txt", "\n\n  \n", True, "empty row groups): 1 file(s): {path}; nothing was"),
    ],
)
def test_an_input_without_documents_is_refused_naming_the_file(
    tmp_path, name, content, lines, problem
):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ValueError, match=re.escape(problem.format(path=path))):
        build_corpus(path, tmp_path / "out", tokenizer="bytes", lines=lines, workers=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # nothing written


def test_several_inputs_without_documents_are_counted_and_the_first_named(tmp_path):
    paths = [tmp_path / f"{k}.jsonl" for k in range(5)]
    for path in paths:
        path.write_text("")
    named = ", ".join(map(str, paths[:3]))
    with pytest.raises(ValueError, match=re.escape(f"5 file(s) of 0 bytes: {named} and 2 more;")):
        build_corpus(paths, tmp_path / "out", tokenizer="bytes", workers=1)
