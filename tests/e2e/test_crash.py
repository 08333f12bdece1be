"""Crash safety: SIGKILL the corpus writer and the training loop, then recover.

* ``tests/crash_writer.py`` builds a corpus of many small shards and is killed mid-build, in
  ``close()`` just before or just after the atomic rename that publishes it, new or replacing a
  complete corpus: the path holds the old corpus (or nothing, if there was none) or the complete
  new one, and a rerun rebuilds it exactly and removes what the dead writer left. A second
  writer process on the same path is refused. A property test forks hundreds of writers that
  overwrite, race and are killed (SIGKILL) or interrupted (SIGINT) at random points, polling
  the path meanwhile; another stops builds from text (``build_corpus``) so and reruns them.
* ``tests/fault_train.py`` trains on ``make_dataset`` batches with Orbax checkpoints; it is
  killed at seeded steps (before/after logging a step, right after an async save, or from
  outside) and restarted from its last checkpoint each time. The batches it trained on, counted
  from the checkpoints, are exactly those of an uninterrupted run: nothing lost, nothing
  repeated. Once with one process, once with two ``jax.distributed`` processes.

Every child is bounded by a deadline and killed (SIGKILL, by its own pid) on any exit path.
"""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import json
import os
import pathlib
import queue
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import types
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest

import grainpack as gp
from grainpack.pipeline.dataset import batch_digest

pytestmark = pytest.mark.slow  # every test here starts and kills processes

TESTS = pathlib.Path(__file__).resolve().parents[1]
REPO = TESTS.parent
CRASH_WRITER = TESTS / "crash_writer.py"
FAULT_TRAIN = TESTS / "fault_train.py"
TIMEOUT = 60  # seconds for any one child (or launch of children) to reach its next event
SEED = 20240909
MULTIPLIER = 1000003  # fault_train.MULTIPLIER


def child_env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=path)


def load_crash_writer() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("crash_writer", CRASH_WRITER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


crash_writer = load_crash_writer()


# -- children -----------------------------------------------------------------------------


class Child:
    """A child process whose stdout lines are collected by a thread (no pipe can fill up)."""

    def __init__(self, args: Sequence[str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def expect(self, line: str, timeout: float = TIMEOUT) -> None:
        """Waits until the child prints ``line``; fails if it exits or times out first."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                got = self.lines.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                pytest.fail(f"timed out waiting for {line!r}; saw {self.seen[-5:]}")
            if got is None:
                self.proc.wait(timeout=TIMEOUT)
                pytest.fail(
                    f"child exited ({self.proc.returncode}) before printing {line!r}; "
                    f"saw {self.seen[-5:]}; stderr: {self.proc.stderr.read()[-2000:]}"
                )
            self.seen.append(got)
            if got == line:
                return

    def kill(self) -> int:
        """SIGKILLs the child (if still running) and returns its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        return self.proc.wait(timeout=TIMEOUT)

    def printed(self) -> list[str]:
        """Every line the child printed (call after it exited)."""
        while (line := self.lines.get(timeout=TIMEOUT)) is not None:
            self.seen.append(line)
        self.lines.put(None)
        return self.seen


@contextlib.contextmanager
def child(args: Sequence[str]) -> Iterator[Child]:
    c = Child(args)
    try:
        yield c
    finally:
        c.kill()
        c.proc.stdout.close()
        c.proc.stderr.close()


# -- crash-safe corpus writing ------------------------------------------------------------

DOCUMENTS = 6000  # about 240k tokens
SHARD_TOKENS = 2048  # about 120 shards


def writer_args(path: pathlib.Path, seed: int, *extra: str) -> list[str]:
    return [
        CRASH_WRITER,
        path,
        "--documents",
        DOCUMENTS,
        "--shard-tokens",
        SHARD_TOKENS,
        "--seed",
        seed,
        "--progress",
        250,
        *extra,
    ]


def verify_exit(path: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grainpack", "verify", str(path)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=child_env(),
    )


def assert_complete_build(path: pathlib.Path, reference: gp.corpus.TokenShardSource) -> None:
    """``path`` holds exactly the reference corpus, and only its files."""
    src = gp.open_corpus(path)
    assert src.fingerprint == reference.fingerprint  # sha256 of the content, via the manifest
    np.testing.assert_array_equal(src.offsets, reference.offsets)
    np.testing.assert_array_equal(
        src.read_tokens(0, src.num_tokens), reference.read_tokens(0, reference.num_tokens)
    )
    manifest = gp.corpus.read_manifest(path)
    keys = ("tokens_file", "offsets_file", "summary_file")
    files = {s[key] for s in manifest["shards"] for key in keys}
    assert {p.name for p in path.iterdir()} == files | {"manifest.json"}
    assert gp.verify_corpus(path).num_documents == DOCUMENTS


def leftovers(path: pathlib.Path) -> list[str]:
    """What writers left next to ``path`` (staging folders, replaced folders, lock files)."""
    return sorted(p.name for p in path.parent.glob(f".{path.name}.*"))


@pytest.fixture(scope="module")
def references(tmp_path_factory) -> dict[int, gp.corpus.TokenShardSource]:
    """Complete corpora of seeds 1 and 2, written in this process."""
    root = tmp_path_factory.mktemp("reference")
    return {
        seed: gp.write_corpus(
            root / str(seed),
            crash_writer.documents(seed, DOCUMENTS),
            shard_tokens=SHARD_TOKENS,
        )
        for seed in (1, 2)
    }


@pytest.mark.parametrize("overwrite", [False, True], ids=["new", "overwrite"])
@pytest.mark.parametrize("moment", ["paused", "running", "publish", "published"])
def test_writer_killed_leaves_old_or_new_corpus_and_rerun_rebuilds(
    tmp_path, references, overwrite, moment
):
    rng = random.Random(f"{SEED}-{moment}-{overwrite}")
    out = tmp_path / "corpus"
    if overwrite:  # a complete corpus of seed 1 is being replaced by seed 2
        crash_writer.build(str(out), seed=1, count=DOCUMENTS, shard_tokens=SHARD_TOKENS)
        assert gp.open_corpus(out).fingerprint == references[1].fingerprint
    flags = ["--overwrite"] if overwrite else []
    k = 250 * rng.randint(2, DOCUMENTS // 500)  # a progress line in the first half
    if moment == "paused":  # stopped right after document k was added
        args, wait_for = writer_args(out, 2, *flags, "--pause-after", str(k)), f"paused {k}"
    elif moment == "running":  # killed while it keeps writing
        args, wait_for = writer_args(out, 2, *flags), f"progress {k}"
    else:  # every file written and fsync'd, just before or just after the atomic rename
        args = writer_args(out, 2, *flags, "--pause-at", moment)
        wait_for = {"publish": "publishing", "published": "published"}[moment]
    with child(args) as writer:
        writer.expect(wait_for)
        assert writer.kill() == -signal.SIGKILL
        assert "done" not in writer.printed()
    staged = [p for p in tmp_path.glob(".corpus.tmp-*") if p.is_dir()]
    # the killed writer left its staging folder, or (renamed) the folder it replaced
    assert len(staged) == (0 if moment == "published" and not overwrite else 1)
    if moment == "published":  # the rename happened: the new corpus is complete
        assert_complete_build(out, references[2])
    elif overwrite:  # the old corpus, untouched and complete
        assert gp.open_corpus(out).fingerprint == references[1].fingerprint
        assert gp.verify_corpus(out).num_documents == DOCUMENTS
    else:  # nothing was ever published
        with pytest.raises(gp.CorpusNotFoundError, match="does not exist"):
            gp.open_corpus(out)
        result = verify_exit(out)
        assert result.returncode == 1 and "does not exist" in result.stderr, result

    crash_writer.build(  # the same build again
        str(out), seed=2, count=DOCUMENTS, shard_tokens=SHARD_TOKENS, overwrite=True
    )
    assert_complete_build(out, references[2])
    assert leftovers(out) == []  # staging folders of dead writers and their lock are gone


def test_two_writer_processes_on_one_path_the_second_is_refused(tmp_path, references):
    out = tmp_path / "corpus"
    with child(writer_args(out, 1, "--pause-after", "500")) as first:
        first.expect("paused 500")
        second = subprocess.run(
            [sys.executable, *map(str, writer_args(out, 2))],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env=child_env(),
        )
        assert second.returncode == 1, second
        assert f"refused another write to {out} is in progress (process" in second.stdout
        assert not out.exists()  # neither published anything
        first.kill()
    # once the first is dead its lock is free: a write succeeds and removes its leftovers
    crash_writer.build(str(out), seed=2, count=DOCUMENTS, shard_tokens=SHARD_TOKENS)
    assert_complete_build(out, references[2])
    assert leftovers(out) == []


# -- property: killed, racing and completed writers over one path -------------------------


class Zygote:
    """``crash_writer.py --serve``: forks writers on demand; collects their lines per tag
    (and the last lines of everyone's stderr, read as well so that no pipe fills up)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(CRASH_WRITER), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        self.events: collections.defaultdict[str, list[str]] = collections.defaultdict(list)
        self.stderr: collections.deque[str] = collections.deque(maxlen=40)
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self.stderr.extend, args=(self.proc.stderr,), daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            tag, _, event = line.rstrip("\n").partition(" ")
            with self.changed:
                self.events[tag].append(event)
                self.changed.notify_all()

    def send(self, **command: Any) -> None:
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def wait_for(self, tag: str, *prefixes: str) -> str:
        """The first line of writer ``tag`` that starts with one of ``prefixes``."""

        def found() -> str | None:
            return next((e for e in self.events[tag] if e.startswith(prefixes)), None)

        with self.changed:
            if not self.changed.wait_for(found, timeout=TIMEOUT):
                pytest.fail(
                    f"writer {tag} did not print {prefixes}: {self.events[tag][-5:]}; "
                    f"stderr: {''.join(self.stderr)[-2000:]}"
                )
            return found()  # type: ignore[return-value]

    def reap(self, tag: str, pid: int) -> int:
        """Waits for writer ``tag`` (process ``pid``) to exit; its exit code (-N: signal N)."""
        self.send(op="reap", tag=tag, pid=pid)
        return int(self.wait_for(tag, "exit ").split()[1])

    def close(self, pids: Sequence[int] = ()) -> None:
        """Ends the zygote; first SIGKILLs ``pids`` (children of a failed test) if alive."""
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:  # still reaping a child that does not exit
            self.proc.kill()
            self.proc.wait(timeout=TIMEOUT)
        self.proc.stdout.close()
        self.proc.stderr.close()


def held_with_traceback(events: list[str]) -> bool:
    """Whether an interrupted writer still held a lock or a staging folder while the
    ``KeyboardInterrupt``'s traceback was alive (released by its finalizers at exit)."""
    return any(e.startswith("interrupted ") and e != "interrupted 0" for e in events)


def read_documents(path: pathlib.Path) -> list[tuple[int, ...]] | None:
    """The documents at ``path`` (checked end to end by ``verify``), ``None`` if no corpus."""
    try:
        src = gp.open_corpus(path)
        documents = [tuple(src[i].tolist()) for i in range(len(src))]
    except gp.CorpusNotFoundError:
        return None
    except gp.CorpusError as err:  # a reader racing a publish: only "changed since opened"
        assert "changed since the corpus was opened" in str(err), err
        return read_documents(path)
    return documents


WRITER_COUNT, WRITER_SHARD_TOKENS = 30, 128  # ~1200 tokens in ~10 shards: 20 files to tear
PROPERTY_CASES = 240
TIMER_SECONDS = 0.05  # about the life of one writer: a random instant falls anywhere in it
# the seed of the property tests' random choices; GRAINPACK_CRASH_SEED=N replays another run
PROPERTY_SEED = int(os.environ.get("GRAINPACK_CRASH_SEED", SEED))
SIGNALS = {"kill": signal.SIGKILL, "int": signal.SIGINT}  # SIGINT: Ctrl-C, KeyboardInterrupt


def test_property_path_always_holds_a_complete_corpus(tmp_path):
    """Random writers over one path: each overwrites, races another or not, and is stopped
    at a pause point, at a random instant or not at all, by SIGKILL or by SIGINT (a
    ``KeyboardInterrupt`` it handles). After every case, and at every poll while the writers
    run, the path holds exactly one of the versions written so far (the last complete one or
    a new one), never a mix of two, never nothing. An interrupted writer holds no lock and
    left no staging folder of its own (it checks in its own process, then so does the test).
    """
    seed = PROPERTY_SEED
    print(f"property seed {seed} (GRAINPACK_CRASH_SEED={seed} replays this run)")
    rng = random.Random(seed)
    path = tmp_path / "corpus"
    versions = {
        seed: [tuple(d.tolist()) for d in crash_writer.documents(seed, WRITER_COUNT)]
        for seed in range(PROPERTY_CASES * 2 + 1)
    }
    by_content = {tuple(docs): seed for seed, docs in versions.items()}
    gp.write_corpus(path, versions[0], shard_tokens=WRITER_SHARD_TOKENS)
    current = 0
    kinds = collections.Counter()
    zygote = Zygote()
    live: set[int] = set()  # started and not reaped: SIGKILLed if the test fails
    try:
        for case in range(PROPERTY_CASES):
            where = f"seed {seed}, case {case}"
            writers = [2 * case + 1] + ([2 * case + 2] if rng.random() < 0.25 else [])
            pids = {}
            plans = {}
            for version in writers:
                how = rng.choice(["after", "publish", "published", "timer", "timer", "none"])
                pause = {
                    "after": f"after:{rng.randint(1, WRITER_COUNT)}",
                    "publish": "publish",
                    "published": "published",
                }.get(how)
                tag = f"w{version}"
                zygote.send(
                    op="write",
                    tag=tag,
                    path=str(path),
                    seed=version,
                    count=WRITER_COUNT,
                    shard_tokens=WRITER_SHARD_TOKENS,
                    overwrite=rng.random() < 0.9,
                    pause=pause,
                )
                pids[tag] = int(zygote.wait_for(tag, "pid ").split()[1])
                live.add(pids[tag])
                plans[tag] = (how, pause, rng.choice(list(SIGNALS)))
            allowed = {current, *writers}
            ends = ("done", "refused", "error", "interrupted")
            for tag, (how, pause, sig) in plans.items():
                if pause is not None:  # stopped where it paused (unless it ended first)
                    event = zygote.wait_for(tag, "paused" if how == "after" else pause, *ends)
                elif how == "timer":  # stopped at a random instant of its life
                    deadline = time.monotonic() + rng.uniform(0.0, TIMER_SECONDS)
                    while time.monotonic() < deadline:
                        assert by_content.get(tuple(read_documents(path) or ())) in allowed, where
                    event = "timer"
                else:  # runs to its end
                    event = zygote.wait_for(tag, *ends)
                    sig = "none"
                assert not event.startswith(("error", "interrupted")), (where, event)
                kinds[f"{how}:{event.split()[0]}:{sig}"] += 1
                if event == "done":
                    plans[tag] = (how, pause, "none")
                elif sig != "none":
                    os.kill(pids[tag], SIGNALS[sig])
            for tag, pid in pids.items():
                code = zygote.reap(tag, pid)
                live.discard(pid)
                events = zygote.events[tag]
                what = (where, tag, plans[tag], code, [e for e in events if "progress" not in e])
                assert not any(e.startswith("error") for e in events), what
                if plans[tag][2] == "int":  # handled: no lock, no staging folder left
                    assert code in (0, 130), what
                    kinds["int:interrupted"] += any(e.startswith("interrupted") for e in events)
                    kinds["int:held with the traceback"] += held_with_traceback(events)
                    assert not list(tmp_path.glob(f".{path.name}.tmp-{pid}-*")), (where, tag)
            documents = read_documents(path)
            assert documents is not None, f"{where}: nothing at {path}"
            version = by_content.get(tuple(documents))
            assert version in allowed, f"{where}: {path} holds a corpus nobody wrote"
            if case % 20 == 0:
                assert gp.verify_corpus(path).num_documents == WRITER_COUNT
            current = version
    finally:
        zygote.close(sorted(live))
    # every kind of ending happened, and the last write cleans what dead writers left
    print(f"property seed {seed}: {sorted(kinds.items())}")
    assert kinds["published:published:kill"] and kinds["publish:publishing:kill"], kinds
    assert kinds["published:published:int"] and kinds["publish:publishing:int"], kinds
    assert sum(n for k, n in kinds.items() if k.startswith("timer")) > PROPERTY_CASES // 4
    assert kinds["int:interrupted"] > PROPERTY_CASES // 4, kinds
    gp.write_corpus(path, versions[0], shard_tokens=WRITER_SHARD_TOKENS, overwrite=True)
    assert leftovers(path) == []


# -- property: builds from text killed or interrupted at random points ----------------------

BUILD_CASES = 56
BUILD_PART_BYTES, BUILD_SHARD_TOKENS = 400, 300  # ~7 parts of ~1-2 shards
BUILD_SHUFFLE = 7


def write_texts(folder: pathlib.Path, seed: int) -> pathlib.Path:
    """Two JSON-lines files and a plain text file (one document) of random text."""
    rng = random.Random(seed)
    folder.mkdir()

    def text() -> str:
        return "".join(rng.choice("abcdefgh é\tжß") for _ in range(rng.randint(0, 40)))

    for k in range(2):
        records = [json.dumps({"text": text()}) + "\n" for _ in range(24)]
        (folder / f"{k}.jsonl").write_text("".join(records))
    (folder / "2.txt").write_text(text() * 10)
    return folder


def corpus_files(path: pathlib.Path) -> dict[str, bytes] | None:
    """Every file of the corpus at ``path`` by name; ``None`` if it holds no manifest."""
    if not (path / "manifest.json").is_file():
        return None
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def kept_for_rerun(out: pathlib.Path, key: str, shuffled: bool) -> str:
    """What a rerun of the build of ``out`` (plan ``key``) finds to resume: ``"staged"`` (a
    shuffled build's unshuffled corpus, recorded under the key), else ``"parts N"`` (the
    complete parts kept under the key)."""
    if shuffled:
        out = out.with_name(f".{out.name}.unshuffled")
        with contextlib.suppress(OSError, ValueError):
            recorded = json.loads(out.with_name(f"{out.name}.key").read_text())
            if recorded == {"plan": key, "fingerprint": gp.open_corpus(out).fingerprint}:
                return "staged"
    stage = out.with_name(f".{out.name}.parts")
    with contextlib.suppress(OSError, ValueError):
        if json.loads((stage / "plan.json").read_text())["key"] == key:
            return f"parts {len(list(stage.glob('part-*/manifest.json')))}"
    return "parts 0"


def resumed(events: list[str], shuffled: bool) -> str:
    """What a build reported it resumed (in the terms of :func:`kept_for_rerun`)."""
    if shuffled and any(e.startswith("log ") and "written before" in e for e in events):
        return "staged"
    notes = [e.split()[2] for e in events if e.startswith("log reusing ")]
    return f"parts {notes[0] if notes else 0}"


def group_alive(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that have not exited (zombies excluded)."""
    alive = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = pathlib.Path(f"/proc/{entry}/stat").read_text()
            except OSError:  # exited meanwhile
                continue
            state, _, pgrp = stat.rsplit(")", 1)[1].split()[:3]
            if int(pgrp) == pgid and state != "Z":
                alive.append(int(entry))
    return alive


def test_property_builds_from_text_interrupted_leave_nothing_or_the_corpus(tmp_path):
    """Random builds from text (``build_corpus(..., tokenizer="bytes")``: one or two
    workers, in input order or shuffled, new or replacing a corpus) stopped at a random
    instant or at a pause point (before or after the rename of any of its publishes: a
    part, the merge, the shuffled copy) by SIGKILL or SIGINT, sent to the build alone or
    to its process group (a terminal's Ctrl-C, a killed job). Meanwhile and after, ``out``
    holds no manifest (or the corpus it replaces) or the complete corpus of an uninterrupted
    build; an interrupted build holds no lock and left no staging folder of its own. The
    same command again completes, resumes exactly the parts (or the unshuffled corpus) that
    were complete, equals the uninterrupted build bit for bit and leaves nothing beside it.
    """
    seed = PROPERTY_SEED
    print(f"build property seed {seed} (GRAINPACK_CRASH_SEED={seed} replays this run)")
    rng = random.Random(seed)
    inputs = write_texts(tmp_path / "texts", 1)
    options = dict(tokenizer="bytes", part_bytes=BUILD_PART_BYTES, shard_tokens=BUILD_SHARD_TOKENS)
    plan = gp.ingest.build.plan_build(inputs, **options)
    parts = len(plan.parts)
    expected = {}  # shuffle -> files of the uninterrupted build (in this process)
    for shuffle in (None, BUILD_SHUFFLE):
        out = tmp_path / f"reference-{shuffle}" / "out"
        gp.ingest.build_corpus(inputs, out, workers=1, shuffle=shuffle, **options)
        expected[shuffle] = corpus_files(out)
    old_corpus = tmp_path / "old" / "out"  # what a replacing build replaces
    gp.ingest.build_corpus(write_texts(tmp_path / "old-texts", 2), old_corpus, **options)
    old = corpus_files(old_corpus)
    documents = {
        name: read_documents(path)
        for name, path in [("old", old_corpus)]
        + [(f"new-{s}", tmp_path / f"reference-{s}" / "out") for s in expected]
    }
    kinds = collections.Counter()
    zygote = Zygote()
    live: set[int] = set()  # process groups started and not drained: SIGKILLed on failure
    serial = iter(range(10**6))

    def build(root: pathlib.Path, **command: Any) -> tuple[str, int]:
        tag = f"b{next(serial)}"
        command = {"inputs": str(inputs), "out": str(root / "out"), "pause": None, **command}
        zygote.send(op="build", tag=tag, part_bytes=BUILD_PART_BYTES,
                    shard_tokens=BUILD_SHARD_TOKENS, **command)  # fmt: skip
        pid = int(zygote.wait_for(tag, "pid ").split()[1])
        live.add(pid)
        return tag, pid

    def reap(tag: str, pid: int) -> int:
        code = zygote.reap(tag, pid)
        deadline = time.monotonic() + TIMEOUT
        while group_alive(pid):  # its workers (with SIGKILL to it alone: they exit themselves)
            assert time.monotonic() < deadline, f"workers of {tag} outlived it: {group_alive(pid)}"
            time.sleep(0.01)
        live.discard(pid)
        return code

    try:
        durations = {}  # (workers, shuffle) -> seconds of an uninterrupted build here
        for workers in (1, 2):
            for shuffle in expected:
                root = tmp_path / f"timed-{workers}-{shuffle}"
                start = time.monotonic()
                tag, pid = build(root, workers=workers, shuffle=shuffle, overwrite=False)
                zygote.wait_for(tag, "done", "error")
                durations[workers, shuffle] = time.monotonic() - start
                assert reap(tag, pid) == 0, zygote.events[tag]
                assert corpus_files(root / "out") == expected[shuffle], (workers, shuffle)
        for case in range(BUILD_CASES):
            where = f"seed {seed}, case {case}"
            root = tmp_path / f"case-{case}"
            root.mkdir()
            out = root / "out"
            workers = 2 if rng.random() < 0.12 else 1
            shuffle = rng.choice(list(expected))
            replace = rng.random() < 0.5
            if replace:
                shutil.copytree(old_corpus, out)
            sig = rng.choice(list(SIGNALS))
            group = workers > 1 and rng.random() < 0.5
            publishes = (parts if workers == 1 else 0) + 1  # parts with one worker, the merge
            if shuffle is not None:
                publishes += 1  # the shuffled copy
            how = rng.choice(["timer", "timer", "publish", "published"])
            pause = None if how == "timer" else f"{how}:{rng.randint(1, publishes)}"
            tag, pid = build(root, workers=workers, shuffle=shuffle, overwrite=replace, pause=pause)
            print(f"{where}: {tag} workers={workers} shuffle={shuffle} replace={replace} {how=} "
                  f"{pause=} {sig=} {group=}")  # fmt: skip
            allowed_documents = [documents["old"] if replace else None, documents[f"new-{shuffle}"]]
            if pause is None:
                deadline = time.monotonic() + rng.uniform(0.0, durations[workers, shuffle])
                while time.monotonic() < deadline:
                    assert read_documents(out) in allowed_documents, where
                event = "timer"
            else:
                event = zygote.wait_for(
                    tag, {"publish": "publishing"}.get(how, how), "done", "error"
                )
            assert not event.startswith("error"), (where, event)
            if event != "done":
                (os.killpg if group else os.kill)(pid, SIGNALS[sig])
            code = reap(tag, pid)
            events = zygote.events[tag]
            assert not any(e.startswith("error") for e in events), (where, events)
            if sig == "int" and event != "done":
                assert code in (0, 130), (where, code, events)
            ended = "done" if "done" in events else "interrupted" if code == 130 else f"exit {code}"
            kinds["int:held with the traceback"] += held_with_traceback(events)
            kinds[f"{how}:{sig}:{ended}:{'group' if group else 'one'}"] += 1
            kinds[f"workers {workers}, shuffle {shuffle}, {'replace' if replace else 'new'}"] += 1
            left = corpus_files(out)
            assert left in ([old] if replace else []) + [expected[shuffle]] or (
                left is None and not out.exists() and not replace
            ), f"{where}: {out} holds neither nothing nor the old or the new corpus"
            # the same command again (replacing the new corpus if it was published)
            kept = kept_for_rerun(out, plan.key, shuffle is not None)
            kinds[kept.split()[0] + (" 0" if kept == "parts 0" else "")] += 1
            again = rng.choice([1, 1, 2]) if workers > 1 else 1
            tag, pid = build(root, workers=again, shuffle=shuffle, overwrite=left is not None)
            assert reap(tag, pid) == 0 and "done" in zygote.events[tag], (where, zygote.events[tag])
            assert resumed(zygote.events[tag], shuffle is not None) == kept, (where, kept)
            assert corpus_files(out) == expected[shuffle], f"{where}: the rerun differs"
            assert sorted(os.listdir(root)) == ["out"], f"{where}: left {os.listdir(root)}"
            if case % 16 == 0:
                gp.verify_corpus(out)
    finally:
        for pgid in live:
            with contextlib.suppress(OSError):
                os.killpg(pgid, signal.SIGKILL)
        zygote.close()
    print(f"build property seed {seed}: {sorted(kinds.items())}")
    assert kinds["parts"], kinds  # reruns resumed kept parts (and, in some runs, "staged")
    assert sum(n for k, n in kinds.items() if ":int:interrupted:" in k) > BUILD_CASES // 5, kinds


# -- fault-injected training --------------------------------------------------------------


def training_config(root: pathlib.Path) -> dict[str, Any]:
    """Two sources; the small one ("fr") rolls over several epochs during the run."""
    rng = np.random.default_rng(5)
    en = [rng.integers(1, 500, size=rng.integers(1, 40)) for _ in range(80)]
    fr = [rng.integers(1, 500, size=rng.integers(1, 12)) for _ in range(6)]
    gp.write_corpus(root / "en", en, shard_tokens=300)
    gp.write_corpus(root / "fr", fr)
    return dict(
        sources={"en": str(root / "en"), "fr": str(root / "fr")},
        block=16,
        global_batch_size=4,
        seed=3,
        weights={"en": 0.7, "fr": 0.3},
        boundary_id=500,
    )


def reference_run(
    config: dict[str, Any], steps: int, process_count: int
) -> tuple[list[list[int]], int]:
    """Digests of each process's batches and the final ``acc`` of an uninterrupted run.

    Also checks that the processes' rows, interleaved by slot, are the one-process batches.
    """
    cfg = gp.PipelineConfig(**config)
    single = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    local = [
        iter(gp.make_dataset(cfg, process_index=p, process_count=process_count))
        for p in range(process_count)
    ]
    digests: list[list[int]] = [[] for _ in range(process_count)]
    acc = 0
    for _ in range(steps):
        whole = next(single)
        for p, iterator in enumerate(local):
            batch = next(iterator)
            digests[p].append(batch_digest(batch))
            for key in batch:
                np.testing.assert_array_equal(batch[key], whole[key][p::process_count])
        total = int((whole["inputs"].astype(np.int64) * whole["loss_mask"]).sum())
        acc = (acc * MULTIPLIER + total) % 2**32
    return digests, acc


def kill_schedule(
    rng: random.Random, steps: int, save_every: int, modes: list[str]
) -> list[tuple[int, str]]:
    """One kill step per mode, increasing, so every launch reaches its kill.

    Mode ``after_save`` kills at a step that saves; ``external`` is a SIGKILL from the test.
    """
    modes = list(modes)
    rng.shuffle(modes)
    lo, hi = 1, steps - 4  # leave a few steps (and a save) after the last kill
    width = (hi - lo) // len(modes)
    schedule = []
    for w, mode in enumerate(modes):
        window = range(lo + w * width, lo + (w + 1) * width)
        fits = [t for t in window if mode != "after_save" or (t + 1) % save_every == 0]
        schedule.append((rng.choice(fits), mode))
    return schedule


class Launch:
    """All processes of one launch of ``fault_train.py`` (stdout+stderr to a file each)."""

    def __init__(
        self,
        root: pathlib.Path,
        index: int,
        args: list[str],
        kill: str | None,
        kill_process: int,
        num_processes: int,
    ) -> None:
        port = None
        if num_processes > 1:
            import portpicker

            port = portpicker.pick_unused_port()
        self.procs: list[subprocess.Popen] = []
        self.outputs = [root / f"launch{index}.{p}.txt" for p in range(num_processes)]
        try:
            for p in range(num_processes):
                extra = []
                if num_processes > 1:
                    extra += ["--process-id", p, "--num-processes", num_processes, "--port", port]
                if kill is not None and p == kill_process:
                    extra += ["--kill", kill]
                with open(self.outputs[p], "w") as out:
                    self.procs.append(
                        subprocess.Popen(
                            [sys.executable, FAULT_TRAIN, *args, *map(str, extra)],
                            stdout=out,
                            stderr=subprocess.STDOUT,
                            env=child_env(),
                        )
                    )
        except BaseException:
            self.kill_all()
            raise

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        for proc in self.procs:
            proc.wait(timeout=TIMEOUT)

    def output(self) -> str:
        return "\n".join(f"--- {f.name}\n{f.read_text()[-3000:]}" for f in self.outputs)

    def wait(self, *, kill_rest: bool) -> list[int]:
        """Exit codes; with ``kill_rest``, SIGKILLs the others once one process has exited."""
        deadline = time.monotonic() + TIMEOUT
        try:
            while time.monotonic() < deadline:
                codes = [proc.poll() for proc in self.procs]
                if None not in codes:
                    return codes
                if any(c is not None and (kill_rest or c != 0) for c in codes):
                    self.kill_all()
                    return [proc.returncode for proc in self.procs]
                time.sleep(0.005)
            pytest.fail(f"launch did not finish in {TIMEOUT} s:\n{self.output()}")
        finally:
            self.kill_all()

    def wait_for_step(self, log: pathlib.Path, offset: int, step: int) -> None:
        """Waits until ``log`` (past ``offset``) records ``step``, then SIGKILLs everything."""
        deadline = time.monotonic() + TIMEOUT
        try:
            while time.monotonic() < deadline:
                text = log.read_text()[offset:] if log.exists() else ""
                if any(line.split(" ")[0] == str(step) for line in text.splitlines()):
                    return
                if any(proc.poll() is not None for proc in self.procs):
                    pytest.fail(f"a process exited before step {step}:\n{self.output()}")
                time.sleep(0.005)
            pytest.fail(f"step {step} not reached in {TIMEOUT} s:\n{self.output()}")
        finally:
            self.kill_all()


def parse_log(
    text: str,
) -> tuple[list[tuple[int, int]], list[tuple[int, int]], list[int], int | None]:
    """(every logged step, the steps counted from checkpoints, restore points, final acc).

    A ``start c`` line means the launch resumed from checkpoint ``c``: everything logged from
    step ``c`` on was rolled back, so the counted sequence is truncated to ``c`` first.
    """
    logged, counted, starts, acc = [], [], [], None
    for line in text.splitlines():
        head, value = line.split(" ")
        if head == "start":
            c = int(value)
            assert [t for t, _ in counted[:c]] == list(range(c)), "lost steps before restore"
            counted = counted[:c]
            starts.append(c)
        elif head == "done":
            acc = int(value)
        else:
            logged.append((int(head), int(value)))
            counted.append(logged[-1])
    return logged, counted, starts, acc


def run_with_faults(
    root: pathlib.Path,
    *,
    num_processes: int,
    steps: int,
    save_every: int,
    modes: list[str],
    seed: int,
) -> None:
    config = training_config(root)
    (root / "config.json").write_text(json.dumps(config))
    log = root / "log"
    args = [
        "--config", root / "config.json",
        "--checkpoints", root / "checkpoints",
        "--log", log,
        "--steps", steps,
        "--save-every", save_every,
    ]  # fmt: skip
    args = list(map(str, args))
    rng = random.Random(seed)
    schedule = kill_schedule(rng, steps, save_every, modes)
    log0 = pathlib.Path(f"{log}.0")
    self_kills = 0
    for index, (step, mode) in enumerate(schedule):
        victim = self_kills % num_processes  # self-kills alternate between the processes
        self_kills += mode != "external"
        offset = len(log0.read_text()) if log0.exists() else 0
        kill = None if mode == "external" else f"{step}:{mode}"
        launch = Launch(root, index, args, kill, victim, num_processes)
        if mode == "external":
            launch.wait_for_step(log0, offset, step)
            codes = [proc.returncode for proc in launch.procs]
            assert all(c == -signal.SIGKILL for c in codes), (codes, launch.output())
        else:
            codes = launch.wait(kill_rest=True)
            assert codes[victim] == -signal.SIGKILL, (schedule, codes, launch.output())
    final = Launch(root, len(schedule), args, None, 0, num_processes)
    codes = final.wait(kill_rest=False)
    assert codes == [0] * num_processes, final.output()

    expected, expected_acc = reference_run(config, steps, num_processes)
    for p in range(num_processes):
        logged, counted, starts, acc = parse_log(pathlib.Path(f"{log}.{p}").read_text())
        # every batch the loader ever emitted for step t, before or after a crash, is batch t
        assert all(digest == expected[p][t] for t, digest in logged)
        # counted from the checkpoints: each step once, in order, nothing lost or repeated
        assert counted == list(enumerate(expected[p]))
        assert len(starts) == len(schedule) + 1 and starts[0] == 0
        assert all(c % save_every == 0 for c in starts) and starts == sorted(starts)
        assert starts[-1] > 0  # (a second save waits for the first: some save committed)
        # the train state restored with the data state trained on exactly those batches
        assert acc == expected_acc


def test_training_killed_repeatedly_resumes_exactly_one_process(tmp_path):
    run_with_faults(
        tmp_path,
        num_processes=1,
        steps=24,
        save_every=3,
        modes=["before_log", "after_log", "after_save", "external"],
        seed=SEED,
    )


def test_training_killed_repeatedly_resumes_exactly_two_processes(tmp_path):
    pytest.importorskip("portpicker")
    run_with_faults(
        tmp_path,
        num_processes=2,
        steps=18,
        save_every=3,
        modes=["before_log", "after_save", "external"],
        seed=SEED + 1,
    )
