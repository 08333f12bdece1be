"""grainpack.writer: validation, refusing to overwrite, interrupted writes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from grainpack.corpus.errors import CorpusError
from grainpack.corpus.formats import open_corpus
from grainpack.ingest.writer import CorpusWriter, shuffle_corpus, shuffled_order, write_corpus

DOCS = [[1, 2, 3], [], [4, 5, 6, 7, 8], [9], [], [10, 11]]


def _docs(src) -> list[list[int]]:
    return [src[i].tolist() for i in range(len(src))]


# -- writer validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "kwargs", "error", "match"),
    [
        ([1.0, 2.0], {}, TypeError, "document 1: expected integer token ids"),  # floats
        ([[1, 2]], {}, ValueError, r"document 1: expected a 1-D .* shape \(1, 2\)"),  # 2-D
        ([3, -4], {}, ValueError, "document 1: token id -4 at position 1 is negative"),
        ([1, 70000], {}, ValueError, r"document 1: token id 70000 at position 1 .*dtype='uint32'"),
        ([2**32], {"dtype": "uint32"}, ValueError, "token id 4294967296 at position 0"),
        ([1, 12], {"vocab_size": 12}, ValueError, "token id 12 at position 1 is >= vocab_size=12"),
        (["a"], {}, TypeError, "expected integer token ids"),  # strings
        ([5, True, 7], {}, TypeError, "found True at position 1"),  # numpy made it 1
        ((5, np.False_), {}, TypeError, "found np.False_ at position 1"),
        ([1, 2**64], {}, ValueError, "token id 18446744073709551616 at position 1 does not fit"),
        ([1, 2**64 - 1], {}, ValueError, "id 18446744073709551615 at position 1 does not fit"),
        ([-1, 2**63], {}, ValueError, "token id -1 at position 0 is negative"),  # float64
        (np.array([1, -2], dtype=object), {}, ValueError, "token id -2 at position 1"),
    ],
)
def test_corpus_writer_rejects_bad_documents(tmp_path, doc, kwargs, error, match):
    with pytest.raises(error, match=match), CorpusWriter(tmp_path, **kwargs) as w:
        w.add([0])
        w.add(doc)
    assert not (tmp_path / "manifest.json").exists()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dtype": "int32"}, "dtype must be 'uint16' or 'uint32'"),
        ({"dtype": "float"}, "dtype must be 'uint16' or 'uint32'"),
        ({"vocab_size": 70000, "dtype": "uint16"}, r"vocab_size must be .*use dtype='uint32'"),
        ({"vocab_size": 0}, "vocab_size must be"),
        ({"vocab_size": 10, "eos_id": 10}, r"eos_id must be an int in \[0, 10\)"),
        ({"eos_id": -1}, "eos_id must be"),
        ({"shard_tokens": 0}, "shard_tokens must be a positive int"),
    ],
)
def test_corpus_writer_rejects_bad_options(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        CorpusWriter(tmp_path, **kwargs)


def test_a_bad_shuffle_seed_leaves_no_lock_or_staging_folder(tmp_path):
    with pytest.raises(ValueError, match="shuffle must be >= 0"):
        write_corpus(tmp_path / "c", [[1]], shuffle=-1)
    with pytest.raises(ValueError, match=r"below 2\*\*64 .* would act as 1\)"):
        write_corpus(tmp_path / "c", [[1]], shuffle=2**64 + 1)  # stored seed 1's order
    assert list(tmp_path.iterdir()) == []  # the same write can run at once
    assert _docs(write_corpus(tmp_path / "c", [[1]])) == [[1]]
    with pytest.raises(ValueError, match=r"seed must be below 2\*\*64 .* would act as 0\)"):
        shuffle_corpus(tmp_path / "c", tmp_path / "d", seed=2**64)  # stored seed 0's order
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]


def test_corpus_writer_refuses_existing_corpus_unless_overwrite(tmp_path):
    write_corpus(tmp_path, [[1, 2, 3], [4]], shard_tokens=1)  # 2 shards
    with pytest.raises(FileExistsError, match="overwrite=True"):
        write_corpus(tmp_path, [[5]])
    src = write_corpus(tmp_path, [[5]], overwrite=True)
    assert _docs(src) == [[5]]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "manifest.json",
        "offsets-00000.bin",
        "summary-00000.bin",
        "tokens-00000.bin",
    ]


def test_corpus_writer_interrupted_leaves_no_corpus_and_rewrite_succeeds(tmp_path):
    with pytest.raises(RuntimeError, match="boom"), CorpusWriter(tmp_path, shard_tokens=2) as w:
        w.add([1, 2])
        w.add([3, 4])
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []  # no manifest; the finished shard 0 is removed too
    with pytest.raises(CorpusError, match="not a corpus"):
        open_corpus(tmp_path)
    (tmp_path / "tokens-00007.bin").write_bytes(b"stale")  # a copy cut short, another tool's
    (tmp_path / ".manifest.json.swp").write_bytes(b"")
    with pytest.raises(CorpusError, match=r"\.manifest\.json\.swp, tokens-00007\.bin\) but no "):
        write_corpus(tmp_path, [[9]])  # only overwrite deletes them
    assert sorted(p.name for p in tmp_path.iterdir()) == [".manifest.json.swp", "tokens-00007.bin"]
    assert _docs(write_corpus(tmp_path, [[9]], overwrite=True)) == [[9]]
    assert not (tmp_path / "tokens-00007.bin").exists()


def test_overwrite_must_be_a_bool_not_a_truthy_value(tmp_path):
    write_corpus(tmp_path / "c", [[1]])
    for value in ("no", 1, None):  # "no" replaced the corpus
        with pytest.raises(TypeError, match=f"overwrite must be True or False; got {value!r}"):
            write_corpus(tmp_path / "c", [[2]], overwrite=value)
    assert _docs(open_corpus(tmp_path / "c")) == [[1]]
    assert _docs(write_corpus(tmp_path / "c", [[2]], overwrite=np.True_)) == [[2]]


def test_corpus_writer_failed_overwrite_keeps_the_old_corpus(tmp_path):
    old = write_corpus(tmp_path, [[1]])
    with pytest.raises(RuntimeError), CorpusWriter(tmp_path, overwrite=True) as w:
        w.add([2])
        raise RuntimeError("crash mid-overwrite")
    assert _docs(open_corpus(tmp_path)) == [[1]]
    assert open_corpus(tmp_path).fingerprint == old.fingerprint
    assert [p.name for p in tmp_path.parent.glob(f".{tmp_path.name}*")] == []  # no leftovers


def test_leftovers_are_only_this_corpus_writers_not_a_longer_names(tmp_path):
    # `en.old-2024` is another corpus: its lock and staging folder share `.en.old-` with what
    # a killed overwrite of `en` leaves, but are not that (they were taken for it).
    other = write_corpus(tmp_path / "en.old-2024", [[7, 7]])
    (tmp_path / ".en.old-2024.lock").write_text("12345")
    (tmp_path / ".en.old-2024.tmp-17452-f3a31254").mkdir()
    (tmp_path / ".en.tmp-17452-0123abcd").mkdir()  # a killed writer of en: cleaned
    assert _docs(write_corpus(tmp_path / "en", [[1, 2], [3]])) == [[1, 2], [3]]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".en.old-2024.lock", ".en.old-2024.tmp-17452-f3a31254", "en", "en.old-2024",
    ]  # fmt: skip
    assert open_corpus(tmp_path / "en.old-2024").fingerprint == other.fingerprint


FULL_DISK = """
import os, resource, sys
import grainpack as gp
out, limit = sys.argv[1], int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
try:
    gp.write_corpus(out, [[n % 60000] * 500 for n in range(400)], overwrite=True)
except gp.CorpusError as err:
    print(type(err).__name__, err)
print(sorted(os.listdir(os.path.dirname(out))))
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
print(len(gp.write_corpus(out, [[1]], overwrite=True)))  # the same process writes again
"""


@pytest.mark.parametrize(
    ("limit", "error"),
    [
        (0, r"cannot write a corpus at \S+/c: writing \S+/\.c\.lock: File too large"),
        (
            64 << 10,
            r"writing \S+/c \(nothing was published\) in \S+/\.c\.tmp-[^/]+/tokens-00000\.bin: "
            "File too large; a",
        ),
    ],
)
def test_a_full_disk_raises_a_corpus_error_and_leaves_nothing_behind(tmp_path, limit, error):
    # A file size limit (RLIMIT_FSIZE) fails writes as a full disk does, at the lock or
    # mid-shard; the old corpus stays and the same process can write once there is room.
    write_corpus(tmp_path / "c", [[5, 6]])
    script = [sys.executable, "-c", FULL_DISK, str(tmp_path / "c"), str(limit)]
    lines = subprocess.run(script, capture_output=True, text=True, check=True).stdout.splitlines()
    assert re.match(rf"CorpusError {error}", lines[0]), lines
    assert lines[1:] == ["['c']", "1"]  # no lock, no staging folder; then a write of one document


def test_an_object_array_of_ids_is_ids(tmp_path):
    src = write_corpus(tmp_path / "c", [np.array([1, 2], dtype=object), [3]])
    assert _docs(src) == [[1, 2], [3]]  # it raised StopIteration


def test_corpus_writer_accepts_numpy_integer_options(tmp_path):
    src = write_corpus(tmp_path, [[1]], vocab_size=np.int64(5), eos_id=np.uint16(1))
    assert (src.vocab_size, src.eos_id) == (5, 1)
    assert type(open_corpus(tmp_path, eos_id=np.int32(1)).eos_id) is int


# -- the transaction ------------------------------------------------------------------------------


def _leftovers(path) -> list[str]:
    return sorted(p.name for p in path.parent.glob(f".{path.name}.*"))


def test_corpus_writer_publishes_only_on_close(tmp_path):
    path = tmp_path / "c"
    writer = CorpusWriter(path, shard_tokens=2)
    writer.add([1, 2])
    writer.add([3])
    assert not path.exists()  # everything is in the staging folder next to it
    assert [n.split("-")[0] for n in _leftovers(path)] == [".c.lock", ".c.tmp"]
    writer.close()
    assert _docs(open_corpus(path)) == [[1, 2], [3]]
    assert _leftovers(path) == []


def test_corpus_writer_through_a_symlink_writes_the_target(tmp_path):
    write_corpus(tmp_path / "real", [[1]])
    (tmp_path / "link").symlink_to(tmp_path / "real")
    write_corpus(tmp_path / "link", [[2]], overwrite=True)
    assert (tmp_path / "link").is_symlink()  # the link stays, the corpus behind it changes
    assert _docs(open_corpus(tmp_path / "real")) == [[2]]


def test_corpus_writer_without_exchange_renames_twice_and_recovers(tmp_path, monkeypatch):
    """On file systems without ``RENAME_EXCHANGE`` an overwrite renames the old folder aside
    first; a writer killed between the two renames leaves nothing at the path until the next
    write puts the old corpus back."""
    from grainpack.ingest import transaction as module

    path = tmp_path / "c"
    write_corpus(path, [[1]])
    monkeypatch.setattr(module, "_renameat2", lambda src, dst, flags: False)
    assert _docs(write_corpus(path, [[2]], overwrite=True)) == [[2]]
    assert _leftovers(path) == []
    # as a writer killed between the renames leaves it: the old corpus aside, a staged new one
    path.rename(tmp_path / ".c.old-123-abcd0123")
    write_corpus(tmp_path / "staged", [[3]]).shards  # noqa: B018
    (tmp_path / "staged").rename(tmp_path / ".c.tmp-123-abcd0123")
    with pytest.raises(CorpusError, match=r"left the previous corpus at .*\.c\.old-123-abcd0123"):
        open_corpus(path)
    with pytest.raises(FileExistsError, match="already holds a corpus"):
        write_corpus(path, [[4]])  # the old corpus is back first, and protected
    assert _docs(open_corpus(path)) == [[2]]
    assert _leftovers(path) == []


def test_an_old_corpus_that_cannot_be_deleted_does_not_undo_or_block_writes(tmp_path, monkeypatch):
    """The new corpus is published once the rename is done: failing to delete the replaced
    one (another user's files) warns and leaves it; a failed sync after the rename says
    that the corpus was published. Neither blocks the next write."""
    from grainpack.ingest import transaction as module

    path = tmp_path / "c"
    write_corpus(path, [[1]])
    rmtree = module.shutil.rmtree

    def denied(folder, *args, **kwargs):
        raise PermissionError(13, "Permission denied", os.fspath(folder) + "/tokens-00000.bin")

    monkeypatch.setattr(module.shutil, "rmtree", denied)
    with pytest.warns(
        UserWarning, match=r"c was published, but the corpus it replaced, .*\.c\.tmp"
    ):
        assert _docs(write_corpus(path, [[2]], overwrite=True)) == [[2]]
    (old,) = _leftovers(path)
    assert _docs(open_corpus(tmp_path / old)) == [[1]]
    with pytest.warns(UserWarning) as caught:
        assert _docs(write_corpus(path, [[3]], overwrite=True)) == [[3]]  # not blocked
    assert [str(w.message).split(", /")[0] for w in caught] == [
        f"a folder that an earlier write of {path} left",
        f"{path} was published, but the corpus it replaced",
    ]
    monkeypatch.setattr(module.shutil, "rmtree", rmtree)
    monkeypatch.setattr(module, "_fsync_dir", lambda d: denied(d) if d == tmp_path else None)
    with pytest.raises(CorpusError, match=r"c was published, but a crash may still undo it"):
        write_corpus(path, [[4]], overwrite=True)
    assert _docs(open_corpus(path)) == [[4]]
    monkeypatch.setattr(module, "_fsync_dir", lambda d: None)
    assert _docs(write_corpus(path, [[5]], overwrite=True)) == [[5]]
    assert _leftovers(path) == []  # the next write removed them all


def test_two_renames_never_leave_the_path_empty_nor_restore_a_replaced_corpus(
    tmp_path, monkeypatch
):
    from grainpack.ingest import transaction as module

    path, rename, rmtree = tmp_path / "c", os.rename, module.shutil.rmtree
    write_corpus(path, [[1]])
    monkeypatch.setattr(module, "_renameat2", lambda src, dst, flags: False)

    def second_fails(src, dst):  # staging -> c, after c -> .c.old-*
        if os.fspath(dst) == os.fspath(path) and ".c.tmp-" in os.fspath(src):
            raise OSError(5, "Input/output error")
        return rename(src, dst)

    monkeypatch.setattr(module.os, "rename", second_fails)
    with pytest.raises(CorpusError, match="nothing was published"):
        write_corpus(path, [[2]], overwrite=True)
    assert _docs(open_corpus(path)) == [[1]] and _leftovers(path) == []  # back at once
    monkeypatch.setattr(module.os, "rename", rename)

    def denied(folder, *args, **kwargs):
        raise PermissionError(13, "Permission denied", os.fspath(folder))

    monkeypatch.setattr(module.shutil, "rmtree", denied)
    with pytest.warns(UserWarning, match="the corpus it replaced"):
        write_corpus(path, [[3]], overwrite=True)
    assert [name.split("-")[0] for name in _leftovers(path)] == [".c.tmp"]  # not .c.old
    monkeypatch.setattr(module.shutil, "rmtree", rmtree)
    rmtree(path)  # the user deletes the corpus: the replaced one must not come back
    assert _docs(write_corpus(path, [[4]])) == [[4]] and _leftovers(path) == []


def test_publishing_syncs_the_folders_made_for_the_corpus(tmp_path, monkeypatch):
    from grainpack.ingest import transaction as module

    synced, fsync_dir = [], module._fsync_dir
    monkeypatch.setattr(module, "_fsync_dir", lambda d: (synced.append(d), fsync_dir(d)))
    write_corpus(tmp_path / "x" / "y" / "c", [[1]])  # x and y are made for it
    assert synced[1:] == [tmp_path / "x" / "y", tmp_path / "x", tmp_path]
    assert synced[0].name.startswith(".c.tmp-")  # the staging folder, before publishing

    def fails(folder):  # an fsync error names no file: the message names the folder
        if folder == tmp_path / "u":
            raise OSError(5, "Input/output error")

    monkeypatch.setattr(module, "_fsync_dir", fails)
    with pytest.raises(CorpusError, match=rf"c was published, .*: syncing {tmp_path / 'u'}: In"):
        write_corpus(tmp_path / "u" / "v" / "c", [[1]])


def test_corpus_writer_refuses_a_mount_point(tmp_path, monkeypatch):
    path = tmp_path / "c"
    path.mkdir()
    real_stat = os.stat

    def stat(p, *args, **kwargs):  # the target on another device than its parent
        result = real_stat(p, *args, **kwargs)
        if os.fspath(p) == os.fspath(path):
            values = list(result)
            values[2] += 1  # st_dev
            return os.stat_result(values)
        return result

    monkeypatch.setattr(os, "stat", stat)
    with pytest.raises(CorpusError, match=r"is a mount point.*write to a directory inside it"):
        CorpusWriter(path)


def test_corpus_writer_buffers_are_invisible_in_the_files(tmp_path, monkeypatch):
    """Documents are buffered FLUSH_TOKENS at a time: any buffer size writes the same bytes
    and manifest, and a caller reusing its array between add() calls changes nothing."""
    from grainpack.ingest import writer as module

    rng = np.random.default_rng(3)
    docs = [rng.integers(0, 60000, size=rng.integers(0, 12)) for _ in range(60)]
    write_corpus(tmp_path / "a", docs, shard_tokens=40)
    monkeypatch.setattr(module, "FLUSH_TOKENS", 5)  # documents longer than it are written alone
    with CorpusWriter(tmp_path / "b", shard_tokens=40) as writer:
        reused = np.empty(12, np.int64)
        for doc in docs:
            reused[: len(doc)] = doc
            writer.add(reused[: len(doc)])
            reused[:] = 7  # scribbled over before the buffer is written
    assert (tmp_path / "a" / "manifest.json").read_bytes() == (
        tmp_path / "b" / "manifest.json"
    ).read_bytes()
    assert _docs(open_corpus(tmp_path / "b")) == [d.tolist() for d in docs]
    assert open_corpus(tmp_path / "b").max_token_id == max(int(d.max()) for d in docs if d.size)


def test_shuffle_stores_documents_in_a_seeded_order(tmp_path):
    docs = [[i] * (i % 5) for i in range(40)]  # empty documents too
    with CorpusWriter(tmp_path / "c", shuffle=7, shard_tokens=9) as writer:
        assert [writer.add(d) for d in docs[:3]] == [0, 1, 2]  # input indices
        for d in docs[3:]:
            writer.add(d)
    src = open_corpus(tmp_path / "c")
    order = shuffled_order(np.arange(40), 40, seed=7)
    assert [d.tolist() for d in src] == [docs[i] for i in order.tolist()]
    assert sorted(order.tolist()) == list(range(40)) and order.tolist() != list(range(40))
    assert json.loads((tmp_path / "c" / "manifest.json").read_text())["shuffle_seed"] == 7
    assert sorted(p.name for p in (tmp_path / "c").iterdir())[0] == "manifest.json"  # no staging
    other = shuffle_corpus(tmp_path / "c", tmp_path / "d", seed=8)
    assert sorted(map(tuple, other)) == sorted(map(tuple, docs))


def test_a_failed_shuffled_write_leaves_no_corpus(tmp_path):
    with pytest.raises(ValueError, match="negative"), CorpusWriter(tmp_path, shuffle=1) as w:
        w.add([1, 2])
        w.add([-1])
    assert list(tmp_path.iterdir()) == []


def test_default_dtype_is_the_smallest_that_holds_the_vocabulary(tmp_path):
    assert write_corpus(tmp_path / "a", [[1, 2]]).dtype == np.uint16
    assert write_corpus(tmp_path / "b", [[1, 2]], vocab_size=65_536).dtype == np.uint16
    big = write_corpus(tmp_path / "c", [[1, 100_276]], vocab_size=100_277)
    assert big.dtype == np.uint32 and big[0].tolist() == [1, 100_276]


def test_an_id_past_int32_is_not_sent_to_uint32(tmp_path):
    with pytest.raises(
        ValueError, match=r"2147483648 .* nor the int32 batches; ids must be < 2\*\*31"
    ):
        write_corpus(tmp_path / "a", [[1, 2**31]])
    with pytest.raises(ValueError, match=r"70000 .*max 65535\); use dtype='uint32'"):
        write_corpus(tmp_path / "b", [[1, 70000]], dtype="uint16")
    with pytest.raises(ValueError, match="70000 at position 1 is >= vocab_size=50257; fix"):
        write_corpus(tmp_path / "c", [[4, 70000]], vocab_size=50257)  # not "use uint32"


@pytest.mark.parametrize("documents", [None, 5, "abc", b"ab"])
def test_write_corpus_refuses_what_is_not_an_iterable_of_documents(tmp_path, documents):
    with pytest.raises(TypeError, match="documents must be an iterable of documents"):
        write_corpus(tmp_path / "c", documents)
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize(
    ("tokenizer", "error"),
    [
        ({"a": float("nan")}, ValueError),
        ({"a": [float("inf")]}, ValueError),
        ({"a": {1j}}, TypeError),
    ],
)
def test_a_tokenizer_record_is_strict_json(tmp_path, tokenizer, error):
    with pytest.raises(error, match="tokenizer must be a JSON object"):
        write_corpus(tmp_path / "c", [[1, 2]], tokenizer=tokenizer)
    assert not (tmp_path / "c").exists()
    kept = {"name": "bpe", "merges": [1, "x", None, {"b": 2.5}]}
    assert write_corpus(tmp_path / "c", [[1, 2]], tokenizer=kept).tokenizer == kept


def test_a_corpus_is_never_written_inside_another(tmp_path):
    from grainpack.ingest.convert import convert_corpus

    write_corpus(tmp_path / "a", [[1, 2], [3]])
    before = sorted(os.listdir(tmp_path / "a"))
    for write in (
        lambda: write_corpus(tmp_path / "a" / "sub", [[1]]),
        lambda: convert_corpus(tmp_path / "a", tmp_path / "a" / "x" / "y"),
        lambda: shuffle_corpus(tmp_path / "a", tmp_path / "a" / "s", seed=0),
    ):
        with pytest.raises(CorpusError, match=r"inside the corpus at .*a: rewriting"):
            write()
    assert sorted(os.listdir(tmp_path / "a")) == before  # nothing made inside
    # another tool's manifest.json does not make a folder a corpus
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "manifest.json").write_text('{"format": "webdataset"}')
    assert len(write_corpus(tmp_path / "other" / "c", [[1]])) == 1
    assert len(shuffle_corpus(tmp_path / "a", tmp_path / "a", seed=0, overwrite=True)) == 2
