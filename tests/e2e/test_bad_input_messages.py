"""Smaller messages of the bad-input catalogue, across layers (CLI, restore, verify).

Part of the bad-input catalogue; helpers in ``tests/bad_inputs.py``.
"""

from __future__ import annotations

import os
import pathlib
import re
import signal
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from bad_inputs import (
    DOCS,
    SOURCES,
    documents_of,
    edit_manifest,
    forged,
    fresh,
    pipeline,
    small_corpus,
    state_after,
)

import grainpack as gp
from grainpack.cli.main import main as cli_main

# -- smaller messages -----------------------------------------------------------------------------


def test_vocab_size_zero_does_not_suggest_uint32(tmp_path):
    with pytest.raises(ValueError, match=r"got vocab_size=0$"):
        gp.ingest.CorpusWriter(tmp_path / "c", vocab_size=0)
    with pytest.raises(ValueError, match=r"got vocab_size=70000; use dtype='uint32'$"):
        gp.ingest.CorpusWriter(tmp_path / "c", vocab_size=70000, dtype="uint16")


def test_numpy_float_weights_are_numbers():
    weights = {"en": np.float32(0.25), "fr": np.float64(0.75)}
    config = gp.PipelineConfig(sources=SOURCES, block=4, global_batch_size=2, weights=weights)
    assert config.probabilities == (0.25, 0.75)


def test_verify_checks_eos_id(tmp_path):
    path = small_corpus(tmp_path / "c", vocab_size=14, eos_id=13)
    assert "eos_id=13 is a token id" in gp.verify_corpus(path).checks
    edit_manifest(path, lambda m: m.update(eos_id=14))  # verify used to pass this
    with pytest.raises(gp.CorpusError, match=re.escape("eos_id=14 (expected < vocab_size=14)")):
        gp.verify_corpus(path)
    edit_manifest(path, lambda m: m.update(vocab_size=None, eos_id=70000))
    with pytest.raises(gp.CorpusError, match=re.escape("eos_id=70000 (expected < 65536 for")):
        gp.verify_corpus(path)
    prefix = tmp_path / "u8"  # a Megatron corpus of uint8 ids, read with an eos_id
    prefix.with_suffix(".bin").write_bytes(bytes([1, 2, 3]))
    idx = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 1, 1, 2)
    idx += struct.pack("<i", 3) + struct.pack("<q", 0) + struct.pack("<2q", 0, 1)
    prefix.with_suffix(".idx").write_bytes(idx)
    assert gp.verify_corpus(prefix, eos_id=2).num_documents == 1
    with pytest.raises(gp.CorpusError, match=re.escape(f"{prefix}: eos_id=300 is not a token")):
        gp.verify_corpus(prefix, eos_id=300)


def test_jsonl_gz_that_is_not_gzip_is_named(tmp_path):
    (tmp_path / "a.jsonl.gz").write_text('{"input_ids": [1]}\n')
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'a.jsonl.gz'}: not a valid gzip")):
        gp.ingest.convert_jsonl(tmp_path / "a.jsonl.gz", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_cli_builds_from_a_directory_of_npy_files(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    np.save(tmp_path / "in" / "b.npy", np.array([[3, 4]]))
    np.save(tmp_path / "in" / "a.npy", np.array([1, 2]))
    assert cli_main(["build", str(tmp_path / "in"), "-o", str(tmp_path / "out")]) == 0
    assert documents_of(tmp_path / "out") == [[1, 2], [3, 4]]  # files in sorted order


def test_cli_refuses_an_empty_jsonl(tmp_path, capsys):
    (tmp_path / "a.jsonl").write_text("\n\n")
    assert cli_main(["build", str(tmp_path / "a.jsonl"), "-o", str(tmp_path / "out")]) == 1
    assert (
        "no documents (empty, or blank lines only); nothing was written" in capsys.readouterr().err
    )
    assert not (tmp_path / "out").exists()


def test_restore_names_a_forged_process_layout(corpus):
    config = pipeline(corpus, block=8, global_batch_size=4)
    state = state_after(config, 3)  # saved by the only process of 1
    with pytest.raises(ValueError, match="process_count=3 does not divide global_batch_size=4"):
        fresh(config).set_state(forged(state, process_count=3))
    message = "digest of batch 2 is that of process 0 of 1, not of the process_index/process_count"
    with pytest.raises(ValueError, match=message):
        fresh(config).set_state(forged(state, process_count=2))
    # a state of process 1 of 2 given to a restore as process 0: its batch is named too
    two = iter(gp.make_dataset(config, process_index=1, process_count=2))
    for _ in range(3):
        next(two)
    with pytest.raises(ValueError, match="is that of process 1 of 2"):
        fresh(config).set_state(forged(two.get_state(), process_index=0))


def test_restore_names_a_forged_process_layout_in_the_compact_layout_too(corpus):
    config = pipeline(corpus, block=8, global_batch_size=4, layout="compact")
    state = state_after(config, 3)
    message = "digest of batch 2 is that of process 0 of 1, not of the process_index/process_count"
    with pytest.raises(ValueError, match=message):  # was a KeyError: no "inputs" in the batch
        fresh(config).set_state(forged(state, process_count=2))
    with pytest.raises(ValueError, match="batch 2 recomputed from the corpus differs"):
        fresh(config).set_state(forged(state, digest=state["digest"] ^ 1))


def test_restore_refuses_counts_no_run_reaches(tmp_path):
    paths = {n: str(small_corpus(tmp_path / n)) for n in ("en", "fr")}
    order = gp.BlockedOrder(block_docs=4, window_blocks=2)  # its states carry the counts
    config = gp.PipelineConfig(sources=paths, block=8, global_batch_size=4, order=order)
    state = state_after(config, 3)
    assert state["counts"] == [6, 6]
    for edit, message in [
        ({"counts": [2**70, 0]}, r"counts \[1180591620717411303424, 0\] pass 2\*\*62 slots"),
        # 2**62 - 4 slots of which source 1 chose none, though the hash chose it just before
        ({"step": 2**60 - 1, "counts": [2**62 - 4, 0]}, "disagree with the slot hash"),
    ]:
        with pytest.raises(ValueError, match=message):  # were OverflowError and a numpy error
            fresh(config).set_state(state | edit)


def test_the_same_documents_in_other_shards_are_the_same_corpus(tmp_path, corpus):
    src = gp.open_corpus(corpus)
    documents = [src[i] for i in range(len(src))]
    resharded = gp.write_corpus(tmp_path / "r", documents, shard_tokens=37)
    assert len(resharded.shards) != len(src.shards)
    assert resharded.fingerprint == src.fingerprint
    state = state_after(pipeline(corpus, block=8, global_batch_size=4), 3)
    it = fresh(pipeline(tmp_path / "r", block=8, global_batch_size=4))
    it.set_state(state)  # the digest of batch 2 checks out too
    want = fresh(pipeline(corpus, block=8, global_batch_size=4))
    for _ in range(3):
        next(want)
    got, expected = next(it), next(want)
    assert all(np.array_equal(got[k], expected[k]) for k in expected)
    # another document cut: another corpus
    other = gp.write_corpus(tmp_path / "o", [np.concatenate(documents[:2]), *documents[2:]])
    assert other.fingerprint != src.fingerprint


def test_show_step_config_that_is_not_json_is_named(tmp_path, capsys):
    for name, content in [("nested.json", "[" * 100_000), ("list.json", "[1]")]:
        (tmp_path / name).write_text(content)
        assert cli_main(["show-step", "1", "--config", str(tmp_path / name)]) == 1
        assert f"{tmp_path / name}: " in capsys.readouterr().err


def test_a_corpus_replaced_between_check_and_open_is_named_as_changed(tmp_path, monkeypatch):
    # A writer publishing right after a reader checked a file and before it opened it: the
    # reader reports the change (which a caller may retry), not a missing corpus.
    from grainpack.corpus.shards import FileIdentity

    path = small_corpus(tmp_path / "c", shard_tokens=4)
    src = gp.open_corpus(path)
    check = FileIdentity.check

    reader = threading.current_thread()

    def check_then_publish(self, file, stat=None):
        check(self, file, stat)
        # this thread's read only: background threads (planning ahead) check files too, and
        # two publishers at once would meet the writer's lock
        if threading.current_thread() is not reader:
            return
        if stat is None and not (tmp_path / "published").exists():
            (tmp_path / "published").touch()
            gp.write_corpus(path, [DOCS[0]], overwrite=True)  # one shard: the others go

    monkeypatch.setattr(FileIdentity, "check", check_then_publish)
    with pytest.raises(gp.CorpusError, match="changed since the corpus was opened") as err:
        src[len(src) - 1]
    assert not isinstance(err.value, gp.CorpusNotFoundError)


@pytest.mark.slow
def test_workers_exit_when_their_consumer_is_killed(tmp_path):
    """A trainer killed with SIGKILL runs no cleanup: its Grain workers must not live on as
    orphans holding their memory (they check their parent every second)."""
    code = """
import multiprocessing, sys, time
import numpy as np
import grainpack as gp
if __name__ == "__main__":
    gp.write_corpus(sys.argv[1], [np.arange(1, 60)] * 50)
    config = gp.PipelineConfig(sources={"a": sys.argv[1]}, block=8, global_batch_size=8)
    it = iter(gp.make_dataset(config, process_index=0, process_count=1, worker_count=2))
    next(it)
    print(*[p.pid for p in multiprocessing.active_children()], flush=True)
    time.sleep(120)
"""
    script = tmp_path / "trainer.py"
    script.write_text(code)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    child = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "c")],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    pids = [int(p) for p in child.stdout.readline().split()]
    assert len(pids) >= 2
    child.kill()
    child.wait()

    def running(pid: int) -> bool:  # an exited orphan may stay a zombie of a non-reaping init
        try:
            return pathlib.Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"
        except (FileNotFoundError, ProcessLookupError):
            return False

    deadline = time.monotonic() + 15
    while any(map(running, pids)) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [pid for pid in pids if running(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"orphaned workers still running: {left}"


def test_pad_and_boundary_ids_outside_a_vocabulary_are_named(tmp_path):
    gp.write_corpus(tmp_path / "c", [[1, 2, 3] * 20], vocab_size=10)
    for token, hint in (
        ("boundary_id", " (for example the tokenizer's end-of-text id)"),
        ("pad_id", ""),
    ):
        config = pipeline(tmp_path / "c", **{token: 70})
        message = (
            f"{token}=70 is outside the vocabulary of source 'a' (vocab_size=10); use an id < 10"
            + hint
        )
        with pytest.raises(ValueError, match=re.escape(message) + "$"):
            gp.make_dataset(config, process_index=0, process_count=1)
