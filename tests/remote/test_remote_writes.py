"""Writing corpora to object storage (issue 33, the write side), against a real S3 server on
loopback: what ``write_corpus``, ``build_corpus``, ``merge_corpora`` and the CLI publish at a
URL reads back as the same corpus written locally; the manifest, put last and conditionally,
is the commit point; a killed write leaves no manifest or a complete corpus, and its rerun
keeps what was uploaded (counted in the server's request log).

    python -m pytest -q -p no:cacheprovider -n 0 tests/remote/test_remote_writes.py
"""

from __future__ import annotations

import json
import os
import random
import selectors
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import numpy as np
import pytest
from remote_store import BUCKET, documents
from request_log import request_log

import grainpack as gp
from grainpack.corpus.errors import CorpusError, CorpusExistsError
from grainpack.ingest.upload import LOCK_NAME, SHA256_KEY, publish, staging_root

HERE = Path(__file__).parent
# documents(5, 40, 500) in shards of 300 tokens: 4 shards (12 objects and the manifest)
FINGERPRINT = "9dede81bab51589e06327761825b1a87729f0a625d53b4e893ff63357b238ff6"


def new_url(name: str) -> str:
    return f"s3://{BUCKET}/writes/{name}-{uuid.uuid4().hex[:12]}"


def prefix(url: str) -> str:
    return url.removeprefix("s3://") + "/"


def objects(url: str) -> dict[str, tuple[int, dict[str, str]]]:
    """Every object under ``url``: its size and user metadata, as the server (moto, in this
    process) holds them."""
    from moto.backends import get_backend
    from moto.core import DEFAULT_ACCOUNT_ID

    keys = get_backend("s3")[DEFAULT_ACCOUNT_ID]["aws"].buckets[BUCKET].keys
    key = url.removeprefix(f"s3://{BUCKET}/") + "/"
    found = {}
    for name in [n for n in list(keys.keys()) if n.startswith(key)]:
        meta = keys[name].metadata
        user = {k.removeprefix("x-amz-meta-"): v for k, v in meta.items() if "-meta-" in k}
        found[name.removeprefix(key)] = (keys[name].size, user)
    return found


def assert_same_corpus(url: str, local: str) -> None:
    remote, here = gp.open_corpus(url), gp.open_corpus(local)
    assert remote.fingerprint == here.fingerprint
    assert len(remote) == len(here)
    for i in range(len(here)):
        np.testing.assert_array_equal(remote[i], here[i])
    assert remote[len(here) - 1].dtype == here[0].dtype


def test_write_corpus_to_a_url_is_the_local_corpus(s3, tmp_path):
    docs = documents(5, 40, 500)
    local = gp.write_corpus(tmp_path / "c", docs, vocab_size=500, shard_tokens=300)
    url = new_url("write")
    remote = gp.write_corpus(url, docs, vocab_size=500, shard_tokens=300)
    assert type(remote).__name__ == "RemoteShardSource"
    assert (remote.num_documents, remote.num_tokens, len(remote.shards)) == (40, 827, 4)
    assert remote.fingerprint == local.fingerprint == FINGERPRINT
    assert_same_corpus(url, str(tmp_path / "c"))
    report = gp.verify_corpus(url)
    assert (report.num_documents, report.num_tokens, report.fingerprint) == (
        40,
        827,
        FINGERPRINT,
    )
    stored = objects(url)
    manifest = json.loads((tmp_path / "c" / "manifest.json").read_text())
    assert len(stored) == 13 and LOCK_NAME not in stored  # the lock object is deleted
    for shard in manifest["shards"]:
        for kind in ("tokens", "offsets", "summary"):
            size, meta = stored[shard[f"{kind}_file"]]
            assert size == (tmp_path / "c" / shard[f"{kind}_file"]).stat().st_size
            assert meta == {SHA256_KEY: shard[f"{kind}_sha256"]}
    assert not staging_root(url).exists()  # removed after the publish


def test_a_large_object_is_uploaded_in_parts(s3, tmp_path, monkeypatch):
    monkeypatch.setenv("GRAINPACK_UPLOAD_PART_BYTES", str(5 << 20))
    tokens = np.arange(3 << 20, dtype=np.int64) % 65000  # 6 MiB of uint16: two parts
    url = new_url("multipart")
    with request_log() as log:
        remote = gp.write_corpus(url, [tokens[:100], tokens[100:]])
    assert remote.num_tokens == 3 << 20
    # POST: start and complete; PUT: 2 parts, offsets, summary, lock object, manifest
    assert (log.count("POST", prefix(url)), log.count("PUT", prefix(url))) == (2, 6)
    from moto.backends import get_backend
    from moto.core import DEFAULT_ACCOUNT_ID

    keys = get_backend("s3")[DEFAULT_ACCOUNT_ID]["aws"].buckets[BUCKET].keys
    assert keys[url.removeprefix(f"s3://{BUCKET}/") + "/tokens-00000.bin"].etag.endswith('-2"')
    np.testing.assert_array_equal(remote[1][-5:], tokens[-5:])
    assert gp.verify_corpus(url).num_tokens == 3 << 20


def test_a_second_write_of_a_url_is_refused_before_any_upload(s3):
    url = new_url("twice")
    gp.write_corpus(url, [[1, 2], [3]])
    with request_log() as log, pytest.raises(CorpusExistsError, match="already holds a corpus"):
        gp.write_corpus(url, [[4]])
    assert log.count("PUT", prefix(url)) == 0
    assert [d.tolist() for d in gp.open_corpus(url)] == [[1, 2], [3]]
    with pytest.raises(ValueError, match="never replaced"):
        gp.write_corpus(url, [[4]], overwrite=True)


def test_build_corpus_to_a_url_is_the_local_build(s3, tmp_path):
    text = tmp_path / "a.jsonl"
    text.write_text("".join(json.dumps({"text": f"doc {i} " * (i % 7)}) + "\n" for i in range(30)))
    local = gp.ingest.build_corpus(text, tmp_path / "out", tokenizer="bytes", eos=256, workers=1)
    url = new_url("build")
    remote = gp.ingest.build_corpus(text, url, tokenizer="bytes", eos=256, workers=1)
    assert (remote.num_documents, remote.num_tokens) == (30, 601)
    assert remote.fingerprint == local.fingerprint
    assert_same_corpus(url, str(tmp_path / "out"))
    assert gp.verify_corpus(url).fingerprint == local.fingerprint
    assert gp.open_corpus(url)[2].tolist() == [*b"doc 2 doc 2 ", 256]


def test_merge_corpora_to_a_url_is_the_local_merge(s3, tmp_path):
    gp.write_corpus(tmp_path / "a", [[1, 2], [3]])
    gp.write_corpus(tmp_path / "b", [[4], [5, 6, 7]])
    parts = [tmp_path / "a", tmp_path / "b"]
    local = gp.ingest.merge_corpora(parts, tmp_path / "ab")
    url = new_url("merge")
    remote = gp.ingest.merge_corpora(parts, url)
    assert [d.tolist() for d in remote] == [[1, 2], [3], [4], [5, 6, 7]]
    assert remote.fingerprint == local.fingerprint
    assert gp.verify_corpus(url).num_tokens == 7


def test_the_cli_builds_and_merges_to_a_url(s3, tmp_path, capsys):
    from grainpack.cli.main import main

    (tmp_path / "t.txt").write_text("hello\nworld\n")
    url = new_url("cli")
    args = ["build", str(tmp_path / "t.txt"), "--tokenizer", "bytes", "--lines", "-o", url]
    assert main(args) == 0
    assert f"wrote {url}: 2 documents, 10 tokens" in capsys.readouterr().out
    assert [bytes(d.astype(np.uint8)) for d in gp.open_corpus(url)] == [b"hello", b"world"]
    np.save(tmp_path / "ids.npy", np.array([[1, 2, 3], [4, 5, 6]]))
    ids = new_url("cli-ids")  # token ids: convert_inputs
    assert main(["build", str(tmp_path / "ids.npy"), "-o", ids, "--shuffle", "1"]) == 0
    assert f"wrote {ids}: 2 documents, 6 tokens, uint16; stored in the random order" in (
        capsys.readouterr().out
    )
    assert sorted(d.tolist() for d in gp.open_corpus(ids)) == [[1, 2, 3], [4, 5, 6]]
    assert main(["build", str(tmp_path / "ids.npy"), "-o", str(tmp_path / "ids")]) == 0
    merged = new_url("cli-merge")
    assert main(["merge", str(tmp_path / "ids"), str(tmp_path / "ids"), "-o", merged]) == 0
    out = capsys.readouterr().out
    assert f"wrote {merged}: 4 documents, 12 tokens in 2 shard(s) uploaded from 2" in out
    assert main(["verify", merged]) == 0


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("ftp://bucket/out", "unknown URL scheme ftp://"),
        ("s3:///out", "names no bucket"),
        ("https://example.com/out", "read-only"),
        ("http://127.0.0.1:9/out", "read-only"),
    ],
)
def test_bad_output_urls_are_refused_before_anything_is_written(tmp_path, output, message):
    gp.write_corpus(tmp_path / "part", [[1]])
    calls = [
        lambda: gp.write_corpus(output, [[1, 2]]),
        lambda: gp.ingest.merge_corpora([tmp_path / "part"], output),
        lambda: gp.ingest.build_corpus([tmp_path / "part"], output, tokenizer="bytes"),
        lambda: gp.ingest.CorpusWriter(output),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=message):
            call()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["part"]
    assert not Path("ftp:").exists() and not Path("s3:").exists()


def test_a_ray_build_or_a_publish_to_no_url_is_refused(tmp_path):
    (tmp_path / "a.txt").write_text("text\n")
    with pytest.raises(ValueError, match="a file system every node sees"):
        gp.ingest.build_corpus_ray(tmp_path / "a.txt", "s3://bucket/out", tokenizer="bytes")
    gp.write_corpus(tmp_path / "c", [[1]])
    with pytest.raises(ValueError, match="not an object-storage URL"):
        publish(tmp_path / "c", str(tmp_path / "copy"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "c"]


def test_two_publishers_of_one_url_one_wins(s3, tmp_path):
    folders = []
    for k in range(2):
        gp.write_corpus(tmp_path / f"c{k}", documents(k, 60, 300), shard_tokens=500)
        folders.append(tmp_path / f"c{k}")
    url = new_url("race")
    barrier, results = threading.Barrier(2), {}

    def run(k: int) -> None:
        barrier.wait()
        try:
            results[k] = publish(folders[k], url)
        except CorpusExistsError as err:
            results[k] = err

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    won = [k for k, r in results.items() if not isinstance(r, Exception)]
    assert len(won) == 1, results
    lost = results[1 - won[0]]
    # refused by the lock object, the manifest's conditional put, or (started after the
    # other finished) the manifest already there
    reasons = ("another write of", "published", "already holds a corpus")
    assert any(reason in str(lost) for reason in reasons), lost
    assert gp.verify_corpus(url).fingerprint == gp.open_corpus(folders[won[0]]).fingerprint
    with pytest.raises(CorpusExistsError, match="already holds a corpus"):
        publish(folders[1 - won[0]], url)
    assert publish(folders[won[0]], url).already  # the same manifest: nothing to do


def server_put(key: str, value: bytes) -> None:
    """Stores ``key`` in the test bucket the way another writer's PUT would (moto's API)."""
    from moto.backends import get_backend
    from moto.core import DEFAULT_ACCOUNT_ID

    get_backend("s3")[DEFAULT_ACCOUNT_ID]["aws"].put_object(BUCKET, key, value)


def test_a_manifest_that_appears_during_the_upload_wins(s3, tmp_path):
    gp.write_corpus(tmp_path / "c", documents(1, 100, 300), shard_tokens=200)
    url = new_url("late")
    key = url.removeprefix(f"s3://{BUCKET}/")

    def other_writer(method: str, path: str, status: int) -> None:
        # another writer that takes no lock object: its manifest once our first upload is in
        if method == "PUT" and path.endswith("/tokens-00000.bin"):
            server_put(f"{key}/manifest.json", b"{}")

    with (
        request_log(other_writer),
        pytest.raises(CorpusExistsError, match=f"another writer published {url} first"),
    ):
        publish(tmp_path / "c", url)
    stored = objects(url)
    assert stored["manifest.json"][0] == 2 and LOCK_NAME not in stored  # the other's, kept


def test_an_object_replaced_during_the_upload_is_refused(s3, tmp_path, monkeypatch):
    monkeypatch.setenv("GRAINPACK_UPLOAD_IN_FLIGHT", "1")  # uploads in the manifest's order
    gp.write_corpus(tmp_path / "c", documents(2, 200, 300), shard_tokens=300)
    url = new_url("replaced")
    key = url.removeprefix(f"s3://{BUCKET}/")
    size = (tmp_path / "c" / "tokens-00000.bin").stat().st_size

    def replace(method: str, path: str, status: int) -> None:  # same size, other bytes
        if method == "PUT" and path.endswith("/tokens-00000.bin"):
            server_put(f"{key}/tokens-00000.bin", b"\1" * size)

    with (
        request_log(replace),
        pytest.raises(CorpusError, match=f"{url}/tokens-00000.bin: replaced during"),
    ):
        publish(tmp_path / "c", url)
    assert "manifest.json" not in objects(url) and LOCK_NAME not in objects(url)


# -- killed writes ---------------------------------------------------------------------------


class Zygote:
    """tests/remote/publisher.py, started once; forks a writer per command."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "publisher.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.process.stdout, selectors.EVENT_READ)
        self.buffer = b""

    def send(self, **command: object) -> None:
        self.process.stdin.write(json.dumps(command).encode() + b"\n")
        self.process.stdin.flush()

    def expect(self, tag: str, kind: str, timeout: float = 60) -> str:
        """The rest of the next line ``<tag> <kind> ...`` (other lines are skipped)."""
        while True:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                words = line.decode().split(" ", 2)
                if words[:2] == [tag, kind]:
                    return words[2] if len(words) > 2 else ""
            if not self.selector.select(timeout):
                raise TimeoutError(f"no '{tag} {kind}' line in {timeout} s")
            chunk = os.read(self.process.stdout.fileno(), 1 << 16)
            if not chunk:
                raise EOFError("the zygote exited")
            self.buffer += chunk

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


def settle(port: int, before: set[threading.Thread]) -> None:
    """Waits until the server has answered every request of a dead client: no connection to
    ``port`` is left that its client closed and the server did not (``CLOSE_WAIT``: being
    served, or not yet accepted), and the threads serving connections opened since
    ``before`` have ended."""
    local = f":{port:04X}"
    for _ in range(30_000):
        with open("/proc/net/tcp") as f:  # local address, remote address, state (08)
            rows = [line.split() for line in f.readlines()[1:]]
        if not any(row[1].endswith(local) and row[3] == "08" for row in rows):
            break
        threading.Event().wait(0.001)
    else:
        raise AssertionError("the server still holds connections of the killed writer")
    for thread in threading.enumerate():
        if thread not in before and "process_request_thread" in thread.name:
            while True:
                try:  # (one just accepted may not be running yet)
                    thread.join(timeout=30)
                    break
                except RuntimeError:
                    threading.Event().wait(0.001)
            assert not thread.is_alive(), "a request of the killed writer is still served"


KILL_DOCS = dict(seed=7, count=120, shard_tokens=1400)  # 3 shards: 9 objects, a manifest


@pytest.mark.slow
def test_a_write_killed_at_random_points_leaves_no_manifest_or_a_whole_corpus(s3, tmp_path):
    from publisher import documents as kill_documents

    reference = gp.write_corpus(
        tmp_path / "ref",
        kill_documents(KILL_DOCS["seed"], KILL_DOCS["count"]),
        shard_tokens=KILL_DOCS["shard_tokens"],
    )
    manifest = json.loads((tmp_path / "ref" / "manifest.json").read_text())
    files = {
        s[f"{kind}_file"]: s[f"{kind}_sha256"]
        for s in manifest["shards"]
        for kind in ("tokens", "offsets", "summary")
    }
    assert len(files) == 9
    port = int(s3.rsplit(":", 1)[1])
    zygote = Zygote()
    try:
        for k in range(2):  # uninterrupted writes: the requests the second makes (the
            with request_log() as log:  # first also fills the host's metadata cache)
                url = new_url("calibrate")
                zygote.send(op="write", tag=f"c{k}", url=url, **KILL_DOCS)
                pid = int(zygote.expect(f"c{k}", "pid"))
                zygote.expect(f"c{k}", "done")
                zygote.send(op="reap", tag=f"c{k}", pid=pid)
                assert zygote.expect(f"c{k}", "exit") == "0"
        methods = [m for m, path, _ in log.requests if path.startswith(f"/{prefix(url)}")]
        # its own reads, the lock object, a HEAD and a PUT per object, the listing, the
        # manifest, the lock object again, then the open's reads
        assert methods[:4] == ["GET", "GET", "GET", "PUT"], methods
        assert methods.count("PUT") == len(files) + 2, methods
        rng = random.Random(33)
        outcomes = {"no manifest": 0, "complete": 0}
        kept_total = 0
        for case in range(100):
            sig = signal.SIGINT if case % 3 == 2 else signal.SIGKILL
            url, tag = new_url(f"kill{case}"), f"k{case}"
            before = set(threading.enumerate())
            point = rng.randrange(len(methods))  # killed after this many answers
            with request_log() as log:
                zygote.send(op="write", tag=tag, url=url, **KILL_DOCS)
                pid = int(zygote.expect(tag, "pid"))
                log.wait_for(prefix(url), point, timeout=5)
            os.kill(pid, sig)
            zygote.send(op="reap", tag=tag, pid=pid)
            status = int(zygote.expect(tag, "exit"))
            assert status in (0, 1, 130, -signal.SIGKILL, -signal.SIGINT), (case, status)
            settle(port, before)  # what it sent before it died is answered
            stored = objects(url)
            if "manifest.json" in stored:  # published: complete, and verifies
                outcomes["complete"] += 1
                assert gp.verify_corpus(url).fingerprint == reference.fingerprint
                with request_log() as log, pytest.raises(CorpusExistsError):
                    gp.write_corpus(url, [[1]])
                assert log.count("PUT", prefix(url)) == 0
                assert LOCK_NAME not in objects(url) and not staging_root(url).exists()
                continue
            outcomes["no manifest"] += 1
            # the rerun uploads exactly what is missing (or not whole), a lock object if
            # none is left, and the manifest; it keeps the rest
            kept = {
                name
                for name, (size, meta) in stored.items()
                if name in files and meta.get(SHA256_KEY) == files[name]
            }
            expected = len(files) - len(kept) + (LOCK_NAME not in stored) + 1
            with request_log() as log:
                again = gp.write_corpus(
                    url,
                    kill_documents(KILL_DOCS["seed"], KILL_DOCS["count"]),
                    shard_tokens=KILL_DOCS["shard_tokens"],
                )
            puts = [p for m, p, _ in log.requests if m == "PUT" and prefix(url) in p]
            assert log.count("PUT", prefix(url)) == expected, (case, sorted(stored), puts)
            assert again.fingerprint == reference.fingerprint
            assert gp.verify_corpus(url).fingerprint == reference.fingerprint
            assert LOCK_NAME not in objects(url) and not staging_root(url).exists()
            kept_total += len(kept)
        print(f"{outcomes}, {kept_total} objects kept by reruns")
        # the random points fell before, during and after the uploads
        assert outcomes["complete"] >= 3 and outcomes["no manifest"] >= 30, outcomes
        assert kept_total >= 50, kept_total
    finally:
        zygote.close()
