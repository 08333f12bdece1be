"""Corpora on object storage (issue 33, phase 1), against a real S3 server on loopback: what
is read from ``s3://`` is the local corpus bit for bit, the metadata is cached by sha256,
objects are pinned, and errors name the URL.

    python -m pytest -q -p no:cacheprovider -n 0 tests/remote
"""

from __future__ import annotations

import json
import pickle
import re
import uuid
from pathlib import Path

import numpy as np
import pytest
from remote_store import BUCKET, assert_same_corpus, documents, upload

import grainpack as gp
from grainpack.corpus.errors import CorpusError, CorpusNotFoundError
from grainpack.corpus.remote import RemoteOptions, open_remote

BLOCKED = gp.BlockedOrder(block_docs=16, window_blocks=8)
# (name, config fields), the configurations of benchmarks/digests.py on both corpora
CONFIGS = {
    "docs-exact": dict(sources=("en",), block=31, global_batch_size=8, boundary_id=0),
    "docs-blocked-compact": dict(
        sources=("en",), block=31, global_batch_size=8, order=BLOCKED, layout="compact"
    ),
    "windows-exact": dict(sources=("en",), block=64, global_batch_size=8, unit="windows"),
    "windows-blocked": dict(
        sources=("en",), block=64, global_batch_size=8, unit="windows", order=BLOCKED
    ),
    "mixed-provenance": dict(
        sources=("en", "fr"),
        block=48,
        global_batch_size=8,
        weights={"en": 0.3, "fr": 0.7},
        provenance=True,
        seed=7,
    ),
    "mixed-schedule-blocked-provenance-compact": dict(
        sources=("en", "fr"),
        block=48,
        global_batch_size=8,
        order=BLOCKED,
        provenance=True,
        layout="compact",
        weights=[(0, {"en": 1.0, "fr": 0.0}), (20, {"en": 0.5, "fr": 0.5})],
    ),
}


def configs(corpora, fields) -> tuple[gp.PipelineConfig, gp.PipelineConfig]:
    """The same pipeline on the local corpora and on their URLs."""
    names = fields["sources"]
    rest = {k: v for k, v in fields.items() if k != "sources"}
    local = gp.PipelineConfig(sources={n: corpora[n][0] for n in names}, **rest)
    remote = gp.PipelineConfig(sources={n: corpora[n][1] for n in names}, **rest)
    return local, remote


def assert_same_batches(a, b, steps: int) -> None:
    for step in range(steps):
        x, y = next(a), next(b)
        assert sorted(x) == sorted(y)
        for key in x:
            assert x[key].dtype == y[key].dtype, (step, key)
            np.testing.assert_array_equal(x[key], y[key], err_msg=f"step {step} {key}")


def fresh_copy(corpora, name: str = "en") -> tuple[str, str]:
    """The local corpus ``name`` uploaded again under a prefix of its own (tests that change
    or delete objects)."""
    local = corpora[name][0]
    url = f"s3://{BUCKET}/scratch/{uuid.uuid4().hex}"
    upload(Path(local), url)
    return local, url


def test_documents_offsets_and_fingerprint_are_the_local_ones(corpora):
    for local_path, url in corpora.values():
        local, remote = gp.open_corpus(local_path), gp.open_corpus(url)
        assert_same_corpus(local, remote)
        stats = remote.stats
        assert stats["requests"] > 0 and stats["bytes"] > 0 and stats["pieces"] > 0


@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_batches_from_s3_are_the_local_batches(corpora, name, count):
    local, remote = configs(corpora, CONFIGS[name])
    for p in range(count):
        a = iter(gp.make_dataset(local, process_index=p, process_count=count))
        b = iter(gp.make_dataset(remote, process_index=p, process_count=count))
        assert_same_batches(a, b, 40)
        state = b.get_state()
        assert state == a.get_state()  # the corpus fingerprint is the local one
    # an elastic restore: the remote state of P processes continues on 1 local process
    again = iter(gp.make_dataset(remote, process_index=0, process_count=1))
    local_again = iter(gp.make_dataset(local, process_index=0, process_count=1))
    first = iter(gp.make_dataset(remote, process_index=0, process_count=1))
    for _ in range(7):
        next(first)
    again.set_state(first.get_state())
    local_again.set_state(first.get_state())
    assert_same_batches(again, local_again, 5)


@pytest.mark.slow
def test_spawned_workers_create_their_own_clients(corpora):
    local, remote = configs(corpora, CONFIGS["mixed-provenance"])
    a = iter(gp.make_dataset(local))
    b = iter(gp.make_dataset(remote, worker_count=2))
    try:
        assert_same_batches(a, b, 60)
    finally:
        b.close() if hasattr(b, "close") else None


def test_a_source_pickles_its_url_and_pins_not_a_client(corpora, tmp_path, monkeypatch):
    source = gp.open_corpus(corpora["en"][1])
    data = pickle.dumps(source)
    assert len(data) < 20_000
    assert b"obstore" not in data
    monkeypatch.setenv("GRAINPACK_CACHE", str(tmp_path / "other-host"))  # an empty cache
    copy = pickle.loads(data)
    np.testing.assert_array_equal(copy.read_tokens(100, 5000), source.read_tokens(100, 5000))
    assert copy.stats["metadata_fetches"] == len(copy.metadata)  # fetched again, by sha256
    assert copy.etags == source.etags


def test_metadata_is_cached_by_sha256_and_a_damaged_copy_is_fetched_again(
    corpora, tmp_path, monkeypatch
):
    from grainpack.corpus.cache import cache_root
    from grainpack.corpus.native import read_manifest

    monkeypatch.setenv("GRAINPACK_CACHE", str(tmp_path))
    local, url = corpora["en"]
    gp.open_corpus(url)  # the cache holds the summaries now, not the offsets
    manifest = read_manifest(local)
    summaries = [s["summary_sha256"] for s in manifest["shards"]]
    offsets = [s["offsets_sha256"] for s in manifest["shards"]]
    assert all((cache_root() / "remote" / f"{sha}.bin").is_file() for sha in summaries)
    assert not any((cache_root() / "remote" / f"{sha}.bin").exists() for sha in offsets)
    again = gp.open_corpus(url)
    assert again.stats.get("metadata_fetches", 0) == 0
    assert again.stats["metadata_cache_hits"] == 4
    np.testing.assert_array_equal(again.lengths, gp.open_corpus(local).lengths)  # whole now
    assert again.stats["metadata_fetches"] == 4
    assert all((cache_root() / "remote" / f"{sha}.bin").is_file() for sha in offsets)
    damaged = cache_root() / "remote" / f"{offsets[0]}.bin"
    raw = bytearray(damaged.read_bytes())
    raw[8] ^= 0xFF
    damaged.write_bytes(bytes(raw))
    third = gp.open_corpus(url)
    np.testing.assert_array_equal(third.offsets, gp.open_corpus(local).offsets)
    assert (third.stats["metadata_fetches"], third.stats["metadata_cache_hits"]) == (1, 7)


def test_the_blocked_order_reads_offsets_by_range_never_whole(corpora, tmp_path, monkeypatch):
    monkeypatch.setenv("GRAINPACK_CACHE", str(tmp_path))
    monkeypatch.setenv("GRAINPACK_WHOLE_OFFSETS_BYTES", "0")  # these corpora's are small
    local, remote = configs(corpora, CONFIGS["docs-blocked-compact"])
    source = gp.open_corpus(corpora["en"][1])
    assert source.stats["metadata_fetches"] == 4  # the summaries: 8 bytes per 256 documents
    assert source.stats["bytes"] == 56 + 2057  # four summaries' 7 totals and the manifest
    assert_same_batches(iter(gp.make_dataset(local)), iter(gp.make_dataset(remote)), 40)
    it = iter(gp.make_dataset(remote))
    for _ in range(40):  # windows over every shard
        next(it)
    stats = it._batches.sources[0].stats
    assert "metadata_fetches" not in stats  # no whole offsets object (summaries: cached)
    assert all(etag is not None for etag in it._batches.sources[0].offsets_etags)
    # one window: the pages of its 8 runs of 16 documents (2 KiB each, less at shard ends);
    # no LRU, so its tokens are not read ahead
    monkeypatch.setenv("GRAINPACK_MEMORY_BYTES", "0")
    source = gp.open_corpus(corpora["en"][1])
    rows = BLOCKED.row_stream(
        source, unit="documents", block=31, seed=0, boundary=False, selector=None,
        block_tokens=lambda c: gp.corpus.summary.block_tokens(source, c),
    )  # fmt: skip
    rows.plan_ahead = False
    spans = rows.spans(0, np.arange(3))
    local = gp.open_corpus(corpora["en"][0])
    np.testing.assert_array_equal(
        source.document_offsets(spans.document), local.document_offsets(spans.document)
    )
    # pages of 3 shards (of 4) in one ranged GET each, after the manifest's
    assert (source.stats["offsets_bytes"], source.stats["requests"]) == (4744, 1 + 3)


def test_a_metadata_object_that_does_not_match_its_sha256_is_refused(
    corpora, tmp_path, monkeypatch
):
    import obstore
    from obstore.store import from_url

    monkeypatch.setenv("GRAINPACK_CACHE", str(tmp_path))  # else the good copy is cached
    local, url = fresh_copy(corpora)
    name = "offsets-00001.bin"
    data = bytearray((Path(local) / name).read_bytes())
    data[-9] ^= 1  # the highest byte of the shard's second-to-last offset
    obstore.put(from_url(url), name, bytes(data))
    source = gp.open_corpus(url)  # offsets are not read at open
    with pytest.raises(CorpusError, match=f"{url}/{name}: its sha256 is"):
        _ = source.lengths  # the whole object
    with pytest.raises(CorpusError, match=rf"{url}/{name}: bytes \[0, 1984\) hold an offset "):
        source.offsets_between(300, 304)  # a page of it
    summary = "summary-00002.bin"
    obstore.put(from_url(url), summary, bytes(8 * 2))
    monkeypatch.setenv("GRAINPACK_CACHE", str(tmp_path / "other"))  # the good copy is cached
    with pytest.raises(CorpusError, match=f"{url}/{summary}: its sha256 is"):
        gp.open_corpus(url)


def test_an_object_replaced_during_a_run_is_refused(corpora):
    import obstore
    from obstore.store import from_url

    local, url = fresh_copy(corpora)
    source = open_remote(url, options=RemoteOptions(memory_bytes=0))
    n = source.shards[0].num_tokens
    np.testing.assert_array_equal(source.read_tokens(0, n), gp.open_corpus(local).read_tokens(0, n))
    name = "tokens-00000.bin"
    obstore.put(from_url(url), name, bytes(2 * n))  # same size, other tokens
    with pytest.raises(CorpusError, match=f"{url}/{name}: changed since the corpus was opened"):
        source.read_tokens(0, 10)
    # the pipeline refuses it too, naming the object
    config = gp.PipelineConfig(sources={"en": url}, block=31, global_batch_size=8)
    with pytest.raises(CorpusError, match=f"{url}/tokens-0000"):
        fresh = iter(gp.make_dataset(config))
        for name in ("tokens-00001.bin", "tokens-00002.bin", "tokens-00003.bin"):
            obstore.put(from_url(url), name, bytes((Path(local) / name).stat().st_size))
        for _ in range(200):
            next(fresh)


def test_a_missing_object_or_bucket_names_the_url(corpora):
    import obstore
    from obstore.store import from_url

    with pytest.raises(CorpusNotFoundError, match=f"s3://{BUCKET}/nothing-here/manifest.json"):
        gp.open_corpus(f"s3://{BUCKET}/nothing-here")
    with pytest.raises(
        CorpusNotFoundError, match=re.escape("s3://no-such-bucket-33/c/manifest.json")
    ):
        gp.open_corpus("s3://no-such-bucket-33/c")
    _, url = fresh_copy(corpora)
    obstore.delete(from_url(url), "tokens-00002.bin")
    with pytest.raises(CorpusNotFoundError, match=f"{url}/tokens-00002.bin: not found"):
        gp.open_corpus(url)
    with pytest.raises(FileNotFoundError):  # a CorpusNotFoundError is one
        gp.open_corpus(url)


def test_a_truncated_object_is_refused_at_open(corpora):
    import obstore
    from obstore.store import from_url

    local, url = fresh_copy(corpora)
    data = (Path(local) / "tokens-00001.bin").read_bytes()
    obstore.put(from_url(url), "tokens-00001.bin", data[:-2])
    with pytest.raises(CorpusError, match=f"{url}/tokens-00001.bin: has {len(data) - 2} bytes"):
        gp.open_corpus(url)


def test_verify_and_describe_read_urls(corpora):
    for local, url in corpora.values():
        a, b = gp.verify_corpus(local), gp.verify_corpus(url)
        assert b.path == url and b.kind == "grainpack"
        assert {k: v for k, v in vars(b).items() if k != "path"} == {
            k: v for k, v in vars(a).items() if k != "path"
        }
        assert gp.corpus.describe_corpus(url) == gp.corpus.describe_corpus(local)


def test_verify_finds_a_token_object_changed_behind_the_manifest(corpora):
    import obstore
    from obstore.store import from_url

    local, url = fresh_copy(corpora)
    data = bytearray((Path(local) / "tokens-00003.bin").read_bytes())
    data[4] ^= 1
    obstore.put(from_url(url), "tokens-00003.bin", bytes(data))
    with pytest.raises(CorpusError, match=f"{url}/tokens-00003.bin: sha256 mismatch"):
        gp.verify_corpus(url)


def test_the_cli_reads_urls(corpora, capsys):
    from grainpack.cli.main import main

    url = corpora["en"][1]
    assert main(["inspect", url, "--json"]) == 0
    assert '"documents": 900' in capsys.readouterr().out
    assert main(["verify", url]) == 0
    assert f"OK {url}" in capsys.readouterr().out
    assert main(["show-step", "--source", f"en={url}", "--block", "31", "--batch-size", "4",
                 "3"]) == 0  # fmt: skip
    assert "global step 3" in capsys.readouterr().out


def test_documents_written_with_file_urls_read_as_local_paths(tmp_path):
    gp.write_corpus(tmp_path / "c", documents(3, 20, 50))
    source = gp.open_corpus(f"file://{tmp_path}/c")
    assert type(source).__name__ == "TokenShardSource" and len(source) == 20


def test_the_iterator_reports_what_its_remote_sources_fetched(corpora):
    local, remote = configs(corpora, CONFIGS["mixed-provenance"])
    it = iter(gp.make_dataset(remote))
    next(it)
    stats = it.remote_stats()
    assert sorted(stats) == ["en", "fr"]
    for name in ("en", "fr"):
        assert stats[name]["requests"] >= 2 and stats[name]["bytes"] > 2000
        assert stats[name]["pieces"] > 0 and stats[name]["in_flight"] >= 0
    assert iter(gp.make_dataset(local)).remote_stats() == {}


@pytest.mark.parametrize("name", ["docs-exact", "mixed-schedule-blocked-provenance-compact"])
def test_the_next_elements_are_staged_before_they_are_due(corpora, monkeypatch, name):
    """Elements of 4 steps: each one's pieces are fetched while the one before is read, so
    only two reads of the run wait for the network: the first element's (one step, the
    first batch alone) and the second's (staging ahead starts after the first batch);
    before, every element's first rows did."""
    monkeypatch.setattr("grainpack.pipeline.batches.ELEMENT_STEPS", 4)
    local, remote = configs(corpora, CONFIGS[name])
    expected, it = iter(gp.make_dataset(local)), iter(gp.make_dataset(remote))
    assert it._batches.steps_per_element == 4
    for _ in range(41):  # 11 elements
        want, got = next(expected), next(it)
        assert all(np.array_equal(want[k], got[k]) for k in want)
    for stats in it.remote_stats().values():
        assert stats["inline_reads"] == 2
        assert stats["prefetched_bytes"] > 0


def test_a_step_that_waits_for_the_network_plans_the_next_elements(corpora, monkeypatch):
    """A read that would wait takes the next elements' plans meanwhile (up to
    PLANS_WHILE_WAITING beyond those being fetched), so the steps after it do not plan;
    every element is still planned once, and the batches are the local ones."""
    from grainpack.corpus.staging import StagedReader
    from grainpack.pipeline.batches import PipelineBatches
    from grainpack.pipeline.elements import PLANS_WHILE_WAITING

    monkeypatch.setattr("grainpack.pipeline.batches.ELEMENT_STEPS", 4)
    planned, step = [], [0]
    packed_steps = PipelineBatches.packed_steps
    monkeypatch.setattr(
        PipelineBatches,
        "packed_steps",
        lambda self, *a, **k: planned.append((self, step[0], a[0])) or packed_steps(self, *a, **k),
    )
    ready = StagedReader.ready
    waits = {9: 1}  # the read of step 9 finds its pieces missing, once

    def slow(self, first, stop):
        if waits.get(step[0]):
            waits[step[0]] -= 1
            return False
        return ready(self, first, stop)

    monkeypatch.setattr(StagedReader, "ready", slow)
    local, remote = configs(corpora, CONFIGS["docs-exact"])
    expected, it = iter(gp.make_dataset(local)), iter(gp.make_dataset(remote))
    for step[0] in range(41):
        want, got = next(expected), next(it)
        assert all(np.array_equal(want[k], got[k]) for k in want)
    steps = [at for batches, at, _ in planned if batches is it._batches]
    assert 2 <= steps.count(9) <= 1 + PLANS_WHILE_WAITING  # and the one a batch plans
    assert steps.count(10) == steps.count(11) == 0  # those found planned
    firsts = [start for batches, _, start in planned if batches is it._batches]
    assert len(firsts) == len(set(firsts)) == len(steps)  # each element planned once


@pytest.mark.parametrize("schedule", ["mixture", "lengths-blocked"])
def test_an_online_schedule_on_urls_plans_no_step_before_its_updates(
    corpora, monkeypatch, schedule
):
    """A MixtureBandit (stage k reported at its end, deciding stage k + 2) or a LengthBandit
    (epoch e reported once rows of e + 1 appear), fed as their contract says: the remote
    pipeline plans one step per element and takes none ahead of the updates (staging ahead
    met undecided rounds), and its batches are the local pipeline's. Every read finds its
    pieces missing first (a slow store), when steps would otherwise be planned early."""
    from grainpack.corpus.staging import StagedReader

    monkeypatch.setattr(StagedReader, "ready", lambda self, first, stop: False)

    def config(kind: int) -> gp.PipelineConfig:
        if schedule == "mixture":
            bandit = gp.curriculum.MixtureBandit(["en", "fr"], stage_steps=5)
            sources = {n: corpora[n][kind] for n in ("en", "fr")}
            return gp.PipelineConfig(
                sources=sources, block=48, global_batch_size=8, weights=bandit, provenance=True
            )
        rates = gp.curriculum.LengthBandit(2)
        selector = gp.curriculum.LengthBuckets(edges=(20,), rates=rates)
        return gp.PipelineConfig(
            sources={"en": corpora["en"][kind]}, block=31, global_batch_size=64, order=BLOCKED,
            sequence_selector=selector, provenance=True,
        )  # fmt: skip

    def report(cfg: gp.PipelineConfig, step: int, batch: dict[str, np.ndarray]) -> None:
        if schedule == "mixture":
            if (step + 1) % 5 == 0:  # the stage is over
                bandit = cfg.weights
                rewards = [float(np.mean(batch["source"] == j)) for j in range(2)]
                bandit.update(bandit.stage_of(step), rewards)
            return
        bandit = cfg.sequence_selector.rates
        while int(batch["epoch"].max()) > bandit.updates:
            bandit.update(bandit.updates, [0.5, -0.1 * bandit.updates])

    local, remote = config(0), config(1)
    expected, it = iter(gp.make_dataset(local)), iter(gp.make_dataset(remote))
    for step in range(80):
        want, got = next(expected), next(it)
        assert all(np.array_equal(want[k], got[k]) for k in want), step
        report(local, step, want)
        report(remote, step, want)  # the same rewards to both
    rounds = (local.weights if schedule == "mixture" else local.sequence_selector.rates).updates
    assert rounds >= 2


def test_a_window_read_ahead_serves_its_pieces_without_requests(corpora, tmp_path, monkeypatch):
    monkeypatch.setenv("GRAINPACK_CACHE", str(tmp_path))  # no offsets object cached yet
    local, url = corpora["en"]
    source = open_remote(
        url,
        options=RemoteOptions(request_bytes=2048, memory_bytes=1 << 20, lookahead_bytes=1 << 19),
    )
    opened, fetched = source.stats["requests"], source.stats["metadata_fetches"]
    source.read_ahead([(0, 292)])  # shard 0: 15,984 bytes, 16 cells of 1,024 bytes
    source._cells.wait([(0, 0, 15_984)])
    # the shard's offsets object whole (2,344 bytes: one request, kept in the host cache),
    # 8 for the cells (two a request)
    assert (source.stats["requests"] - opened, source.stats["window_bytes"]) == (1 + 8, 15_984)
    assert source.stats["metadata_fetches"] == fetched + 1
    expected = gp.open_corpus(local).read_tokens(500, 7000)
    np.testing.assert_array_equal(source.read_tokens(500, 7000), expected)  # across cells
    assert source.stats["requests"] - opened == 9


def test_bench_reads_a_url(corpora, tmp_path, capsys):
    from grainpack.cli.main import main

    url = corpora["en"][1]
    out = tmp_path / "bench.json"
    assert main(["bench", "--url", url, "--tokens", "1000000", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    assert (results["url"], results["steps"], results["global_batch"]) == (url, 7, 64)
    assert results["first_batch"]["remote"]["requests"] >= 2  # the manifest, a summary, ...
    assert results["tokens_per_s"] > 0
    assert f"corpus {url}" in capsys.readouterr().out
    assert main(["bench", "--url", url, "--scale"]) == 1
    assert "--url is a benchmark of its own" in capsys.readouterr().err


def test_no_window_is_planned_ahead_before_the_first_batch(corpora):
    """On object storage the next window's offsets and tokens wait for the first batch (of
    a run, or of a restore and its check), whose own requests come first; then windows are
    planned ahead again, and the batches are the local ones throughout."""
    local, remote = configs(corpora, CONFIGS["docs-blocked-compact"])
    for step in (0, 7):
        expected, it = iter(gp.make_dataset(local)), iter(gp.make_dataset(remote))
        if step:
            state = expected.state_after(step)
            expected.set_state(state)
            it.set_state(state)  # recomputes the batch before it (rows planned, not ahead)
            assert it._batches.rows(0).plan_ahead is False
        want, got = next(expected), next(it)
        assert all(np.array_equal(want[k], got[k]) for k in want)
        assert it._batches.rows(0).plan_ahead is True
        assert_same_batches(expected, it, 20)
    assert iter(gp.make_dataset(local))._batches.rows(0).plan_ahead is True  # local: at once


@pytest.mark.parametrize("compiled", [True, False])
def test_pieces_held_in_memory_are_copied_in_one_call(corpora, compiled):
    """read_pieces with the compiled copy (numba) and without it: the same tokens, no
    request for pieces the window read ahead holds, pieces across two held ranges too."""
    from grainpack.pipeline.fast import kernels as compiled_kernels

    kernels = compiled_kernels()
    if compiled and kernels is None:
        pytest.skip("numba is not installed")
    local, url = corpora["en"]
    source = open_remote(
        url,
        options=RemoteOptions(request_bytes=2048, memory_bytes=1 << 20, lookahead_bytes=1 << 19),
    )
    source.read_ahead([(0, 292)])  # shard 0: cells of 1,024 bytes
    source._cells.wait([(0, 0, 15_984)])
    opened = source.stats["requests"]
    rng = np.random.default_rng(5)
    starts = rng.integers(0, 7900, 40)
    stops = starts + rng.integers(0, 90, 40)  # some across cells, some empty
    at = np.r_[0, np.cumsum(stops - starts)[:-1]]
    out = np.zeros(int((stops - starts).sum()), dtype=np.uint16)
    copy = kernels.copy_pieces if compiled else None
    source.read_pieces(out, [0] * 40, starts.tolist(), stops.tolist(), at.tolist(), copy=copy)
    tokens = gp.open_corpus(local).read_tokens(0, 8000)
    np.testing.assert_array_equal(out, np.concatenate([tokens[a:b] for a, b in zip(starts, stops)]))
    assert source.stats["requests"] == opened
    assert source.stats["cache_hits"] == 40 - int((stops == starts).sum())


def test_responses_are_written_into_recycled_memory(corpora, monkeypatch):
    """Ranged GETs land in blocks of the source's pool (from 256 KiB; here from 512 bytes); a
    block the LRU let go of serves a later response (fresh buffers cost the kernel's
    zeroing of new pages)."""
    monkeypatch.setattr("grainpack.corpus.remote.POOLED_RESPONSE", 512)
    local, url = corpora["en"]
    options = RemoteOptions(request_bytes=2048, memory_bytes=1 << 11, lookahead_bytes=0)
    source = open_remote(url, options=options)
    expected = gp.open_corpus(local)
    blocks = set()
    for start in range(0, 7000, 350):  # an LRU of 2 KiB: ranges come and go
        np.testing.assert_array_equal(
            source.read_tokens(start, start + 300), expected.read_tokens(start, start + 300)
        )
        blocks |= {
            np.frombuffer(d, np.uint8).ctypes.data for _, d in source._ranges.entries.values()
        }
    assert source.stats["token_requests"] == 20
    # an LRU of 2 KiB holds two ranges of 600 bytes beside a response on its way, whose
    # room is made by evicting the oldest: its block then serves it (three in turn)
    assert len(blocks) == 3, blocks
