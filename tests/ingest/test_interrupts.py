"""A Ctrl-C (``KeyboardInterrupt``) anywhere in a write leaves no lock held by this process,
no staging folder, and a build that a rerun completes (regressions of
``tests/e2e/test_crash.py``'s property tests). Each test keeps the interrupt's traceback
alive while it checks, as an interactive session keeps its last one."""

import shutil
import signal

import pytest

import grainpack as gp
from grainpack.ingest import build as build_module
from grainpack.ingest import transaction as transaction_module
from grainpack.ingest import writer as writer_module
from grainpack.ingest.transaction import Transaction, write_lock
from grainpack.processes import interrupts_deferred


@pytest.fixture
def ctrl_c(monkeypatch):
    """SIGINT raises ``KeyboardInterrupt`` (as in a terminal), restored after the test."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def assert_free(path):
    """No lock of ``path`` held (by this process either) and nothing left beside it."""
    write_lock(path).release()
    assert sorted(p.name for p in path.parent.glob(f".{path.name}.*")) == []


def test_a_sigint_while_the_lock_is_taken_is_raised_after_it_and_releases_it(
    tmp_path, monkeypatch, ctrl_c
):
    def ftruncate(fd, size):  # a Ctrl-C between flock and registering the release
        signal.raise_signal(signal.SIGINT)
        return truncate(fd, size)

    truncate = transaction_module.os.ftruncate
    monkeypatch.setattr(transaction_module.os, "ftruncate", ftruncate)
    with pytest.raises(KeyboardInterrupt) as interrupted, interrupts_deferred():
        write_lock(tmp_path / "corpus")  # (nested: held back to the outer end)
    with pytest.raises(KeyboardInterrupt):  # raised as the lock is taken: not taken
        write_lock(tmp_path / "corpus")
    monkeypatch.undo()
    assert interrupted.value is not None
    assert_free(tmp_path / "corpus")


def test_an_interrupted_writer_constructor_aborts_its_transaction(tmp_path, monkeypatch):
    def stream():
        raise KeyboardInterrupt

    monkeypatch.setattr(writer_module, "_Stream", stream)
    with pytest.raises(KeyboardInterrupt) as interrupted:
        gp.ingest.CorpusWriter(tmp_path / "corpus")
    monkeypatch.undo()
    assert interrupted.traceback  # still alive: it references the writer
    assert_free(tmp_path / "corpus")


def test_an_interrupt_as_publish_begins_aborts(tmp_path, monkeypatch):
    gp.write_corpus(tmp_path / "corpus", [[1]])
    publish = Transaction.publish

    def interrupted_publish(self):
        raise KeyboardInterrupt  # (as at its first line, before its own try)

    monkeypatch.setattr(Transaction, "publish", interrupted_publish)
    with pytest.raises(KeyboardInterrupt) as interrupted:
        gp.write_corpus(tmp_path / "corpus", [[2]], overwrite=True)
    monkeypatch.setattr(Transaction, "publish", publish)
    assert interrupted.traceback
    assert [d.tolist() for d in gp.open_corpus(tmp_path / "corpus")] == [[1]]
    assert_free(tmp_path / "corpus")


def test_an_interrupt_after_publishing_still_removes_the_replaced_corpus(tmp_path, monkeypatch):
    gp.write_corpus(tmp_path / "corpus", [[1]])
    remove = transaction_module._remove
    calls = []

    def interrupted_remove(folder, what):
        calls.append(folder)
        if len(calls) == 1:
            raise KeyboardInterrupt  # in the middle of deleting the replaced corpus
        remove(folder, what)

    monkeypatch.setattr(transaction_module, "_remove", interrupted_remove)
    with pytest.raises(KeyboardInterrupt) as interrupted:
        gp.write_corpus(tmp_path / "corpus", [[2]], overwrite=True)
    monkeypatch.undo()
    assert interrupted.traceback and len(calls) == 2
    assert [d.tolist() for d in gp.open_corpus(tmp_path / "corpus")] == [[2]]  # published
    assert_free(tmp_path / "corpus")


def test_a_build_killed_while_removing_its_parts_is_completed_by_a_rerun(tmp_path, monkeypatch):
    (tmp_path / "a.jsonl").write_text("".join(f'{{"text": "{"ab" * k}"}}\n' for k in range(60)))
    options = dict(tokenizer="bytes", part_bytes=600, shard_tokens=200, workers=1)
    reference = gp.ingest.build_corpus(tmp_path / "a.jsonl", tmp_path / "reference", **options)
    rmtree = shutil.rmtree

    def killed_rmtree(path, *args, **kwargs):  # the process dies after one shard went
        if path.name == ".out.parts":
            next(path.glob("part-00000/tokens-*.bin")).unlink()
            raise KeyboardInterrupt
        rmtree(path, *args, **kwargs)

    monkeypatch.setattr(build_module.shutil, "rmtree", killed_rmtree)
    with pytest.raises(KeyboardInterrupt):
        gp.ingest.build_corpus(tmp_path / "a.jsonl", tmp_path / "out", **options)
    monkeypatch.undo()
    # the merged corpus was published; the same build again (replacing it) completes
    src = gp.ingest.build_corpus(tmp_path / "a.jsonl", tmp_path / "out", overwrite=True, **options)
    assert src.fingerprint == reference.fingerprint
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl", "out", "reference"]


def test_a_corpus_published_while_it_is_opened_opens(tmp_path, monkeypatch):
    gp.write_corpus(tmp_path / "ready", [[1, 2]])
    is_file = type(tmp_path).is_file

    def publish_meanwhile(path):  # out is absent at the first checks, then renamed in
        if path == tmp_path / "out" and not path.exists():
            (tmp_path / "ready").rename(path)
            return False
        return is_file(path)

    monkeypatch.setattr(type(tmp_path), "is_file", publish_meanwhile)
    assert [d.tolist() for d in gp.open_corpus(tmp_path / "out")] == [[1, 2]]
