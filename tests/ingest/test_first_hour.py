"""Builds that say what they do: quiet Ctrl-C while workers start, line numbers in text
errors, the parts a resumed build reuses or discards (issue 38)."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest

from grainpack.cli.main import main
from grainpack.ingest.text import find_inputs, plan_parts, read_documents

HERE = Path(__file__).parent

GOOD = "".join(f'{{"text": "document {i}"}}\n' for i in range(50))  # 50 lines, 1,190 bytes


def test_ctrl_c_while_the_workers_start_prints_no_worker_traceback(tmp_path):
    # Before: 1 try in 5 printed a KeyboardInterrupt traceback of each spawned worker
    # (interrupted in its start-up, before it ignores SIGINT) above the "interrupted" line.
    text = "".join(f'{{"text": "document {i}"}}\n' for i in range(400))
    (tmp_path / "a.jsonl").write_text(text)
    argv = ["build", str(tmp_path / "a.jsonl"), "--tokenizer", "bytes", "--workers", "2"]
    argv += ["--part-bytes", "1000", "-o", str(tmp_path / "out")]
    done = subprocess.run(
        [sys.executable, str(HERE / "ctrl_c_build.py"), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,  # the script's Ctrl-C reaches its own process group only
    )
    assert (tmp_path / "out.ctrl-c").exists()  # a worker did send it
    assert done.returncode == 130, done.stderr
    assert done.stderr.startswith("\ngrainpack build: interrupted"), done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr


def _error(path: Path, part_bytes: int = 1 << 20) -> str:
    """The message of the first error reading ``path`` in parts of ``part_bytes``."""
    parts = plan_parts(find_inputs(path), part_bytes=part_bytes)
    with pytest.raises(ValueError) as raised:
        for (piece,) in parts:
            list(read_documents(piece))
    return str(raised.value)


@pytest.mark.parametrize("part_bytes", [1 << 20, 500])  # one part; the line in the third
def test_text_errors_give_the_line_number(tmp_path, part_bytes):
    # Before: "the line at byte 1190 has no text", the line number left to the reader.
    path = tmp_path / "a.jsonl"
    path.write_text(GOOD + '{"body": "x"}\n')
    assert _error(path, part_bytes) == (
        f"{path}: line 51 at byte 1190 has no text in field='text' (found keys ['body']); pass "
        "the name of the text field as field"
    )
    path.write_text(GOOD + '{"text": \n')
    assert _error(path, part_bytes).startswith(
        f"{path}: invalid JSON in line 51 at byte 1190 (Expecting value at char 10 of the line)"
    )
    path.write_bytes(GOOD.encode() + b'{"text": "a\xffb"}\n')
    assert _error(path, part_bytes) == (
        f"{path}: not UTF-8 text at byte 1201 (line 51: invalid start byte); convert the file "
        "to UTF-8"
    )


def test_a_compressed_files_error_says_its_bytes_are_decompressed(tmp_path):
    # Before: "at byte 1190", an offset into the decompressed data, not the file, unstated.
    path = tmp_path / "a.jsonl.gz"
    path.write_bytes(gzip.compress((GOOD + '{"text": "ok", "text": ""}\n').encode()))
    assert _error(path).startswith(
        f"{path}: the JSON line 51 at byte 1190 of the decompressed data names 'text' twice"
    )
    lines = tmp_path / "b.txt.gz"
    lines.write_bytes(gzip.compress(b"one\ntwo\nthr\xffee\n"))
    (file,) = find_inputs(lines)
    (piece,) = plan_parts([file], lines=True)[0]
    with pytest.raises(ValueError, match=r"at byte 11 of the decompressed data \(line 3: inv"):
        list(read_documents(piece, lines=True))


@pytest.mark.parametrize(
    ("value", "held"),
    [("null", "null"), ("3", "a number"), ("[]", "an array"), ("{}", "an object")],
)
def test_a_text_field_that_holds_no_string_gets_no_field_hint(tmp_path, capsys, value, held):
    # Before: {"text": null} got "pass the name of the text field as --field", although the
    # field is there.
    path = tmp_path / "a.jsonl"
    path.write_text(GOOD + f'{{"text": {value}}}\n')
    assert main(["build", str(path), "--tokenizer", "bytes", "-o", str(tmp_path / "o")]) == 1
    assert capsys.readouterr().err == (
        f"grainpack build: error: {path}: line 51 at byte 1190 has {held} in 'text', not a "
        "string; fix or drop that record\n"
    )
