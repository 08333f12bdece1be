"""What the command line says on a newcomer's first hour (issue 38): a resumed build's
reused and discarded parts, and option messages that name only the flags given."""

from __future__ import annotations

import pytest

import grainpack as gp
from grainpack.cli.main import main


def _interrupt_after(monkeypatch, parts: int) -> None:
    """The build's ``parts + 1``-th part raises KeyboardInterrupt (a Ctrl-C)."""
    from grainpack.ingest import build

    original, calls = build.build_part, []

    def part_then_ctrl_c(*args, **kwargs):
        calls.append(1)
        if len(calls) == parts + 1:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(build, "build_part", part_then_ctrl_c)


def test_a_resumed_build_says_which_parts_it_reused(tmp_path, capsys, monkeypatch):
    # Before: the rerun printed only "wrote ...".
    (tmp_path / "a.jsonl").write_text("".join(f'{{"text": "doc {i}"}}\n' for i in range(300)))
    argv = ["build", str(tmp_path / "a.jsonl"), "--tokenizer", "bytes", "--workers", "1"]
    argv += ["--part-bytes", "1000", "-o", str(tmp_path / "o")]
    with monkeypatch.context() as patch:
        _interrupt_after(patch, 2)
        assert main(argv) == 130
    capsys.readouterr()
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    parts = len(list(gp.open_corpus(tmp_path / "o").shards))
    assert out[0] == (
        f"reusing 2 of {parts} parts kept in {tmp_path}/.o.parts by an interrupted build; "
        f"building the other {parts - 2}"
    )
    assert out[1].startswith(f"wrote {tmp_path}/o: 300 documents")


def test_a_rerun_with_other_options_says_it_discarded_the_kept_parts(tmp_path, capsys, monkeypatch):
    # Before: the kept parts were removed without a word.
    (tmp_path / "a.jsonl").write_text("".join(f'{{"text": "doc {i}"}}\n' for i in range(300)))
    argv = ["build", str(tmp_path / "a.jsonl"), "--tokenizer", "bytes", "--workers", "1"]
    argv += ["--part-bytes", "1000", "-o", str(tmp_path / "o")]
    with monkeypatch.context() as patch:
        _interrupt_after(patch, 2)
        assert main(argv) == 130
    capsys.readouterr()
    assert main([*argv, "--eos", "256"]) == 0  # another option: another plan
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(
        f"discarded 2 complete part(s) kept in {tmp_path}/.o.parts by an interrupted build of "
        "other inputs, tokenizer or options; building all "
    )
    assert gp.open_corpus(tmp_path / "o").eos_id == 256


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        # was "--eos need --tokenizer"
        (["--eos", "1"], "--eos needs --tokenizer (it applies to text inputs)\n"),
        (
            ["--eos", "1", "--lines"],
            "--lines, --eos need --tokenizer (they apply to text inputs)\n",
        ),
        # was "drop --vocab-size, and use --eos ...": --vocab-size was not given
        (
            ["--tokenizer", "bytes", "--eos-id", "0"],
            "with --tokenizer use --eos ID|TOKEN (appended to every document) instead of "
            "--eos-id\n",
        ),
        (
            ["--tokenizer", "bytes", "--vocab-size", "300"],
            "with --tokenizer the vocabulary comes from the tokenizer: drop --vocab-size\n",
        ),
    ],
)
def test_build_option_messages_name_only_the_flags_given(tmp_path, capsys, extra, message):
    (tmp_path / "a.jsonl").write_text('{"text": "hi"}\n')
    assert main(["build", str(tmp_path / "a.jsonl"), "-o", str(tmp_path / "o"), *extra]) == 1
    assert capsys.readouterr().err == f"grainpack build: error: {message}"
