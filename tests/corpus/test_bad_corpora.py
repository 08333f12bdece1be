"""Damaged corpora: every way the files of a corpus can be wrong, and the error that names it.

Part of the bad-input catalogue; helpers in ``tests/bad_inputs.py``.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
from typing import Any

import numpy as np
import pytest
from bad_inputs import (  # noqa: F401
    DOCS,
    SOURCES,
    documents_of,
    edit_manifest,
    first_batch,
    fresh,
    pipeline,
    restamp,
    small_corpus,
    state_after,
    write_megatron_int64,
)

import grainpack as gp
from grainpack.cli.main import main as cli_main

# -- corpus files ---------------------------------------------------------------------------


def test_corpus_truncated_shard_is_refused_by_open_verify_and_pipeline(tmp_path):
    path = small_corpus(tmp_path / "c", shard_tokens=5)  # shards: [1-3][4 5] | [6-9][10] | [11-13]
    tokens = path / "tokens-00001.bin"
    tokens.write_bytes(tokens.read_bytes()[:-2])
    message = re.escape(f"{tokens}: has 8 bytes, expected 10 (5 uint16 tokens)") + ".*truncated"
    with pytest.raises(gp.CorpusError, match=message + ".*rebuild the corpus"):
        gp.open_corpus(path)
    with pytest.raises(gp.CorpusError, match=message):
        gp.verify_corpus(path)
    with pytest.raises(gp.CorpusError, match=message):
        first_batch(pipeline(path))


def test_corpus_missing_or_truncated_offsets_file_is_refused(tmp_path):
    path = small_corpus(tmp_path / "c", shard_tokens=5)
    offsets = path / "offsets-00001.bin"
    offsets.write_bytes(offsets.read_bytes()[:-8])
    with pytest.raises(gp.CorpusError, match=re.escape("has 16 bytes, expected 24 (3 offsets)")):
        gp.open_corpus(path)
    offsets.unlink()
    with pytest.raises(gp.CorpusError, match=re.escape(f"{offsets}: missing (3 offsets)")):
        gp.open_corpus(path)
    offsets.mkdir()  # it said "has 4096 bytes ... truncated"
    with pytest.raises(gp.CorpusError, match=re.escape(f"{offsets}: not a regular file (3 off")):
        gp.open_corpus(path)


def write_offsets(path: pathlib.Path, values: list[int]) -> None:
    np.array(values, dtype="<i8").tofile(path / "offsets-00000.bin")


@pytest.mark.parametrize(
    ("offsets", "verify_error"),
    [
        ([0, 3, 2, 9, 10, 13], "decrease at document 1 (3 -> 2)"),
        ([0, 3, 99, 9, 10, 13], "decrease at document 2 (99 -> 9)"),
        ([0, 3, 5, 9, 10, 20], "last document offset is 20, expected the shard's 13 tokens"),
        ([1, 3, 5, 9, 10, 13], "must start at 0, found [1]"),
    ],
    ids=["not-monotone", "beyond-file-inside", "beyond-file-at-end", "not-from-zero"],
)
def test_corpus_bad_offsets_are_refused_on_first_read_and_by_verify(
    tmp_path, offsets, verify_error
):
    path = small_corpus(tmp_path / "c")
    write_offsets(path, offsets)
    where = re.escape(str(path / "offsets-00000.bin"))
    src = gp.open_corpus(path)  # sizes match: offsets are read (and checked) lazily
    # One check for reads and verify: the same message, naming the document.
    rule = re.escape(verify_error)
    with pytest.raises(gp.CorpusError, match=f"{where}: .*{rule}"):
        src.lengths  # noqa: B018
    with pytest.raises(gp.CorpusError, match=rule):
        src[0]
    with pytest.raises(gp.CorpusError, match=rule):
        first_batch(pipeline(path))
    # verify: the bytes no longer match the manifest's checksum ...
    with pytest.raises(gp.CorpusError, match=f"{where}: sha256 mismatch with manifest.json"):
        gp.verify_corpus(path)
    # ... and even with a matching checksum (a buggy writer), the offsets themselves are wrong
    restamp(path, "offsets-00000.bin")
    with pytest.raises(gp.CorpusError, match=f"{where}: .*{re.escape(verify_error)}"):
        gp.verify_corpus(path)


def test_corpus_manifest_and_file_sizes_disagree(tmp_path):
    path = small_corpus(tmp_path / "c")

    def more_tokens(m: dict[str, Any]) -> None:
        m["shards"][0]["num_tokens"] += 1
        m["num_tokens"] += 1

    edit_manifest(path, more_tokens)
    with pytest.raises(gp.CorpusError, match=re.escape("has 26 bytes, expected 28 (14 uint16")):
        gp.open_corpus(path)

    path = small_corpus(tmp_path / "d")
    edit_manifest(path, lambda m: m.update(num_tokens=14))
    with pytest.raises(gp.CorpusError, match=re.escape("num_tokens=14 (the shards sum to 13)")):
        gp.open_corpus(path)

    path = small_corpus(tmp_path / "e")

    def more_documents(m: dict[str, Any]) -> None:
        m["shards"][0]["num_documents"] += 1
        m["num_documents"] += 1

    edit_manifest(path, more_documents)
    with pytest.raises(gp.CorpusError, match=re.escape("has 48 bytes, expected 56 (7 offsets)")):
        gp.open_corpus(path)


def test_corpus_manifest_dtype_wider_than_the_files_is_refused(tmp_path):
    path = small_corpus(tmp_path / "c")
    edit_manifest(path, lambda m: m.update(dtype="uint32"))
    with pytest.raises(gp.CorpusError, match="the manifest says 13 uint32 tokens"):
        gp.open_corpus(path)


def test_corpus_manifest_dtype_mismatch_names_the_dtype_the_files_hold(tmp_path):
    path = small_corpus(tmp_path / "c")
    edit_manifest(path, lambda m: m.update(dtype="uint32"))
    with pytest.raises(gp.CorpusError, match="uint16"):
        gp.open_corpus(path)


@pytest.mark.parametrize("dtype", ["float32", "int8", "uint64", "bogus", None])
def test_corpus_unknown_dtype_in_manifest_or_writer(tmp_path, dtype):
    path = small_corpus(tmp_path / "c")
    edit_manifest(path, lambda m: m.update(dtype=dtype))
    expected = re.escape(f"dtype={dtype!r} (expected 'uint16' or 'uint32')")
    with pytest.raises(gp.CorpusError, match=expected):
        gp.open_corpus(path)
    with pytest.raises(ValueError, match="dtype must be 'uint16' or 'uint32'"):
        gp.ingest.CorpusWriter(tmp_path / "w", dtype=dtype or "object")


# -- token ids --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("documents", "options", "message"),
    [
        ([[1, 2], [3, 10]], {"vocab_size": 10}, "document 1: token id 10 at position 1 is >= "),
        ([[70000]], {}, "document 0: token id 70000 at position 0 does not fit dtype='uint16'"),
        ([[5, -1]], {}, "document 0: token id -1 at position 1 is negative"),
        ([[1, 2**32]], {"dtype": "uint32"}, "token id 4294967296 at position 1 does not fit"),
    ],
    ids=["vocab", "uint16", "negative", "uint32"],
)
def test_writer_refuses_ids_outside_vocab_or_dtype(tmp_path, documents, options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        gp.write_corpus(tmp_path / "c", documents, **options)
    assert not (tmp_path / "c" / "manifest.json").exists()
    assert not list((tmp_path / "c").glob("*.bin"))  # nothing half-written is left


def test_verify_finds_ids_at_or_above_vocab_size(tmp_path):
    path = small_corpus(tmp_path / "c", vocab_size=14)
    assert gp.verify_corpus(path).max_token_id == 13
    edit_manifest(path, lambda m: m.update(vocab_size=12))  # the ids 12, 13 no longer fit
    with pytest.raises(
        gp.CorpusError, match=re.escape("max_token_id=13 (expected < vocab_size=12)")
    ):
        gp.verify_corpus(path)  # the manifest contradicts itself
    edit_manifest(path, lambda m: m.pop("max_token_id"))  # as an older writer wrote it
    tokens = re.escape(str(path / "tokens-00000.bin"))
    with pytest.raises(gp.CorpusError, match=f"{tokens}: token id 12 at stream position 11 is "):
        gp.verify_corpus(path)

    path = small_corpus(tmp_path / "d", vocab_size=14)
    ids = np.fromfile(path / "tokens-00000.bin", "<u2")
    ids[4] = 40  # a flipped id in a shard whose checksum was recorded after the damage
    ids.tofile(path / "tokens-00000.bin")
    restamp(path, "tokens-00000.bin")
    with pytest.raises(gp.CorpusError, match="token id 40 at stream position 4 is >= vocab_size"):
        gp.verify_corpus(path)


def test_pipeline_refuses_boundary_id_outside_a_sources_vocab(tmp_path):
    path = small_corpus(tmp_path / "c", vocab_size=14)
    with pytest.raises(ValueError, match="boundary_id=14"):
        first_batch(pipeline(path, boundary_id=14))


# -- files that change under a reader ----------------------------------------------------------

CHILD_PRELUDE = """
import os, pathlib, sys, time
import numpy as np
import grainpack as gp
from grainpack.pipeline.batches import CHECK_SECONDS, PipelineBatches
from grainpack.pipeline.elements import group_rows
path = pathlib.Path(sys.argv[1])
rng = np.random.default_rng(0)
docs = [rng.integers(1, 1000, size=rng.integers(20, 60)) for _ in range(200)]
gp.write_corpus(path, docs, shard_tokens=500)
# 64 rows of 65 tokens per step: a group read covers 4 steps, a Grain element 512
config = gp.PipelineConfig(sources={"a": str(path)}, block=64, global_batch_size=64, seed=1)
per_group = group_rows(PipelineBatches(config)) // 64
reference = iter(gp.make_dataset(config, process_index=0, process_count=1))
want = [next(reference) for _ in range(3 * per_group)]
it = iter(gp.make_dataset(config, process_index=0, process_count=1))
for _ in range(3):
    next(it)
shard = path / "tokens-00003.bin"
"""


def run_child(code: str, *args: str, user: int | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(pathlib.Path(__file__).parents[2]), env.get("PYTHONPATH")) if p
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, env=env
    )


CHANGES = {
    "truncate": "os.truncate(shard, 0)",
    "shrink": "os.truncate(shard, shard.stat().st_size // 2)",
    # same size, new bytes; a write 10 ms later than the original (the kernel's timestamp
    # granularity is a few ms, so a rewrite in the same instant keeps the mtime)
    "rewrite": "mtime = shard.stat().st_mtime_ns\n"
    "shard.write_bytes(bytes(reversed(shard.read_bytes())))\n"
    "os.utime(shard, ns=(mtime + 10**7, mtime + 10**7))",
    "overwrite": "gp.write_corpus(path, [d[::-1] for d in docs], shard_tokens=500, overwrite=True)",
}
CHANGED = {
    "truncate": r"size \d+ -> 0 bytes",
    "shrink": r"size \d+ -> \d+ bytes",
    "rewrite": r"modified in place: same size, new modification time",
    "overwrite": r"replaced by another file",
}
CHANGE_CHECK = """
time.sleep(2 * CHECK_SECONDS)
for step in range(3, len(want)):
    try:
        got = next(it)
    except gp.CorpusError as err:
        print("ERROR", step == per_group, err)
        break
    assert all(np.array_equal(got[k], want[step][k]) for k in got), f"mixed batch {step}"
"""


@pytest.mark.slow
def test_files_changed_under_a_live_iterator_raise_a_python_error(tmp_path):
    """A shard truncated in place (to nothing: SIGBUS before; by half, inside its one page:
    zeros before), rewritten with the same size, or the whole corpus replaced by
    ``overwrite=True``: the next read names the file; no batch mixes old and new tokens
    (every batch before the error equals an uninterrupted run's). One child process (the
    imports are most of its time) runs the four cases, each on its own corpus."""
    cases = [
        f"def {change}():\n"
        + textwrap.indent(CHILD_PRELUDE + damage + CHANGE_CHECK, "    ")
        + f"\nsys.argv[1] = {str(tmp_path / change)!r}\nprint('CASE', {change!r})\n{change}()\n"
        for change, damage in CHANGES.items()
    ]
    result = run_child("import sys\n" + "".join(cases), "")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    for change, expected in CHANGED.items():
        line = lines[lines.index(f"CASE {change}") + 1]
        # raised at the first read after the change (the steps before were read before it)
        assert line.startswith("ERROR True "), (change, result.stdout[-2000:])
        assert re.search(rf"changed since the corpus was opened \({expected}\)", line), line
        assert str(tmp_path / change / "tokens-0000") in line  # the file is named


@pytest.mark.slow
def test_a_shard_truncated_right_after_a_read_raises_at_the_next_read_of_it(tmp_path):
    """No wait for the periodic check: every read first compares the size of each mapped
    file it touches with the tokens it maps (SIGBUS before, for a truncation in place)."""
    code = (
        CHILD_PRELUDE
        + """
os.truncate(shard, 0)
for step in range(3, len(want)):
    try:
        got = next(it)
    except gp.CorpusError as err:
        print("ERROR", err)
        break
    assert all(np.array_equal(got[k], want[step][k]) for k in got), f"mixed batch {step}"
"""
    )
    result = run_child(code, str(tmp_path / "c"))
    assert result.returncode == 0, result.stderr[-3000:]  # no SIGBUS (exit 135)
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("ERROR")]
    assert f"{tmp_path / 'c' / 'tokens-00003.bin'}: changed since the corpus" in line
    assert re.search(r"\(size \d+ -> 0 bytes\)", line), line


@pytest.mark.slow
def test_an_offsets_file_truncated_under_a_live_iterator_raises_not_sigbus(tmp_path):
    code = (
        CHILD_PRELUDE
        + """
os.truncate(path / "offsets-00003.bin", 0)
for step in range(3, 3000):
    try:
        next(it)
    except gp.CorpusError as err:
        print("ERROR", err)
        break
"""
    )
    result = run_child(code, str(tmp_path / "c"))
    assert result.returncode == 0, result.stderr[-3000:]  # no SIGBUS (exit 135)
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("ERROR")]
    assert f"{tmp_path / 'c' / 'offsets-00003.bin'}: changed since the corpus" in line


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "size", "read"),
    [
        ("tokens-00003.bin", 8, "src[i]"),
        ("offsets-00003.bin", 0, "src[i]"),
        ("offsets-00003.bin", 0, "src.read_span(i, 0, 1)"),
        ("offsets-00003.bin", 0, "src.lengths"),
    ],
)
def test_a_file_truncated_under_a_live_source_raises_not_sigbus(tmp_path, name, size, read):
    code = (
        CHILD_PRELUDE
        + f"""
src = gp.open_corpus(path)
[src[i] for i in range(len(src))]  # maps every file
os.truncate(path / {name!r}, {size})
for i in range(len(src)):
    try:
        {read}
    except gp.CorpusError as err:
        print("ERROR", i, err)
"""
    )
    result = run_child(code, str(tmp_path / "c"))
    assert result.returncode == 0, result.stderr[-3000:]  # no SIGBUS (exit 135)
    errors = [line for line in result.stdout.splitlines() if line.startswith("ERROR")]
    assert errors and all(str(tmp_path / "c" / name) in e for e in errors)


@pytest.mark.slow
def test_a_corpus_of_more_shards_than_the_soft_open_file_limit_is_read(tmp_path):
    """Every mapped shard keeps two descriptors (Python's mmap dups them): 500 shards under
    a soft limit of 256 ran out of them before grainpack raised the soft limit."""
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 4096:
        pytest.skip("the hard open-file limit here is too low to raise the soft one past 1000")
    code = """
import resource, sys
import numpy as np
import grainpack as gp
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
gp.write_corpus(sys.argv[1], [np.arange(1, 51)] * 2000, shard_tokens=200)  # 500 shards
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
config = gp.PipelineConfig(sources={"c": sys.argv[1]}, block=64, global_batch_size=8)
with gp.make_dataset(config, process_index=0, process_count=1).__iter__() as it:
    for _ in range(300):  # 300 * 8 rows of 65 tokens: all 100,000 tokens, every shard
        next(it)
print(resource.getrlimit(resource.RLIMIT_NOFILE)[0] == min(hard, 2**20))
"""
    result = run_child(code, str(tmp_path / "c"))
    assert result.returncode == 0 and result.stdout.split() == ["True"], result.stderr[-3000:]


# -- manifests and foreign indexes ---------------------------------------------------------------


def test_manifest_listing_a_shard_twice_is_refused(tmp_path):
    path = small_corpus(tmp_path / "c")

    def twice(m: dict[str, Any]) -> None:
        m["shards"].append(dict(m["shards"][0]))
        m["num_tokens"] *= 2
        m["num_documents"] *= 2

    edit_manifest(path, twice)
    message = "shards[1].tokens_file='tokens-00000.bin' is also shards[0].tokens_file"
    for check in (gp.open_corpus, gp.verify_corpus):
        with pytest.raises(gp.CorpusError, match=re.escape(message)):
            check(path)


@pytest.mark.parametrize(
    "name", ["../other/x.bin", "/etc/passwd", "sub/x.bin", ".hidden", "index.json", "a\\b"]
)
def test_flat_index_names_outside_the_folder_are_refused(tmp_path, name):
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.bin").write_bytes(b"\x01\x00" * 8)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "index.json").write_text(json.dumps({name: 8}))
    with pytest.raises(gp.CorpusError, match=r"shard names must be plain file names inside"):
        gp.open_corpus(tmp_path / "c")


def test_flat_index_listing_a_shard_twice_is_refused(tmp_path):
    (tmp_path / "s0.bin").write_bytes(b"\x01\x00" * 4)
    (tmp_path / "index.json").write_text('{"s0.bin": 4, "s0.bin": 4}')
    with pytest.raises(gp.CorpusError, match=re.escape("shards listed twice: ['s0.bin']")):
        gp.open_corpus(tmp_path)


# -- every corpus problem is a CorpusError naming the file ---------------------------------------


def test_symlink_loops_are_named(tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for call in (gp.open_corpus, lambda p: gp.write_corpus(p, [[1]])):
        with pytest.raises(gp.CorpusError, match=f"{tmp_path / 'loop'}: Too many levels of sym"):
            call(tmp_path / "loop")
    path = small_corpus(tmp_path / "c")
    (path / "tokens-00000.bin").unlink()
    (path / "tokens-00000.bin").symlink_to(path / "tokens-00000.bin")
    with pytest.raises(gp.CorpusError, match=f"{path / 'tokens-00000.bin'}: Too many levels"):
        gp.open_corpus(path)
    (path / "manifest.json").unlink()
    (path / "manifest.json").symlink_to(path / "manifest.json")
    with pytest.raises(gp.CorpusError, match=f"{path / 'manifest.json'}: Too many levels"):
        gp.open_corpus(path)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", "not UTF-8 text"),
        (b"[" * 100_000 + b"]" * 100_000, "JSON nested too deeply"),
        (b"{" * 10, "not valid JSON"),
    ],
    ids=["binary", "deeply-nested", "truncated"],
)
@pytest.mark.parametrize("index", ["manifest.json", "index.json"])
def test_unparseable_index_files_are_named(tmp_path, content, problem, index, capsys):
    (tmp_path / index).write_bytes(content)
    with pytest.raises(gp.CorpusError, match=re.escape(f"{tmp_path / index}: {problem}")):
        gp.open_corpus(tmp_path)
    assert cli_main(["verify", str(tmp_path)]) == 1  # a message, not a traceback
    assert f"{tmp_path / index}: {problem}" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory"])
@pytest.mark.parametrize("index", ["manifest.json", "index.json", "m.idx"])
def test_index_files_that_are_not_regular_files_are_refused_at_once(tmp_path, kind, index):
    # A FIFO blocked open_corpus and verify forever; /dev/zero was read until memory ran out.
    write_megatron_int64(tmp_path / "m", [[1, 2]])  # m.bin beside the index under test
    path = tmp_path / index
    path.unlink(missing_ok=True)
    {"fifo": os.mkfifo, "dev-zero": lambda p: p.symlink_to("/dev/zero"), "directory": os.mkdir}[
        kind
    ](path)
    with pytest.raises(gp.CorpusError, match=re.escape(f"{path}: not a regular file")):
        gp.open_corpus(tmp_path / "m" if index == "m.idx" else tmp_path)


@pytest.mark.parametrize("out", [".", ".."])
def test_the_current_directory_and_its_parents_are_never_replaced(tmp_path, monkeypatch, out):
    (tmp_path / "a" / "here").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "a" / "here")
    with pytest.raises(gp.CorpusError, match="is the current directory or holds it"):
        gp.write_corpus(out, [[1, 2, 3]])  # published, then deleted this process's cwd
    assert os.getcwd() == str(tmp_path / "a" / "here") and os.path.isdir(".")
    np.save(tmp_path / "a" / "x.npy", np.arange(1, 5))
    assert cli_main(["build", str(tmp_path / "a" / "x.npy"), "-o", out, "--vocab-size", "9"]) == 1
    assert os.path.isdir(".") and not (tmp_path / "a" / "here" / "manifest.json").exists()
    gp.write_corpus(tmp_path / "c", [[1, 2]])
    (tmp_path / "gone").mkdir()
    monkeypatch.chdir(tmp_path / "gone")
    (tmp_path / "gone").rmdir()  # a working directory deleted under the process
    replaced = gp.write_corpus(tmp_path / "c", [[3], [4]], overwrite=True)  # realpath(".") raised
    assert len(replaced) == 2


def test_writing_under_a_file_is_named(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(gp.CorpusError, match=f"{tmp_path / 'file'}.*a part of the path is a file"):
        gp.write_corpus(tmp_path / "file" / "corpus", [[1]])
    with pytest.raises(gp.CorpusExistsError, match="exists and is not a directory"):
        gp.write_corpus(tmp_path / "file", [[1]])


def test_unreadable_and_unwritable_files_are_named_for_a_non_root_user(tmp_path):
    """As an unprivileged user (root reads everything: the child drops to uid 65534)."""
    # Outside pytest's temporary folder, which only its owner may enter.
    root = pathlib.Path(tempfile.mkdtemp(prefix="grainpack-perm-", dir="/tmp"))
    try:
        root.chmod(0o755)
        path, other = small_corpus(root / "c", shard_tokens=4), small_corpus(root / "d")
        for p in (path, other, *path.iterdir(), *other.iterdir()):
            p.chmod(0o755 if p.is_dir() else 0o644)
        (path / "tokens-00001.bin").chmod(0o000)
        (other / "manifest.json").chmod(0o000)
        (root / "locked").mkdir(mode=0o755)
        (root / "a.jsonl").write_text('{"text": "hi"}\n')
        (root / "a.jsonl").chmod(0o644)
        shutil.copytree(path, root / "e")  # offsets unreadable
        (root / "e" / "offsets-00000.bin").chmod(0o000)
        for name, mode in [("f", 0o000), ("g", 0o644)]:  # folders closed, or not searchable
            shutil.copytree(other, root / name)
            (root / name / "manifest.json").chmod(0o644)
            (root / name).chmod(mode)
        code = """
import os, sys
import grainpack as gp
import grainpack.corpus.formats, grainpack.ingest.writer, grainpack.ingest.build  # before the
# stdlib is unreadable
if os.geteuid() == 0:
    os.setgid(65534)
    os.setuid(65534)
root = sys.argv[1]
for name, call in [
    ("open", lambda: gp.open_corpus(f"{root}/c")[1]),
    ("manifest", lambda: gp.open_corpus(f"{root}/d")),
    ("write", lambda: gp.write_corpus(f"{root}/locked/new", [[1]])),
    ("build", lambda: gp.build_corpus(f"{root}/a.jsonl", f"{root}/locked/b", tokenizer="bytes")),
    ("offsets", lambda: gp.open_corpus(f"{root}/e")[0]),
    ("closed", lambda: gp.open_corpus(f"{root}/f")),
    ("unsearchable", lambda: gp.open_corpus(f"{root}/g")),
]:
    try:
        call()
        print(name, "no error")
    except gp.CorpusError as err:
        print(name, type(err).__name__, err)
    except OSError as err:
        print(name, "raw", type(err).__name__, err)
"""
        if os.geteuid() != 0:  # the files are ours: take the permissions away ourselves
            (root / "locked").chmod(0o555)
        result = run_child(code, str(root))
        if result.returncode and "Operation not permitted" in result.stderr:
            pytest.skip("cannot drop to an unprivileged user here")
        assert result.returncode == 0, result.stderr[-3000:]
        lines = dict(line.split(" ", 1) for line in result.stdout.strip().splitlines())
        fix = "Permission denied; make it accessible (chmod/chown)"
        assert lines["open"].startswith("CorpusError ")
        assert f"{path / 'tokens-00001.bin'}: {fix}" in lines["open"]
        assert f"CorpusError reading {other / 'manifest.json'}: {fix}" in lines["manifest"]
        assert lines["write"].startswith("CorpusError ")
        assert f"{root / 'locked'}" in lines["write"] and fix in lines["write"]
        assert lines["build"].startswith(f"CorpusError cannot write a corpus at {root}/locked/.b")
        assert f"{root / 'locked'}/..b.parts.lock: {fix}" in lines["build"]  # was a raw OSError
        offsets = root / "e" / "offsets-00000.bin"
        assert f"CorpusError mapping {offsets}: {fix}" in lines["offsets"]
        for name, folder in [("closed", "f"), ("unsearchable", "g")]:  # not "not a corpus"
            assert f"CorpusError opening {root / folder}: {fix}" in lines[name]
    finally:
        for p in [root / "f", root / "g", *root.rglob("*")]:  # the closed folders first
            if p.exists():
                p.chmod(0o755 if p.is_dir() else 0o644)
        shutil.rmtree(root)
