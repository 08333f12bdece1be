"""The host's disk cache of token chunks (``disk_bytes``, grainpack/corpus/remote_disk.py)
against a real S3 server on loopback: a later run reads its tokens from disk, bit for bit
the local corpus; the folder stays within its budget; a damaged chunk is never served; a
replaced object is never read from its old chunks.

    python -m pytest -q -p no:cacheprovider -n 0 tests/remote/test_remote_disk_cache.py
"""

from __future__ import annotations

import concurrent.futures
import pickle
import zlib
from pathlib import Path

import numpy as np
import pytest
from test_remote_corpus import assert_same_batches, fresh_copy

import grainpack as gp
from grainpack.corpus.errors import CorpusError
from grainpack.corpus.remote import RemoteOptions, open_remote
from grainpack.corpus.remote_disk import DiskRanges
from grainpack.index.blocked import _prefetcher

# windows of 4 runs of 64 documents (about 4 KiB a run), read ahead whole, over chunks of
# request_bytes / 2 = 1 KiB
FIELDS = dict(block=31, global_batch_size=8, order=gp.BlockedOrder(block_docs=64, window_blocks=4))
STEPS = 150  # more than an epoch of the en corpus (54,156 bytes of tokens)
CHUNK = 1024


@pytest.fixture
def disk(monkeypatch, tmp_path) -> Path:
    """An empty host cache, small requests (chunks of 1 KiB); the ``ranges`` folder."""
    monkeypatch.setenv("GRAINPACK_CACHE", str(tmp_path))
    monkeypatch.setenv("GRAINPACK_REQUEST_BYTES", str(2 * CHUNK))
    return tmp_path / "remote" / "ranges"


def run(local: str, url: str, steps: int = STEPS) -> dict[str, float]:
    """``steps`` batches from ``url``, checked against ``local``'s; what the source fetched
    (once its chunks are written)."""
    a = iter(gp.make_dataset(gp.PipelineConfig(sources={"en": local}, **FIELDS)))
    b = iter(gp.make_dataset(gp.PipelineConfig(sources={"en": url}, **FIELDS)))
    assert_same_batches(a, b, steps)
    source = b._batches.sources[0]
    _prefetcher().submit(lambda: None).result()  # the windows ahead announced,
    with source._cells.lock:  # their requests answered, then their chunks written
        flying = [f for entries in source._cells.in_flight.values() for *_, f in entries]
    concurrent.futures.wait(flying)
    if source._disk is not None:
        source._disk.flush()
    return b.remote_stats()["en"]


def files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def test_a_later_run_reads_its_tokens_from_disk(corpora, disk, monkeypatch):
    local, url = fresh_copy(corpora)
    off = run(local, url)  # no disk cache: the baseline's requests
    assert not any(key.startswith("disk") for key in off) and not disk.exists()
    assert off["token_requests"] >= 40
    monkeypatch.setenv("GRAINPACK_DISK_BYTES", str(1 << 20))
    first = run(local, url)
    # every window was read ahead in whole chunks: every chunk of the corpus written once
    assert first["disk_bytes_written"] == 54_156
    assert first["token_requests"] < off["token_requests"]  # neighbouring runs' chunks
    assert sum(p.stat().st_size for p in files(disk)) == 54_156 + 4 * 55  # 55 chunks, CRCs
    second = run(local, url)  # a new process's state: an empty LRU, new source objects
    assert "token_requests" not in second and "disk_bytes_written" not in second
    assert second["disk_hits"] >= 55 and second["disk_bytes_read"] >= 54_156
    # what is left is the manifest and the offsets pages
    assert second["requests"] <= off["requests"] - off["token_requests"]
    # a source pickled to another process builds its disk cache there and reads from it
    source = pickle.loads(pickle.dumps(gp.open_corpus(url)))
    assert source.stats == {"in_flight": 0}
    expected = gp.open_corpus(local).read_tokens(0, source.num_tokens)
    np.testing.assert_array_equal(source.read_tokens(0, source.num_tokens), expected)
    assert "requests" not in source.stats
    assert (source.stats["disk_hits"], source.stats["disk_bytes_read"]) == (55, 54_156)


def test_the_folder_stays_within_its_budget(corpora, disk, monkeypatch):
    local, url = fresh_copy(corpora)
    budget = 8 * CHUNK  # a seventh of the corpus
    monkeypatch.setenv("GRAINPACK_DISK_BYTES", str(budget))
    stats = run(local, url)
    assert stats["disk_bytes_written"] >= 54_156  # every chunk, most of them evicted since
    held = sum(p.stat().st_size for p in files(disk))
    assert 0 < held <= budget
    run(local, url)  # a second run evicts too, and still reads the local batches
    assert 0 < sum(p.stat().st_size for p in files(disk)) <= budget


def test_a_damaged_chunk_is_not_served_and_is_written_again(corpora, disk, monkeypatch):
    local, url = fresh_copy(corpora)
    monkeypatch.setenv("GRAINPACK_DISK_BYTES", str(1 << 20))
    run(local, url)
    chunks = files(disk)
    flipped, cut = chunks[3], chunks[10]
    good = {p: p.read_bytes() for p in (flipped, cut)}
    raw = bytearray(good[flipped])
    raw[100] ^= 0x01
    flipped.write_bytes(bytes(raw))
    cut.write_bytes(good[cut][:-7])
    stats = run(local, url)  # the batches are the local ones (checked in run)
    assert stats["disk_damaged"] == 2
    for path, content in good.items():  # deleted, or fetched again and written whole
        assert not path.exists() or path.read_bytes() == content
    source = gp.open_corpus(url)  # reads every chunk: the two, if deleted, written again
    expected = gp.open_corpus(local).read_tokens(0, source.num_tokens)
    np.testing.assert_array_equal(source.read_tokens(0, source.num_tokens), expected)
    source._disk.flush()
    assert "disk_damaged" not in source.stats
    for path, content in good.items():
        assert path.read_bytes() == content
        assert zlib.crc32(content[:-4]) == int.from_bytes(content[-4:], "little")


def test_a_replaced_object_is_never_read_from_its_old_chunks(corpora, disk, monkeypatch):
    import obstore
    from obstore.store import from_url

    local, url = fresh_copy(corpora)
    options = RemoteOptions(request_bytes=2 * CHUNK, memory_bytes=0, disk_bytes=1 << 20)
    old = open_remote(url, options=options)
    shards = old.shards
    n0, n1 = shards[0].num_tokens, shards[1].num_tokens
    original = gp.open_corpus(local).read_tokens(0, n0 + n1)
    np.testing.assert_array_equal(old.read_tokens(0, n0), original[:n0])  # shard 0 on disk
    old._disk.flush()
    assert old.stats["disk_bytes_written"] == 2 * n0
    replaced = {
        name: np.random.default_rng(i).integers(1, 1000, n, dtype=np.uint16)
        for i, (name, n) in enumerate((("tokens-00000.bin", n0), ("tokens-00001.bin", n1)))
    }
    for name, tokens in replaced.items():  # same sizes, other tokens: other ETags
        obstore.put(from_url(url), name, tokens.tobytes())
    # a corpus opened now pins the new objects: their bytes, none from the old chunks
    new = open_remote(url, options=options)
    assert new.etags[:2] != old.etags[:2]
    got = new.read_tokens(0, n0 + n1)
    np.testing.assert_array_equal(got[:n0], replaced["tokens-00000.bin"])
    np.testing.assert_array_equal(got[n0:], replaced["tokens-00001.bin"])
    assert "disk_hits" not in new.stats
    # the source opened before keeps its pinned object: what it kept on disk is that
    # object's bytes, as its in-memory LRU's would be; what it did not keep is refused
    np.testing.assert_array_equal(old.read_tokens(0, n0), original[:n0])
    with pytest.raises(CorpusError, match=f"{url}/tokens-00001.bin: changed since the corpus"):
        old.read_tokens(n0, n0 + n1)


def test_without_disk_bytes_nothing_is_written(corpora, disk):
    local, url = fresh_copy(corpora)
    stats = run(local, url)
    assert RemoteOptions().disk_bytes == 0
    assert not disk.exists() and not any(key.startswith("disk") for key in stats)


def test_an_object_without_an_etag_is_not_kept(tmp_path):
    counts: dict[str, float] = {}
    disk = DiskRanges(
        [("https://host/c/tokens-00000.bin", None, 0), ("s3://b/c/tokens-00001.bin", '"e"', 0)],
        [100, 100],
        chunk=32,
        budget=1 << 20,
        count=lambda key, value: counts.__setitem__(key, counts.get(key, 0) + value),
        root=tmp_path,
    )
    data = bytes(range(100))
    disk.write(0, 0, data)
    disk.write(1, 0, data)
    disk.flush()
    assert [disk.read(0, c) for c in range(4)] == [None] * 4
    assert [bytes(disk.read(1, c)) for c in range(4)] == [data[i : i + 32] for i in (0, 32, 64, 96)]
    assert counts == {"disk_bytes_written": 100, "disk_hits": 4, "disk_bytes_read": 100}
    assert len(files(tmp_path)) == 4
