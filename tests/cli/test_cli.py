"""The grainpack command: each subcommand's output and exit code."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

import grainpack as gp
from grainpack.cli.main import main
from grainpack.ingest.writer import shuffled_order
from grainpack.pipeline.batches import PipelineBatches


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "c"
    gp.write_corpus(path, [[5, 6, 7], [8, 9], list(range(1, 40))], vocab_size=64)
    return path


def test_build_from_npy_and_jsonl(tmp_path, capsys):
    np.save(tmp_path / "a.npy", np.array([1, 2, 3], dtype=np.int64))
    np.save(tmp_path / "b.npy", np.array([[4, 5], [6, 7]], dtype=np.int64))
    assert (
        main(
            ["build", str(tmp_path / "a.npy"), str(tmp_path / "b.npy"), "-o", str(tmp_path / "out")]
        )
        == 0
    )
    assert "3 documents, 7 tokens" in capsys.readouterr().out
    assert [d.tolist() for d in gp.open_corpus(tmp_path / "out")] == [[1, 2, 3], [4, 5], [6, 7]]
    (tmp_path / "d.jsonl").write_text('{"ids": [1, 2]}\n{"ids": [70000]}\n')
    assert (
        main(
            [
                "build",
                str(tmp_path / "d.jsonl"),
                "--field",
                "ids",
                "--dtype",
                "uint32",
                "-o",
                str(tmp_path / "j"),
            ]
        )
        == 0
    )
    assert gp.open_corpus(tmp_path / "j")[1].tolist() == [70000]


def test_build_refuses_ids_that_do_not_fit_with_exit_1(tmp_path, capsys):
    (tmp_path / "d.jsonl").write_text('{"input_ids": [70000]}\n')
    assert main(["build", str(tmp_path / "d.jsonl"), "-o", str(tmp_path / "j")]) == 1
    assert "uint32" in capsys.readouterr().err


def test_build_refuses_to_overwrite_unless_asked(tmp_path, corpus, capsys):
    np.save(tmp_path / "a.npy", np.array([1, 2, 3]))
    assert main(["build", str(tmp_path / "a.npy"), "-o", str(corpus)]) == 1
    assert "overwrite" in capsys.readouterr().err
    assert main(["build", str(tmp_path / "a.npy"), "-o", str(corpus), "--overwrite"]) == 0


def test_inspect_json(corpus, capsys):
    assert main(["inspect", str(corpus), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert (stats["documents"], stats["tokens"], stats["max_token_id"]) == (3, 44, 39)


@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_eos_id_on_a_corpus_it_does_not_split_warns(command, corpus, tmp_path, capsys):
    with pytest.warns(UserWarning, match=r"splits only flat-shard .* 6 is only taken as its eos"):
        assert main([command, str(corpus), "--eos-id", "6"]) == 0
    gp.write_corpus(tmp_path / "eos", [[5, 6]], eos_id=6)
    assert main([command, str(tmp_path / "eos"), "--eos-id", "6"]) == 0  # its own: no warning
    (tmp_path / "flat").mkdir()
    np.array([5, 6, 7, 6], np.uint16).tofile(tmp_path / "flat" / "s.bin")
    (tmp_path / "flat" / "index.json").write_text('{"s.bin": 4}')
    capsys.readouterr()
    assert main([command, str(tmp_path / "flat"), "--eos-id", "6"]) == 0  # split: no warning
    assert re.search(r"\b2 documents|documents  2\n", capsys.readouterr().out)


def test_verify_passes_then_fails_on_a_flipped_byte(corpus, capsys):
    assert main(["verify", str(corpus)]) == 0
    assert "OK" in capsys.readouterr().out
    shard = corpus / "tokens-00000.bin"
    data = bytearray(shard.read_bytes())
    data[0] ^= 1  # token 5 -> 4: still a valid id, only the checksum sees it
    shard.write_bytes(bytes(data))
    assert main(["verify", str(corpus)]) == 1
    assert "sha256" in capsys.readouterr().err


def test_show_step_lists_rows_and_mixture(corpus, tmp_path, capsys):
    other = tmp_path / "o"
    gp.write_corpus(other, [list(range(10, 50))] * 3)
    args = [
        "show-step",
        "2",
        "--source",
        f"a={corpus}",
        "--source",
        f"b={other}",
        "--block",
        "8",
        "--batch-size",
        "4",
        "--seed",
        "3",
    ]
    assert main([*args, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    cfg = gp.PipelineConfig(
        sources={"a": str(corpus), "b": str(other)},
        block=8,
        global_batch_size=4,
        seed=3,
        provenance=True,
    )
    batch = PipelineBatches(cfg).batch(2, 0)
    assert [r["slot"] for r in shown["rows"]] == [8, 9, 10, 11]
    assert [r["source"] for r in shown["rows"]] == [["a", "b"][j] for j in batch["source"]]
    assert shown["mixture"]["a"]["rows"] == gp.mixing.mixture_accounting(cfg, 2)["a"].rows
    first = shown["rows"][0]
    want = [
        {"document": int(d), "offset": int(o)}
        for d, o in zip(batch["segment_document"][0], batch["segment_offset"][0])
        if d >= 0
    ]
    assert first["segments"] == want and want  # structured, not a preformatted string
    assert main(args) == 0
    assert "mixture before step 2" in capsys.readouterr().out
    args[1] = "0"  # nothing consumed yet: no real share to report
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["mixture"]["a"]["real_share"] is None


def test_a_shuffle_seed_of_64_bits_or_more_is_refused_before_any_work(tmp_path, capsys):
    (tmp_path / "a.jsonl").write_text('{"text": "hi"}\n')
    args = ["build", str(tmp_path / "a.jsonl"), "--tokenizer", "bytes", "-o", str(tmp_path / "o")]
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--shuffle", str(2**64)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert f"--shuffle: shuffle must be below 2**64 (seeds are hashed as 64 bits: {2**64}" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl"]


def test_show_step_errors_speak_in_flags(corpus, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["show-step", "-1", "--block", "8"])
    assert (
        exit_.value.code == 2 and "argument step: must be >= 0, got -1" in capsys.readouterr().err
    )
    assert main(["show-step", "0", "--source", f"a={corpus}", "--block", "8"]) == 1
    assert "show-step needs --batch-size" in capsys.readouterr().err
    args = ["show-step", "0", "--source", f"a={corpus}", "--block", "8", "--batch-size", "2"]
    assert main([*args, "--processes", "3"]) == 1
    assert "--batch-size 2 is not divisible by --processes 3" in capsys.readouterr().err
    two = [*args, "--source", f"b={corpus}", "--weight", "a=-1", "--weight", "b=1"]
    assert main(two) == 1  # not weights['a'], a Python expression
    assert "error: --weight 'a' must be > 0; got -1.0" in capsys.readouterr().err
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"sources": {"a": str(corpus)}, "blocks": 8}))
    assert main(["show-step", "0", "--config", str(config)]) == 1
    assert "unknown PipelineConfig fields ['blocks'] (did you mean 'block'?)" in (
        capsys.readouterr().err
    )
    fields = {"sources": {"a": str(corpus)}, "block": 8, "global_batch_size": 2}
    config.write_text(json.dumps({**fields, "provenance": False, "layout": "compact"}))
    assert main(["show-step", "0", "--config", str(config)]) == 0  # a training config
    assert "segments (doc@offset)" in capsys.readouterr().out  # shown with provenance


def test_every_option_of_every_command_has_help():
    from grainpack.cli.parser import parser as make_parser

    parser = make_parser()
    commands = parser._subparsers._group_actions[0].choices  # argparse keeps them here
    for name, command in commands.items():
        for action in command._actions:
            assert action.help, f"grainpack {name} {action.option_strings or action.dest}"


def test_version():
    out = subprocess.run(
        [sys.executable, "-m", "grainpack", "--version"], capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.strip() == f"grainpack {gp.__version__}"


def test_show_step_needs_a_config(capsys):
    assert main(["show-step", "1"]) == 1
    assert "--config FILE" in capsys.readouterr().err
    assert main(["show-step", "1", "--block", "8"]) == 1
    assert "show-step needs --source, --batch-size" in capsys.readouterr().err


def test_console_script_help_and_usage_errors():
    ok = subprocess.run(
        [sys.executable, "-m", "grainpack", "build", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0 and "examples:" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "grainpack", "nosuch"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2


@pytest.mark.parametrize("argv", [["--bogus"], ["--bogus", "inspect", "x"], ["-x"]])
def test_an_unknown_option_before_the_command_is_named(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2  # not "the following arguments are required: command"
    assert f"error: unrecognized arguments: {argv[0]} (options follow the command)" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["inspect", "c", "--jsn"], "grainpack inspect: error: unrecognized arguments: --jsn (did "
         "you mean --json?)"),
        (["show-step", "1", "--blocks=8"], "unrecognized arguments: --blocks=8 (did you mean "
         "--block?)"),
        (["verify", "c", "extra"], "grainpack verify: error: unrecognized arguments: extra\n"),
    ],
)  # fmt: skip
def test_a_mistyped_option_gets_the_commands_usage_and_the_option_meant(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err
    assert err.startswith(f"usage: grainpack {argv[0]} ")  # not the top-level usage


def test_warnings_are_printed_as_messages_of_the_command(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("hello")
    (tmp_path / "in" / ".b.txt").write_text("hidden")
    out = subprocess.run(
        [sys.executable, "-m", "grainpack", "build", str(tmp_path / "in"), "--tokenizer",
         "bytes", "-o", str(tmp_path / "out")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 0
    assert out.stderr == (  # not Python's file:line: UserWarning and a line of its source
        f"grainpack build: warning: {tmp_path / 'in'}: 1 hidden file(s) and folder(s) (name "
        "them to read them) are not read (.b.txt)\n"
    )


def test_demo_streams_batches(tmp_path, capsys):
    assert main(["demo", "--steps", "5", "--directory", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "tokens/s" in out and "realized" in out and " el " in out


def test_build_text_inspect_and_merge(tmp_path, capsys):
    (tmp_path / "a.jsonl").write_text('{"text": "hi"}\n{"text": "é"}\n')
    (tmp_path / "b.txt").write_text("one\ntwo\n")
    argv = ["build", str(tmp_path / "a.jsonl"), "--tokenizer", "bytes", "--eos", "256"]
    assert main([*argv, "--workers", "1", "-o", str(tmp_path / "a")]) == 0
    assert "2 documents, 6 tokens, uint16" in capsys.readouterr().out
    argv = ["build", str(tmp_path / "b.txt"), "--tokenizer", "bytes", "--eos", "256", "--lines"]
    assert main([*argv, "-o", str(tmp_path / "b")]) == 0
    assert main(["inspect", str(tmp_path / "a")]) == 0
    assert "kind=bytes  vocab_size=256  eos_appended=True" in capsys.readouterr().out
    assert main(["merge", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(tmp_path / "m")]) == 0
    assert "4 documents, 14 tokens in 2 shard(s) hard-linked" in capsys.readouterr().out
    assert [d.tolist() for d in gp.open_corpus(tmp_path / "m")][2:] == [
        [111, 110, 101, 256],
        [116, 119, 111, 256],
    ]
    assert main(["merge", str(tmp_path / "a"), "-o", str(tmp_path / "m")]) == 1
    assert "already holds a corpus" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--lines"], "--lines needs --tokenizer (it applies"),  # text options without a tokenizer
        (["--tokenizer", "bytes", "--eos-id", "3"], "use --eos ID|TOKEN"),
        (["--tokenizer", "vocab.txt"], "expected 'bytes', a tokenizer.json"),
        (["--tokenizer", "bytes", "--field", "body"], "no text in --field body"),
    ],
)
def test_build_text_errors_exit_1(tmp_path, capsys, extra, message):
    (tmp_path / "a.jsonl").write_text('{"text": "hi"}\n')
    assert main(["build", str(tmp_path / "a.jsonl"), "-o", str(tmp_path / "o"), *extra]) == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_an_interrupted_build_says_what_it_kept_and_resumes(tmp_path, capsys, monkeypatch):
    from grainpack.ingest import build

    (tmp_path / "a.jsonl").write_text("".join(f'{{"text": "doc {i}"}}\n' for i in range(300)))
    argv = ["build", str(tmp_path / "a.jsonl"), "--tokenizer", "bytes", "--workers", "1"]
    argv += ["--part-bytes", "1000", "-o", str(tmp_path / "o")]
    original, calls = build.build_part, []

    def part_then_ctrl_c(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(build, "build_part", part_then_ctrl_c)
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert "grainpack build: interrupted; 2 complete part(s) are kept in" in err
    assert "Traceback" not in err and not (tmp_path / "o").exists()
    assert main(argv) == 0  # resumes: only the other parts are built
    parts = build.plan_build(tmp_path / "a.jsonl", tokenizer="bytes", part_bytes=1000).parts
    assert len(parts) > 3 and len(calls) == 3 + len(parts) - 2
    assert [d.tolist() for d in gp.open_corpus(tmp_path / "o")][299] == list(b"doc 299")


def test_an_interrupted_shuffle_keeps_the_tokenized_corpus(tmp_path, capsys, monkeypatch):
    from grainpack.ingest import build, shuffled

    (tmp_path / "a.jsonl").write_text("".join(f'{{"text": "doc {i}"}}\n' for i in range(50)))
    argv = ["build", str(tmp_path / "a.jsonl"), "--tokenizer", "bytes", "--workers", "1"]
    argv += ["--shuffle", "3", "-o", str(tmp_path / "o")]
    expected = tmp_path / "expected"
    assert main([*argv[:-1], str(expected)]) == 0
    shuffle, parts = shuffled.shuffle_corpus, []

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(shuffled, "shuffle_corpus", interrupted)
    assert main(argv) == 130
    assert "the tokenized corpus is kept in" in capsys.readouterr().err
    monkeypatch.setattr(shuffled, "shuffle_corpus", shuffle)
    monkeypatch.setattr(build, "build_part", lambda *a, **k: parts.append(a))
    assert main(argv) == 0  # shuffles what the first run tokenized: no part is built
    assert parts == [] and "written before" in capsys.readouterr().out
    got, want = gp.open_corpus(tmp_path / "o"), gp.open_corpus(expected)
    assert [d.tolist() for d in got] == [d.tolist() for d in want]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl", "expected", "o"]
    assert main(argv) == 1  # an existing corpus is refused before tokenizing
    assert "pass --overwrite" in capsys.readouterr().err and parts == []


def test_a_shuffle_build_that_cannot_record_its_key_leaves_nothing(tmp_path, capsys, monkeypatch):
    (tmp_path / "a.jsonl").write_text('{"text": "doc"}\n')
    argv = ["build", str(tmp_path / "a.jsonl"), "--tokenizer", "bytes", "--workers", "1"]
    from grainpack.ingest import shuffled

    write_synced = shuffled.write_synced

    def full(path, data):
        if path.name.endswith(".key"):
            raise OSError(28, "No space left on device", str(path))
        return write_synced(path, data)

    monkeypatch.setattr(shuffled, "write_synced", full)
    assert main([*argv, "--shuffle", "3", "-o", str(tmp_path / "o")]) == 1
    assert capsys.readouterr().err == (  # was a bare OSError, and the copy stayed
        f"grainpack build: error: writing {tmp_path}/.o.unshuffled.key: No space left on "
        "device; the disk is full: free space or write elsewhere\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl"]


def test_a_resumed_shuffle_never_takes_another_builds_staged_corpus(tmp_path, capsys, monkeypatch):
    # A text build interrupted while shuffling, then an ids build of the same -o interrupted
    # the same way: the staged corpus is the ids build's now, and the text build's plan
    # key alone matched it. The text build must tokenize again, not publish those ids.
    from grainpack.ingest import shuffled

    (tmp_path / "a.jsonl").write_text("".join(f'{{"text": "doc {i}"}}\n' for i in range(20)))
    np.save(tmp_path / "ids.npy", np.full((5, 3), 300, dtype=np.uint16))
    out = ["--shuffle", "3", "-o", str(tmp_path / "o")]
    text = ["build", str(tmp_path / "a.jsonl"), "--tokenizer", "bytes", "--workers", "1", *out]
    ids = ["build", str(tmp_path / "ids.npy"), *out]
    shuffle = shuffled.shuffle_corpus

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(shuffled, "shuffle_corpus", interrupted)
    assert main(text) == 130 and main(ids) == 130
    monkeypatch.setattr(shuffled, "shuffle_corpus", shuffle)
    capsys.readouterr()
    assert main(text) == 0
    assert "written before" not in capsys.readouterr().out
    docs = sorted(bytes(d.tolist()).decode() for d in gp.open_corpus(tmp_path / "o"))
    assert docs == sorted(f"doc {i}" for i in range(20))


def test_a_second_shuffle_build_of_one_output_is_refused_and_harms_nothing(tmp_path, capsys):
    from grainpack.ingest.transaction import write_lock

    (tmp_path / "a.jsonl").write_text('{"text": "hello"}\n')
    argv = ["build", str(tmp_path / "a.jsonl"), "--tokenizer", "bytes", "--shuffle", "1", "-o"]
    lock = write_lock(tmp_path / ".o.unshuffled.key")  # as a running --shuffle build holds it
    try:
        assert main([*argv, str(tmp_path / "o")]) == 1
    finally:
        lock.release()
    err = capsys.readouterr().err
    assert (
        f"another shuffled write of {tmp_path / 'o'} is in progress: another write to " in err
        and "(process " in err
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl"]
    assert main([*argv, str(tmp_path / "o")]) == 0


def test_build_plain_text_needs_a_tokenizer(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("hi")
    assert main(["build", str(tmp_path / "a.txt"), "-o", str(tmp_path / "o")]) == 1
    assert "text needs a tokenizer" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["bytes", "huggingface", "sentencepiece", "tiktoken"])
def test_build_with_each_tokenizer_gives_its_encode(tmp_path, capsys, tokenizer_files, kind):
    from texts import TEXTS, expected_ids, write_input

    source = write_input(tmp_path / "docs.jsonl.gz", TEXTS)
    tokenizer = "bytes" if kind == "bytes" else str(tokenizer_files[kind])
    argv = ["build", str(source), "--tokenizer", tokenizer, "--eos", "2", "-o", str(tmp_path / "o")]
    assert main(argv) == 0
    assert [d.tolist() for d in gp.open_corpus(tmp_path / "o")] == expected_ids(tokenizer, TEXTS, 2)
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "o"), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["tokenizer"]["kind"] == kind and stats["eos_id"] == 2


def test_build_shuffle_stores_a_seeded_order(tmp_path, capsys):
    np.save(tmp_path / "a.npy", np.arange(60).reshape(20, 3))
    out = tmp_path / "out"
    assert main(["build", str(tmp_path / "a.npy"), "-o", str(out), "--shuffle", "3"]) == 0
    order = shuffled_order(np.arange(20), 20, seed=3)
    assert [d.tolist() for d in gp.open_corpus(out)] == [
        [3 * i, 3 * i + 1, 3 * i + 2] for i in order
    ]
    assert gp.corpus.read_manifest(out)["shuffle_seed"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy", "out"]  # staging removed


def test_show_step_with_a_schedule(corpus, tmp_path, capsys):
    other = tmp_path / "o"
    gp.write_corpus(other, [list(range(10, 50))] * 3)
    sources = {"a": str(corpus), "b": str(other)}
    schedule = [[0, {"a": 0.875, "b": 0.125}], [4, {"a": 0.125, "b": 0.875}, 4]]
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"sources": sources, "block": 8, "global_batch_size": 4,
                                  "weights": schedule}))  # fmt: skip
    flags = ["--source", f"a={corpus}", "--source", f"b={other}", "--block", "8"]
    flags += ["--batch-size", "4", "--stage", "0:a=0.875,b=0.125", "--stage", "4+4:a=0.125,b=0.875"]
    cfg = gp.PipelineConfig(
        sources=sources, block=8, global_batch_size=4, weights=schedule, provenance=True
    )
    batch = PipelineBatches(cfg).batch(6, 0)
    for args in (["show-step", "6", "--config", str(config)], ["show-step", "6", *flags]):
        assert main([*args, "--json"]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert shown["weights"] == {"a": 0.5, "b": 0.5}  # halfway through the ramp
        assert [r["source"] for r in shown["rows"]] == [["a", "b"][j] for j in batch["source"]]
        # targets: steps 0-4 at 0.875 and 0.875 - 0.1875 at step 5 -> (5 * 0.875 + 0.6875) / 6
        assert shown["mixture"]["a"]["target_share"] == pytest.approx(0.84375, abs=1e-15)
        assert shown["mixture"]["b"]["rows"] == gp.mixing.mixture_accounting(cfg, 6)["b"].rows
    assert main(["show-step", "6", *flags]) == 0
    out = capsys.readouterr().out
    assert "weights: a=0.5000 b=0.5000 (schedule from 0: 0.875/0.125; from 4 ramp 4" in out
    assert main(["show-step", "6", *flags, "--stage", "x:a=1"]) == 1
    assert "--stage must look like STEP[+RAMP]:NAME=P" in capsys.readouterr().err
    assert main(["show-step", "6", *flags, "--stage", "9+x:a=1,b=0"]) == 1
    assert "got '9+x:a=1,b=0' (RAMP 'x' is not a whole number)" in capsys.readouterr().err
    assert main(["show-step", "6", *flags, "--weight", "a=1"]) == 1
    assert "either --weight (fixed weights) or --stage" in capsys.readouterr().err


def test_eos_id_on_ids_it_does_not_split_warns(tmp_path, capsys):
    np.save(tmp_path / "m.npy", np.array([[1, 2, 3], [4, 0, 6]]))
    (tmp_path / "i.jsonl").write_text("[5, 6, 7]\n[8, 0, 9]\n")
    for name in ("m.npy", "i.jsonl"):
        out = str(tmp_path / f"out-{name}")
        with pytest.warns(UserWarning, match=f"documents of .*{name} are kept as they are; 0 is"):
            assert main(["build", str(tmp_path / name), "-o", out, "--eos-id", "0"]) == 0
        assert [d.tolist() for d in gp.open_corpus(out)][1] in ([4, 0, 6], [8, 0, 9])


def test_first_hour_messages_and_inputs(tmp_path, capsys):
    # Flags, not keyword arguments, in the command's errors.
    np.save(tmp_path / "s.npy", np.array([5, 6, 0, 7, 0, 8]))
    assert main(["build", str(tmp_path / "s.npy"), "-o", str(tmp_path / "a"), "--eos-id", "0"]) == 0
    assert [d.tolist() for d in gp.open_corpus(tmp_path / "a")] == [[5, 6, 0], [7, 0], [8]]
    assert main(["build", str(tmp_path / "s.npy"), "-o", str(tmp_path / "a")]) == 1
    err = capsys.readouterr().err
    assert "pass --overwrite to replace it" in err and "overwrite=True" not in err
    args = ["build", str(tmp_path / "s.npy"), "-o", str(tmp_path / "b"), "--vocab-size", "70000"]
    args += ["--dtype", "uint16"]  # without --dtype, uint32 holds the vocabulary
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.rstrip().endswith("use --dtype uint32") and "got --vocab-size 70000" in err
    args = [*args[:3], str(tmp_path / "c"), "--vocab-size", "6", "--eos-id", "9"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "--eos-id must be an int in [0, 6)" in err and "_id" not in err and "_size" not in err
    for flag, value in [("--shuffle", "-1"), ("--shard-tokens", "0"), ("--vocab-size", "0")]:
        with pytest.raises(SystemExit) as exited:  # refused before anything is written
            main(["build", str(tmp_path / "s.npy"), "-o", str(tmp_path / "d"), flag, value])
        assert exited.value.code == 2 and f"argument {flag}: must be >= " in capsys.readouterr().err
    assert not list(tmp_path.glob("*d"))
    assert not (tmp_path / "b").exists()  # a failed build leaves nothing behind
    # JSON lines of plain lists are documents; text files point to the way to build.
    (tmp_path / "l.jsonl").write_text("[1, 2, 3]\n[4]\n")
    assert main(["build", str(tmp_path / "l.jsonl"), "-o", str(tmp_path / "l")]) == 0
    assert [d.tolist() for d in gp.open_corpus(tmp_path / "l")] == [[1, 2, 3], [4]]
    (tmp_path / "x.txt").write_text("hello\n")
    assert main(["inspect", str(tmp_path / "x.txt")]) == 1
    assert "build one with `grainpack build" in capsys.readouterr().err
    with pytest.raises(TypeError, match=r"found text .*tokenize it first"):
        gp.write_corpus(tmp_path / "t", ["hello world"])


def test_verify_and_inspect_say_what_a_flipped_byte_is(tmp_path, capsys):
    gp.write_corpus(tmp_path / "v", [np.arange(1, 500) % 1000] * 5, vocab_size=1000)
    gp.write_corpus(tmp_path / "nv", [np.arange(1, 50)])
    tokens = tmp_path / "v" / "tokens-00000.bin"
    data = bytearray(tokens.read_bytes())
    data[11] ^= 0xFF
    tokens.write_bytes(bytes(data))
    assert main(["verify", str(tmp_path / "v")]) == 1
    err = capsys.readouterr().err
    assert "sha256 mismatch with manifest.json" in err and "also holds a bad id" in err
    assert main(["inspect", str(tmp_path / "v")]) == 0
    assert "WARNING  max_token_id 65,286 >= vocab_size 1,000" in capsys.readouterr().out
    assert main(["verify", str(tmp_path / "nv")]) == 0
    assert "- token ids < vocab_size: skipped (no vocab_size recorded)" in capsys.readouterr().out


def test_building_from_a_corrupt_corpus_is_refused_and_keeps_the_tokenizer(tmp_path, capsys):
    gp.write_corpus(tmp_path / "v", [np.arange(1, 500) % 1000] * 5, vocab_size=1000)
    tokens = tmp_path / "v" / "tokens-00000.bin"
    data = bytearray(tokens.read_bytes())
    data[11] ^= 0x01  # still an id below vocab_size: only the checksum sees it
    tokens.write_bytes(bytes(data))
    for extra in ([], ["--shuffle", "1"]):  # the copy's new checksums would bless it
        assert main(["build", str(tmp_path / "v"), "-o", str(tmp_path / "out"), *extra]) == 1
        assert "tokens-00000.bin: sha256 mismatch" in capsys.readouterr().err
        assert not (tmp_path / "out").exists()

    (tmp_path / "t.jsonl").write_text('{"text": "hello"}\n{"text": "world"}\n')
    built = tmp_path / "text"
    assert main(["build", str(tmp_path / "t.jsonl"), "--tokenizer", "bytes", "-o", str(built)]) == 0
    for extra in ([], ["--shuffle", "1"]):
        out = tmp_path / f"copy{len(extra)}"
        assert main(["build", str(built), "-o", str(out), *extra]) == 0
        assert gp.open_corpus(out).tokenizer == gp.open_corpus(built).tokenizer is not None
    capsys.readouterr()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("--source a={c} --source a={c}", "--source names 'a' twice"),
        ("--source a={c} --weight a=abc", "--weight 'a=abc': 'abc' is not a number"),
        ("--source a={c} --batch-size 10000000", "more than a step's description lays out"),
        ("--config missing.json", "--config missing.json: cannot read it"),
        # a config file's field is named as a field, not as the flag
        ("--config {seed}", "seed must be >= 0 (a non-negative int), got seed=-1"),
    ],
)
def test_show_step_refuses_repeats_and_huge_batches(corpus, tmp_path, capsys, args, message):
    seed = tmp_path / "seed.json"
    seed.write_text(
        json.dumps({"sources": {"a": str(corpus)}, "block": 8, "global_batch_size": 2, "seed": -1})
    )
    args = args.format(c=corpus, seed=seed).split()
    if "--config" not in args:
        args = ["--block", "8", *args] + ["--batch-size", "2"] * ("--batch-size" not in args)
    assert main(["show-step", "0", *args]) == 1
    assert message in capsys.readouterr().err


def test_show_step_of_a_compact_config_shows_its_rows(corpus, tmp_path, capsys):
    config = {"sources": {"a": str(corpus)}, "block": 8, "global_batch_size": 2}
    outputs = []
    for layout in ("full", "compact"):
        (tmp_path / "run.json").write_text(json.dumps({**config, "layout": layout}))
        assert main(["show-step", "1", "--config", str(tmp_path / "run.json"), "--json"]) == 0
        outputs.append(json.loads(capsys.readouterr().out))
    assert outputs[0] == outputs[1] and len(outputs[0]["rows"]) == 2


def test_output_cut_short_by_the_reader_is_not_an_error_message(corpus):
    command = [sys.executable, "-m", "grainpack", "show-step", "0", "--source", f"a={corpus}"]
    command += ["--block", "4", "--batch-size", "4096"]
    reader = subprocess.Popen(["head", "-1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    done = subprocess.run(command, stdout=reader.stdin, stderr=subprocess.PIPE, text=True)
    reader.stdin.close()
    assert reader.stdout.read().startswith(b"global step 0: 4096 rows")
    assert done.stderr == "" and done.returncode == 1  # it was "error: [Errno 32] Broken pipe"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scale", "--documents", "inf"], "argument --documents: must be a whole number"),
        (["--scale", "--documents", "0"], "--documents and --boundary-documents must be >= 1"),
        (
            ["--build", "--scale"],
            "--scale is a benchmark of its own: give it without the others (--build)",
        ),
        (["--megabytes", "5"], "--megabytes applies to bench --build only"),
        (["--build", "--documents", "5"], "--documents applies to bench --scale only"),
        (["--scale", "--tokens", "5"], "--tokens applies to the throughput benchmark"),
        (["--scale", "--directory", "/nonexistent/x"], "--directory /nonexistent/x: no such"),
        (["--build", "--megabytes", "0"], "argument --megabytes: must be >= 1, got 0"),
        (["--scale", "--boundary-documents", "1"], "ends at step 0, too soon for two ranges"),
        (["--scale", "--passes", "3"], "--passes applies to the throughput benchmark (none of"),
        (["--json", "/nonexistent/b.json"], "--json /nonexistent/b.json: cannot write that"),
        (["--json", "/"], "--json /: cannot write that file (a folder"),
        (["--tokens", "32783"], "tokens must be an int >= 32784"),  # the limit's two batches
    ],
)
def test_bench_refuses_bad_and_ignored_options_before_any_work(capsys, args, message):
    try:
        code = main(["bench", *args])
    except SystemExit as exit_:  # argparse: a malformed command line
        code = exit_.code
    assert code in (1, 2) and message in capsys.readouterr().err


def test_build_option_errors_name_the_cause(tmp_path, capsys):
    (tmp_path / "t.jsonl").write_text('{"text": "hello"}\n')
    assert main(["build", str(tmp_path / "t.jsonl"), "-o", str(tmp_path / "o")]) == 1
    assert "text (field 'text') is tokenized by build_corpus" in capsys.readouterr().err
    text = ["build", str(tmp_path / "t.jsonl"), "-o", str(tmp_path / "o"), "--tokenizer", "bytes"]
    assert main([*text, "--tiktoken-pattern", "cl100k_base"]) == 1
    assert "--tiktoken-pattern applies to tiktoken tokenizers" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["demo", "--steps", "abc"])
    assert "argument --steps: must be an integer, got 'abc'" in capsys.readouterr().err


def test_build_shuffle_refuses_a_busy_output_before_tokenizing(tmp_path, capsys):
    (tmp_path / "t.jsonl").write_text('{"text": "hello"}\n')
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    args = ["build", str(tmp_path / "t.jsonl"), "--tokenizer", "bytes", "-o"]
    assert main([*args, str(tmp_path / "out"), "--shuffle", "1"]) == 1
    assert "holds files that are not part of a corpus (notes.txt)" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "t.jsonl"]  # nothing staged
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine"


def test_show_step_config_takes_a_blocked_order(corpus, tmp_path, capsys):
    config = {"sources": {"a": str(corpus)}, "block": 4, "global_batch_size": 2}
    blocked = {**config, "order": {"block_docs": 2, "window_blocks": 2}}
    blocked_config = gp.PipelineConfig(**config, order=gp.BlockedOrder(2, 2), provenance=True)
    expected = PipelineBatches(blocked_config)
    (tmp_path / "run.json").write_text(json.dumps(blocked))
    assert main(["show-step", "4", "--config", str(tmp_path / "run.json"), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    batch = expected.batch(4, 0, 1)
    documents = [[s["document"] for s in r["segments"]] for r in rows]
    assert documents == [[d for d in row if d >= 0] for row in batch["segment_document"].tolist()]
    assert documents == [[2, 1], [1, 0]]  # the exact order's step 4: [[2, 1], [2]]
    (tmp_path / "bad.json").write_text(json.dumps({**config, "order": {"block": 2}}))
    assert main(["show-step", "3", "--config", str(tmp_path / "bad.json")]) == 1
    assert '"order" must be "exact" or {"block_docs": C' in capsys.readouterr().err
