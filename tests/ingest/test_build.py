"""Text -> corpus: every tokenizer and format, errors that write nothing, determinism across
worker counts, merge without copies, and a SIGKILLed build that leaves no corpus."""

from __future__ import annotations

import base64
import errno
import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from texts import TEXTS, expected_ids, write_input

import grainpack as gp
from grainpack.corpus.verify import describe_corpus
from grainpack.ingest import build, merge
from grainpack.ingest.build import build_corpus, plan_build
from grainpack.ingest.merge import merge_corpora
from grainpack.ingest.tokenizers import ByteTokenizer, load_tokenizer
from grainpack.ingest.transaction import write_lock

REPO = Path(__file__).resolve().parents[2]


def spec(tokenizer_files, kind):
    return "bytes" if kind == "bytes" else tokenizer_files[kind]


@pytest.mark.parametrize("kind", ["bytes", "huggingface", "sentencepiece", "tiktoken"])
def test_each_tokenizer_gives_its_own_encode(tmp_path, tokenizer_files, kind):
    path = write_input(tmp_path / "docs.jsonl", TEXTS)
    tokenizer = spec(tokenizer_files, kind)
    eos = 399 if kind != "sentencepiece" else 2  # tiktoken: one past its 399 ranks
    src = build_corpus(path, tmp_path / "out", tokenizer=tokenizer, eos=eos, workers=1)
    assert [d.tolist() for d in src] == expected_ids(tokenizer, TEXTS, eos)
    assert src.eos_id == eos and src.dtype == np.uint16
    identity = load_tokenizer(tokenizer).identity()
    assert src.tokenizer == {**identity, "eos_appended": True}
    assert src.vocab_size == max(identity["vocab_size"], eos + 1)
    assert describe_corpus(tmp_path / "out")["tokenizer"] == src.tokenizer
    assert gp.verify_corpus(tmp_path / "out").num_documents == len(TEXTS)


@pytest.mark.parametrize(
    "name, lines",
    [
        ("docs.jsonl", False),
        ("docs.jsonl.gz", False),
        ("docs.jsonl.zst", False),
        ("docs.parquet", False),
        ("docs.txt", True),  # one document per line
        ("docs.txt.zst", True),
    ],
)
def test_every_format(tmp_path, tokenizer_files, name, lines):
    texts = [t.replace("\n", " ") for t in TEXTS] if lines else TEXTS
    path = write_input(tmp_path / name, texts)
    tokenizer = tokenizer_files["huggingface"]
    src = build_corpus(
        path, tmp_path / "out", tokenizer=tokenizer, lines=lines, workers=1, part_bytes=30_000
    )
    assert [d.tolist() for d in src] == expected_ids(tokenizer, texts)
    assert src.eos_id is None and src.tokenizer["eos_appended"] is False


def test_plain_text_files_are_one_document_each(tmp_path):
    for i, text in enumerate(TEXTS[:30]):
        (tmp_path / f"{i:03d}.txt").write_text(text)
    src = build_corpus(tmp_path, tmp_path / "out", tokenizer="bytes", workers=1, part_bytes=2000)
    assert [d.tolist() for d in src] == expected_ids("bytes", TEXTS[:30])
    assert len(src.shards) > 1  # small files grouped into parts of ~2000 bytes, one shard each


def test_eos_as_a_token_string_and_dtype_from_the_vocabulary(tmp_path, tokenizer_files):
    path = write_input(tmp_path / "a.jsonl", TEXTS[:5])
    hf = tokenizer_files["huggingface"]
    src = build_corpus(path, tmp_path / "a", tokenizer=hf, eos="<|endoftext|>", workers=1)
    assert src.eos_id == 0 and all(d[-1] == 0 for d in src)
    src = build_corpus(path, tmp_path / "b", tokenizer="bytes", eos=70_000, workers=1)
    assert src.dtype == np.uint32 and src.vocab_size == 70_001 and src[0][-1] == 70_000


def big_tiktoken(path: Path, size: int) -> Path:
    """A tiktoken ranks file of ``size`` tokens: the 256 bytes, then 3-byte tokens."""
    tokens = [bytes([b]) for b in range(256)]
    tokens += [bytes([i % 256, i // 256 % 256, 65]) for i in range(size - 256)]
    lines = (f"{base64.b64encode(t).decode()} {r}\n" for r, t in enumerate(tokens))
    path.write_text("".join(lines))
    return path


class NotToBeCalled(ByteTokenizer):
    def encode_batch(self, texts):
        raise AssertionError("tokenized before the output was checked")


@pytest.mark.slow
def test_errors_write_nothing(tmp_path):
    good = write_input(tmp_path / "good.jsonl", TEXTS[:20])
    out = tmp_path / "out"
    (tmp_path / "missing.jsonl").write_text('{"text": "a"}\n{"body": "b"}\n')
    (tmp_path / "bad.jsonl.gz").write_bytes(gzip.compress(good.read_bytes())[:-100])
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "blank.jsonl").write_text("\n\n  \n")
    vocab = big_tiktoken(tmp_path / "big.tiktoken", 70_000)
    cases = [
        ([good, tmp_path / "missing.jsonl"], {}, r"missing.jsonl: line 2 at byte 14 has no"),
        ([good, tmp_path / "bad.jsonl.gz"], {}, "bad.jsonl.gz: corrupt or truncated file"),
        ([tmp_path / "empty.jsonl"], {}, r"the input is empty: 1 file\(s\) of 0 bytes"),
        ([tmp_path / "blank.jsonl"], {}, "the input holds no documents"),
        ([good], {"tokenizer": vocab, "dtype": "uint16"}, r"\(70,000 ids\) does not"),
        ([good], {"eos": 65_536, "dtype": "uint16"}, r"\(65,537 ids with eos\) does not"),
        ([good], {"field": 3}, "no text in field=3"),
        ([good], {"eos": 3_000_000_000}, "eos id 3,000,000,000 is beyond the largest id"),
        ([good], {"eos": "-1"}, "eos must be a non-negative id or a token string, got '-1'"),
    ]
    for inputs, options, message in cases:
        options = {"tokenizer": "bytes", "part_bytes": 1000, **options}
        for workers in (1, 2):
            with pytest.raises(ValueError, match=message):
                build_corpus(inputs, out, workers=workers, **options)
            assert not out.exists(), (inputs, options)
            with pytest.raises(ValueError, match=message):  # folders made for OUT go too
                build_corpus(inputs, tmp_path / "new" / "sub" / "out", workers=workers, **options)
            assert not (tmp_path / "new").exists(), (inputs, options)
    assert build_corpus(good, out, tokenizer=vocab, workers=1).dtype == np.uint32
    (tmp_path / "afile").write_text("x")
    with pytest.raises(gp.CorpusError, match=r"afile/out: Not a directory; a part of the path"):
        build_corpus(good, tmp_path / "afile" / "out", tokenizer="bytes", workers=1)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("x")
    with pytest.raises(gp.CorpusExistsError, match=r"holds files that are not part of a corpus"):
        build_corpus(good, tmp_path / "notes", tokenizer=NotToBeCalled(), workers=1)
    assert not (tmp_path / ".notes.parts").exists()


def test_a_failed_rebuild_keeps_the_old_corpus(tmp_path):
    good = write_input(tmp_path / "good.jsonl", TEXTS[:20])
    old = build_corpus(good, tmp_path / "out", tokenizer="bytes", workers=1)
    with pytest.raises(gp.CorpusExistsError, match="pass overwrite=True"):
        build_corpus(good, tmp_path / "out", tokenizer="bytes", workers=1)
    (tmp_path / "bad.jsonl").write_text('{"text": 1}\n')
    with pytest.raises(ValueError, match="line 1 at byte 0 has a number in 'text', not a string"):
        build_corpus(tmp_path / "bad.jsonl", tmp_path / "out", tokenizer="bytes", overwrite=True)
    assert gp.open_corpus(tmp_path / "out").fingerprint == old.fingerprint
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "manifest.json",
        "offsets-00000.bin",
        "summary-00000.bin",
        "tokens-00000.bin",
    ]


def test_a_corpus_written_at_out_during_a_build_is_not_replaced(tmp_path, monkeypatch):
    good = write_input(tmp_path / "good.jsonl", TEXTS[:20])
    out = tmp_path / "out"
    original = build.build_part

    def part_then_someone_writes(*args, **kwargs):
        if not out.exists():
            gp.write_corpus(out, [[1, 2, 3]])
        return original(*args, **kwargs)

    monkeypatch.setattr(build, "build_part", part_then_someone_writes)
    with pytest.raises(gp.CorpusExistsError, match="already holds a corpus"):
        build_corpus(good, out, tokenizer="bytes", workers=1)
    assert [d.tolist() for d in gp.open_corpus(out)] == [[1, 2, 3]]


def test_one_build_of_an_output_at_a_time(tmp_path):
    good = write_input(tmp_path / "good.jsonl", TEXTS[:20])
    out = tmp_path / "out"
    stage = build.parts_folder(out)
    stage.mkdir()
    (stage / "plan.json").write_text('{"key": "another build"}')
    lock = write_lock(stage)  # as a running build holds it
    try:
        with pytest.raises(gp.CorpusExistsError, match=f"another build of {out} is in progress"):
            build_corpus(good, out, tokenizer="bytes", workers=1)
        assert (stage / "plan.json").read_text() == '{"key": "another build"}'  # untouched
    finally:
        lock.release()
    assert len(build_corpus(good, out, tokenizer="bytes", workers=1)) == 20
    assert not stage.exists()


@pytest.mark.slow
def test_same_corpus_for_one_and_two_workers(tmp_path, tokenizer_files):
    inputs = [
        write_input(tmp_path / "a.jsonl", TEXTS[:300]),
        write_input(tmp_path / "b.jsonl.zst", TEXTS[300:450]),
        write_input(tmp_path / "c.parquet", TEXTS[450:]),
    ]
    options = dict(tokenizer=tokenizer_files["sentencepiece"], eos=2, part_bytes=20_000)
    one = build_corpus(inputs, tmp_path / "one", workers=1, **options)
    two = build_corpus(inputs, tmp_path / "two", workers=2, progress=True, **options)
    assert two.fingerprint == one.fingerprint
    assert len(one.shards) == len(plan_build(inputs, **options).parts) > 4
    assert [d.tolist() for d in two] == expected_ids(options["tokenizer"], TEXTS, 2)


def test_merge_of_parts_equals_a_single_build(tmp_path):
    a = write_input(tmp_path / "a.jsonl", TEXTS[:400])
    b = write_input(tmp_path / "b.jsonl", TEXTS[400:])
    options = dict(tokenizer="bytes", eos=256, workers=1, part_bytes=50_000)
    parts = [build_corpus(f, tmp_path / f.stem, **options) for f in (a, b)]
    merged = merge_corpora([tmp_path / "a", tmp_path / "b"], tmp_path / "merged")
    single = build_corpus([a, b], tmp_path / "single", **options)
    assert merged.fingerprint == single.fingerprint
    assert len(merged) == len(parts[0]) + len(parts[1]) == len(TEXTS)
    # no token was copied: the merged shards are the parts' files
    linked = os.stat(tmp_path / "merged" / "tokens-00000.bin")
    assert linked.st_ino == os.stat(tmp_path / "a" / "tokens-00000.bin").st_ino
    assert linked.st_nlink == 2
    assert gp.verify_corpus(tmp_path / "merged").num_documents == len(TEXTS)
    assert gp.open_corpus(tmp_path / "a").fingerprint == parts[0].fingerprint  # parts intact


def test_merge_refuses_mismatched_parts_and_existing_output(tmp_path):
    gp.write_corpus(tmp_path / "a", [[1, 2]], vocab_size=10)
    gp.write_corpus(tmp_path / "b", [[3]], vocab_size=11)
    gp.write_corpus(tmp_path / "c", [[4]], vocab_size=10, dtype="uint32")
    with pytest.raises(gp.CorpusError, match=r"b: vocab_size=11 but .*a has 10"):
        merge_corpora([tmp_path / "a", tmp_path / "b"], tmp_path / "out")
    with pytest.raises(gp.CorpusError, match="dtype='uint32'"):
        merge_corpora([tmp_path / "a", tmp_path / "c"], tmp_path / "out")
    with pytest.raises(gp.CorpusError, match="not a complete grainpack corpus"):
        merge_corpora([tmp_path / "a", tmp_path / "none"], tmp_path / "out")
    with pytest.raises(gp.CorpusExistsError, match="already holds a corpus"):
        merge_corpora([tmp_path / "a"], tmp_path / "b")
    with pytest.raises(ValueError, match=r"the output \S+/a is the part \S+/a or lies inside"):
        merge_corpora([tmp_path / "a"], tmp_path / "a", overwrite=True)
    with pytest.raises(ValueError, match="or lies inside it; write the merged corpus elsewhere"):
        merge_corpora([tmp_path / "a", tmp_path / "b"], tmp_path / "a" / "sub")
    assert not (tmp_path / "a" / "sub").exists()
    with pytest.raises(ValueError, match="non-empty list"):
        merge_corpora([], tmp_path / "out")
    assert not (tmp_path / "out").exists()
    merged = merge_corpora([tmp_path / "a", tmp_path / "a"], tmp_path / "b", overwrite=True)
    assert [d.tolist() for d in merged] == [[1, 2], [1, 2]]


def test_merge_follows_symlinked_shards_and_names_why_a_link_failed(tmp_path, monkeypatch):
    # os.link links a symbolic link itself: a relative one dangled at the output's depth,
    # and the broken corpus replaced a good one before it was opened. (Links stay within
    # the part's folder: one out of it is refused, tests/corpus/test_links.py.)
    store = gp.write_corpus(tmp_path / "part" / "store", [[1, 2], [3]])
    for name in os.listdir(tmp_path / "part" / "store"):
        (tmp_path / "part" / name).symlink_to(Path("store", name))
    gp.write_corpus(tmp_path / "deep" / "out", [[9]])
    merged = merge_corpora([tmp_path / "part"], tmp_path / "deep" / "out", overwrite=True)
    assert [d.tolist() for d in merged] == [[1, 2], [3]]
    shard = tmp_path / "deep" / "out" / "tokens-00000.bin"
    assert (
        not shard.is_symlink()
        and shard.stat().st_ino == os.stat(store.shards[0].tokens_path).st_ino
    )
    assert gp.verify_corpus(tmp_path / "deep" / "out").num_documents == 2

    def link(src, dst, *, errno_):
        raise OSError(errno_, os.strerror(errno_), src, dst)

    for errno_, error, match in [
        (errno.EPERM, gp.CorpusError, r"merging into \S+ \(nothing was published\): hard-linking "
         r"\S+/store/tokens-00000.bin: Operation not permitted; make it accessible"),
        (errno.ENOSPC, gp.CorpusError, r"No space left on device; the disk is full"),
    ]:  # fmt: skip
        monkeypatch.setattr(os, "link", lambda src, dst, e=errno_: link(src, dst, errno_=e))
        with pytest.raises(error, match=match):
            merge_corpora([tmp_path / "part"], tmp_path / "deep" / "out", overwrite=True)
        monkeypatch.undo()
        assert [d.tolist() for d in gp.open_corpus(tmp_path / "deep" / "out")] == [[1, 2], [3]]
    assert sorted(os.listdir(tmp_path / "deep")) == ["out"]  # nothing left
    # a shard truncated after its part was opened: the merged corpus is refused unpublished
    monkeypatch.setattr(merge, "_link", lambda file, link, out, _: link.write_bytes(b""))
    with pytest.raises(gp.CorpusError, match=r"tokens-00000\.bin: has 0 bytes, expected 6"):
        merge_corpora([tmp_path / "part"], tmp_path / "deep" / "out", overwrite=True)
    monkeypatch.undo()
    assert [d.tolist() for d in gp.open_corpus(tmp_path / "deep" / "out")] == [[1, 2], [3]]
    # another file system: refused (merge neither copies tokens nor links out of a corpus)
    monkeypatch.setattr(os, "link", lambda src, dst, e=errno.EXDEV: link(src, dst, errno_=e))
    with pytest.raises(ValueError, match="put the output on the parts' file system"):
        merge_corpora([tmp_path / "part"], tmp_path / "other")
    assert not (tmp_path / "other").exists()
    with pytest.raises(ValueError, match=r"store/tokens-00000.bin into .* parts' file system"):
        merge_corpora([tmp_path / "part" / "store"], tmp_path / "third")  # never copied


FILE_SIZE_LIMIT = """
import os, resource, sys
import grainpack as gp
from grainpack.ingest.build import build_corpus
from grainpack.ingest.merge import merge_corpora
d = sys.argv[1]
resource.setrlimit(resource.RLIMIT_FSIZE, (64, resource.RLIM_INFINITY))  # as a full disk
for write in (lambda: merge_corpora([f"{d}/p1", f"{d}/p2"], f"{d}/m"),
              lambda: build_corpus(f"{d}/a.jsonl", f"{d}/b", tokenizer="bytes", workers=1)):
    try:
        write()
    except gp.CorpusError as err:
        print(str(err).split(": File too large")[0])
print(sorted(os.listdir(d)))
"""


def test_a_full_disk_in_merge_or_a_build_plan_is_a_corpus_error_naming_the_file(tmp_path):
    # Both raised a bare OSError naming no file; the build left .b.parts/plan.json.tmp.
    gp.write_corpus(tmp_path / "p1", [[1, 2]] * 30)
    gp.write_corpus(tmp_path / "p2", [[3]] * 30)
    (tmp_path / "a.jsonl").write_text('{"text": "hi"}\n' * 30)
    script = [sys.executable, "-c", FILE_SIZE_LIMIT, str(tmp_path)]
    out = subprocess.run(script, capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0].startswith(
        f"writing {tmp_path / 'm'} (nothing was published) in {tmp_path}/.m.tmp-"
    )
    assert out[0].endswith("/manifest.json")
    assert out[1] == f"writing the build plan {tmp_path}/.b.parts/plan.json.tmp"
    assert out[2] == "['a.jsonl', 'p1', 'p2']"


def test_merge_is_published_atomically(tmp_path, monkeypatch):
    gp.write_corpus(tmp_path / "a", [[1, 2]])
    gp.write_corpus(tmp_path / "b", [[3]])

    def killed(self):
        raise OSError("killed before the corpus was published")

    merge_corpora([tmp_path / "a"], tmp_path / "out")
    monkeypatch.setattr("grainpack.ingest.transaction.Transaction._rename", killed)
    with pytest.raises(gp.CorpusError, match="killed"):
        merge_corpora([tmp_path / "a", tmp_path / "b"], tmp_path / "out", overwrite=True)
    monkeypatch.undo()
    assert [d.tolist() for d in gp.open_corpus(tmp_path / "out")] == [[1, 2]]  # the old one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "out"]  # nothing left


@pytest.mark.slow
def test_killed_build_leaves_no_corpus_and_resumes(tmp_path, tokenizer_files):
    texts = TEXTS * 12  # ~3 MB: about 50 parts of 64 KB
    source = write_input(tmp_path / "docs.jsonl", texts)
    out = tmp_path / "out"
    tokenizer = str(tokenizer_files["sentencepiece"])
    command = [sys.executable, "-m", "grainpack", "build", str(source), "-o", str(out)]
    command += ["--tokenizer", tokenizer, "--eos", "2", "--workers", "2", "--part-bytes", "65536"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(command, env=env, start_new_session=True, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    try:
        while not list(tmp_path.glob(".out.parts/part-*/manifest.json")):
            assert child.poll() is None and time.monotonic() < deadline, "no part was written"
            time.sleep(0.01)
    finally:
        os.killpg(child.pid, signal.SIGKILL)  # the command and its worker processes
        child.wait()
    assert child.returncode == -signal.SIGKILL
    with pytest.raises(gp.CorpusNotFoundError):
        gp.open_corpus(out)
    parts = out.parent / f".{out.name}.parts"  # beside the output, which is not written yet
    assert not out.exists()
    complete = [p.parent for p in parts.glob("part-*/manifest.json")]
    done = {part.name: os.stat(part / "tokens-00000.bin").st_ino for part in complete}
    assert 0 < len(done) < 40  # killed mid-way

    resumed = build_corpus(source, out, tokenizer=tokenizer, eos=2, part_bytes=65536, workers=2)
    fresh = build_corpus(source, tmp_path / "fresh", tokenizer=tokenizer, eos=2, part_bytes=65536)
    assert resumed.fingerprint == fresh.fingerprint
    assert not parts.exists()
    kept = [int(name.split("-")[1]) for name in done]
    assert all(os.stat(out / f"tokens-{k:05d}.bin").st_ino == done[f"part-{k:05d}"] for k in kept)


@pytest.mark.slow
def test_a_build_whose_worker_dies_fails_keeping_its_parts_and_resumes(tmp_path):
    # A worker killed mid-part (the OOM killer) lost its task: the build waited forever.
    from dying_tokenizer import DyingOnce

    texts = [f"document {k}" for k in range(12)]
    texts[7] = "DIE"
    inputs = [write_input(tmp_path / f"{k:02d}.jsonl", [t]) for k, t in enumerate(texts)]
    out = tmp_path / "out"
    tokenizer = DyingOnce(str(tmp_path / "died"))
    with pytest.raises(build.WorkerDied, match=r"a build worker process died \(killed, or out of"):
        build_corpus(inputs, out, tokenizer=tokenizer, workers=2, part_bytes=1)
    assert (tmp_path / "died").exists() and not out.exists()
    kept = list(tmp_path.glob(".out.parts/part-*/manifest.json"))
    planned = json.loads((tmp_path / ".out.parts" / "plan.json").read_text())["parts"]
    assert 0 < len(kept) < len(planned)  # the dead worker's part is not complete
    resumed = build_corpus(inputs, out, tokenizer="bytes", workers=2, part_bytes=1)
    assert [bytes(d.astype(np.uint8)).decode() for d in resumed] == texts


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("FailingOn", r"LibraryError: error 7: cannot encode this text"),
        ("PanickingOn", r"PanicException: called `Option::unwrap\(\)` on a `None` value"),
    ],
)
def test_a_worker_error_that_does_not_unpickle_is_reported_not_a_dead_worker(
    tmp_path, name, message
):
    import dying_tokenizer

    inputs = [write_input(tmp_path / f"{k}.jsonl", [t]) for k, t in enumerate("ab")]
    inputs.append(write_input(tmp_path / "2.jsonl", ["FAIL"]))
    tokenizer = getattr(dying_tokenizer, name)()
    with pytest.raises(RuntimeError, match=message):
        build_corpus(inputs, tmp_path / "out", tokenizer=tokenizer, workers=2, part_bytes=1)
    assert not (tmp_path / ".out.parts").exists()  # an error of the input: nothing kept


@pytest.mark.slow
def test_a_killed_builds_workers_exit_and_the_same_command_resumes_at_once(tmp_path):
    # Kill only the build (not its process group) while its workers are inside long parts:
    # they used to live on, holding the locks of their parts, and the rerun failed and
    # deleted the complete parts.
    texts = [f"document {k}" for k in range(4)] + ["SLOW"] * 4
    inputs = [write_input(tmp_path / f"{k:02d}.jsonl", [t]) for k, t in enumerate(texts)]
    out, slow = tmp_path / "out", tmp_path / "slow"
    slow.mkdir()
    code = (
        "from dying_tokenizer import SlowOn; from grainpack.ingest.build import build_corpus; "
        f"build_corpus({[str(p) for p in inputs]}, {str(out)!r}, "
        f"tokenizer=SlowOn(60, {str(slow)!r}), workers=2, part_bytes=1)"
    )
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{Path(__file__).parents[1]}"}
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(list(slow.iterdir())) < 2:  # both workers inside SLOW parts (a minute each)
        assert child.poll() is None and time.monotonic() < deadline, "no worker is slow"
        time.sleep(0.01)
    workers = [p for p in Path("/proc").glob("[0-9]*") if parent_pid(p) == child.pid]
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert workers
    deadline = time.monotonic() + 10
    while [w for w in workers if running(w)]:
        assert time.monotonic() < deadline, "the killed build's workers live on"
        time.sleep(0.05)
    resumed = build_corpus(inputs, out, tokenizer="bytes", workers=2, part_bytes=1)
    assert [bytes(d.astype(np.uint8)).decode() for d in resumed] == texts


def parent_pid(proc: Path) -> int | None:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def running(proc: Path) -> bool:
    """Whether ``/proc/<pid>`` is a process that has not exited (not a zombie)."""
    try:
        return (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_corpora_without_a_tokenizer_keep_their_fingerprint(tmp_path):
    # Golden: a manifest without a tokenizer has no "tokenizer" key, so its fingerprint is
    # the one the writer gave before tokenizers were recorded (max_token_id and
    # content_sha256 included; format version 2, with block summaries). Update only with a
    # corpus format version change.
    src = gp.write_corpus(tmp_path / "a", [[1, 2], [3], []], vocab_size=10, eos_id=3)
    assert src.fingerprint == "6a79005c31980f7bc2d67f1884c0811742e715abaf3ee14c279b7fae36051eea"
    assert src.tokenizer is None and "tokenizer" not in gp.corpus.read_manifest(tmp_path / "a")
    named = gp.write_corpus(tmp_path / "b", [[1, 2], [3], []], tokenizer={"kind": "x"})
    assert named.tokenizer == {"kind": "x"} and named.fingerprint != src.fingerprint
    with pytest.raises(TypeError, match="tokenizer must be a dict"):
        gp.write_corpus(tmp_path / "c", [[1]], tokenizer="bytes")
    manifest = tmp_path / "b" / "manifest.json"
    manifest.write_text(manifest.read_text().replace('{\n  "kind": "x"\n }', '"x"'))
    with pytest.raises(gp.CorpusError, match=r"tokenizer='x' \(expected an object"):
        gp.open_corpus(tmp_path / "b")


def test_a_script_without_a_main_guard_is_told_so(tmp_path):
    # spawned workers import the script, which built again: "another build is in progress"
    write_input(tmp_path / "a.jsonl", TEXTS[:50])
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import grainpack as gp\n"
        f"gp.build_corpus({str(tmp_path / 'a.jsonl')!r}, {str(tmp_path / 'out')!r}, "
        "tokenizer='bytes', workers=2, part_bytes=1000)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    assert out.returncode == 1
    guard = 'must call it under `if __name__ == "__main__":`, or each worker builds again'
    assert f"RuntimeError: a script that calls build_corpus with workers {guard}" in out.stderr
    assert "If it died at start, its error is above: a script" in out.stderr
    assert "another build" not in out.stderr
