"""The bad-input catalogue: every way a corpus, a config or a checkpoint can be wrong, and the
error that says what is wrong, where, and how to fix it.

Corpus damage is made by editing the files a real write produced. The small corpus used
throughout holds five documents ``[1 2 3] [4 5] [6 7 8 9] [10] [11 12 13]``: 13 uint16 tokens
(26 bytes) and offsets ``0 3 5 9 10 13`` (6 int64 = 48 bytes).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pathlib
import re
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import orbax.checkpoint as ocp
import pytest

import grainpack as gp
from grainpack.cli.main import main as cli_main
from grainpack.index.stream import MIN_EPOCH_COST

DOCS = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10], [11, 12, 13]]


def small_corpus(path: pathlib.Path, **options: Any) -> pathlib.Path:
    gp.write_corpus(path, DOCS, **options)
    return path


def edit_manifest(path: pathlib.Path, edit: Callable[[dict[str, Any]], Any]) -> None:
    manifest = json.loads((path / "manifest.json").read_text())
    edit(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))


def restamp(path: pathlib.Path, name: str) -> None:
    """Records ``name``'s current sha256 in the manifest (a writer that checksums bad data)."""
    digest = hashlib.sha256((path / name).read_bytes()).hexdigest()

    def edit(manifest: dict[str, Any]) -> None:
        for shard in manifest["shards"]:
            for kind in ("tokens", "offsets"):
                if shard[f"{kind}_file"] == name:
                    shard[f"{kind}_sha256"] = digest

    edit_manifest(path, edit)


def first_batch(config: gp.PipelineConfig, **options: Any) -> dict[str, np.ndarray]:
    return next(iter(gp.make_dataset(config, process_index=0, process_count=1, **options)))


def pipeline(path: pathlib.Path, **fields: Any) -> gp.PipelineConfig:
    fields = {"block": 4, "global_batch_size": 2} | fields
    return gp.PipelineConfig(sources={"a": str(path)}, **fields)


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
        gp.CorpusWriter(tmp_path / "w", dtype=dtype or "object")


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


# -- empty and short sources -----------------------------------------------------------------


@pytest.mark.parametrize("documents", [[], [[], []]], ids=["no-documents", "no-tokens"])
def test_empty_corpus_is_a_valid_corpus_but_no_pipeline_source(tmp_path, documents):
    src = gp.write_corpus(tmp_path / "c", documents)
    assert (len(src), src.num_tokens) == (len(documents), 0)
    assert gp.open_corpus(tmp_path / "c").lengths.tolist() == [0] * len(documents)
    assert gp.verify_corpus(tmp_path / "c").max_token_id is None
    config = pipeline(tmp_path / "c")
    message = re.escape("source 'a' holds 0 tokens, fewer than one row of block + 1 = 5")
    with pytest.raises(ValueError, match=message + ".*smaller block or a larger corpus"):
        first_batch(config)
    with pytest.raises(ValueError, match=message):
        next(iter(gp.make_eval_dataset(config, process_index=0, process_count=1)))


def test_source_shorter_than_one_row_is_named(tmp_path):
    gp.write_corpus(tmp_path / "en", DOCS)
    gp.write_corpus(tmp_path / "fr", [[1, 2], [3]])
    sources = {"en": str(tmp_path / "en"), "fr": str(tmp_path / "fr")}
    for unit in ("documents", "windows"):
        config = gp.PipelineConfig(sources=sources, block=3, global_batch_size=2, unit=unit)
        with pytest.raises(ValueError, match=re.escape("source 'fr' holds 3 tokens, fewer than")):
            first_batch(config)
    # exactly one row is enough: windows of block + 1 = 3 tokens
    config = gp.PipelineConfig(sources=sources, block=2, global_batch_size=2, unit="windows")
    assert first_batch(config)["inputs"].shape == (2, 2)


# -- config -------------------------------------------------------------------------------------

SOURCES = {"en": "/data/en", "fr": "/data/fr"}


@pytest.mark.parametrize(
    ("weights", "error", "message"),
    [
        ({"en": 0, "fr": 1}, ValueError, "weights['en'] must be > 0; got 0"),
        ({"en": -0.5, "fr": 1.5}, ValueError, "weights['en'] must be > 0; got -0.5"),
        ({"en": math.nan, "fr": 1}, ValueError, "weights['en'] must be a finite number; got nan"),
        ({"en": math.inf, "fr": 1}, ValueError, "weights['en'] must be a finite number; got inf"),
        ({"en": True, "fr": 1}, TypeError, "weights['en'] must be a number; got True"),
        ({"en": "0.5", "fr": 0.5}, TypeError, "weights['en'] must be a number; got '0.5'"),
        ({"en": 0.3, "fr": 0.3}, ValueError, "weights must sum to 1"),
        ({"en": 1.0}, ValueError, "weights must name exactly the sources ['en', 'fr']; got ['en']"),
        ({"en": 0.5, "fr": 0.5, "de": 0.0}, ValueError, "must name exactly the sources"),
        ({"EN": 0.5, "fr": 0.5}, ValueError, "must name exactly the sources"),
        ([0.5, 0.5], TypeError, "weights must be a mapping name -> number"),
    ],
)
def test_config_refuses_bad_weights(weights, error, message):
    with pytest.raises(error, match=re.escape(message)):
        gp.PipelineConfig(sources=SOURCES, block=4, global_batch_size=2, weights=weights)


@pytest.mark.parametrize("premium", [0, -1.0, math.nan])
def test_config_refuses_bad_premiums(premium):
    with pytest.raises(ValueError, match=re.escape("premiums['en'] must be")):
        gp.PipelineConfig(
            sources=SOURCES, block=4, global_batch_size=2, premiums={"en": premium, "fr": 1}
        )


@pytest.mark.parametrize(
    ("block", "error", "message"),
    [
        (0, ValueError, "block must be >= 1"),
        (-3, ValueError, "block must be >= 1"),
        (2.5, TypeError, "block must be an int"),
        ("8", TypeError, "block must be an int"),
    ],
)
def test_config_refuses_block_below_one(block, error, message):
    with pytest.raises(error, match=re.escape(message)):
        gp.PipelineConfig(sources=SOURCES, block=block, global_batch_size=2)


@pytest.mark.parametrize("make", [gp.make_dataset, gp.make_data_loader, gp.make_eval_dataset])
def test_global_batch_size_not_divisible_by_process_count(tmp_path, make):
    config = pipeline(small_corpus(tmp_path / "c"), global_batch_size=6)
    message = "global_batch_size=6 is not divisible by process_count=4.*multiple of the process"
    with pytest.raises(ValueError, match=message):
        make(config, process_index=0, process_count=4)
    make(config, process_index=0, process_count=3)  # divides: fine


# -- selectors ----------------------------------------------------------------------------------


def out_of_range(order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    return np.append(order, len(order))


def negative(order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    return np.append(order[:-1], -1)


def duplicates(order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    return np.append(order, order[:2])


def floats(order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    return order.astype(np.float64)


def matrix(order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    return order.reshape(1, -1)


def nothing(order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    return order[:0]


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        (out_of_range, "selected order has 1 ids outside [0, 5), e.g. [5]"),
        (negative, "selected order has 1 ids outside [0, 5), e.g. [-1]"),
        (duplicates, "selected order repeats document ids"),
        (floats, "selected order must hold integer ids, got dtype float64"),
        (matrix, "selected order must be 1-D, got shape (1, 5)"),
        (nothing, "sequence_selector kept no tokens in epoch 0 of source 'a'"),
    ],
)
def test_selector_returning_bad_ids_fails_through_make_dataset(tmp_path, selector, message):
    config = pipeline(small_corpus(tmp_path / "c"), sequence_selector=selector)
    with pytest.raises(ValueError, match=re.escape(message)):
        first_batch(config)


# -- restore --------------------------------------------------------------------------------------


def state_after(config: gp.PipelineConfig, steps: int, **options: Any) -> dict[str, int]:
    it = iter(gp.make_dataset(config, process_index=0, process_count=1, **options))
    for _ in range(steps):
        next(it)
    return it.get_state()


def fresh(config: gp.PipelineConfig, **options: Any) -> gp.PipelineIterator:
    return iter(gp.make_dataset(config, process_index=0, process_count=1, **options))


@pytest.fixture
def corpus(tmp_path) -> pathlib.Path:
    rng = np.random.default_rng(0)
    docs = [rng.integers(1, 100, size=rng.integers(1, 30)) for _ in range(40)]
    gp.write_corpus(tmp_path / "c", docs, shard_tokens=200)
    return tmp_path / "c"


ANOTHER_CONFIG = "another pipeline config or corpus.*ignore_fingerprint_mismatch=True"


def test_restore_refuses_another_config_or_corpus_unless_overridden(tmp_path, corpus):
    config = pipeline(corpus, block=8, global_batch_size=4)
    state = state_after(config, 3)
    for other in (
        pipeline(corpus, block=8, global_batch_size=4, seed=1),
        pipeline(corpus, block=8, global_batch_size=4, boundary_id=0),
        pipeline(corpus, block=9, global_batch_size=4),
    ):
        with pytest.raises(ValueError, match=ANOTHER_CONFIG):
            fresh(other).set_state(state)
    # the same path rewritten with one token changed: another corpus
    src = gp.open_corpus(corpus)
    docs = [src[i] for i in range(len(src))]
    docs[7][0] += 1
    gp.write_corpus(corpus, docs, overwrite=True)
    with pytest.raises(ValueError, match=ANOTHER_CONFIG):
        fresh(config).set_state(state)
    # explicitly accepted: continues at the saved step with the new data
    forced = fresh(config, ignore_fingerprint_mismatch=True)
    forced.set_state(state)
    expected = fresh(config)
    for _ in range(3):
        next(expected)
    got, want = next(forced), next(expected)
    assert forced.get_state()["step"] == 4
    for key in want:
        np.testing.assert_array_equal(got[key], want[key])


def test_restore_through_orbax_refuses_another_config(tmp_path, corpus):
    config = pipeline(corpus, block=8, global_batch_size=4)
    it = fresh(config)
    next(it)
    options = ocp.CheckpointManagerOptions(create=True)
    with ocp.CheckpointManager(tmp_path / "ckpt", options=options) as manager:
        manager.save(1, args=ocp.args.Composite(data=gp.CheckpointSave(it)))
        manager.wait_until_finished()
        other = fresh(pipeline(corpus, block=8, global_batch_size=4, seed=1))
        with pytest.raises(ValueError, match=ANOTHER_CONFIG):
            manager.restore(1, args=ocp.args.Composite(data=gp.CheckpointRestore(other)))


def test_restore_of_a_data_loader_refuses_another_config(corpus):
    config = pipeline(corpus, block=8, global_batch_size=4)
    loader = iter(gp.make_data_loader(config, process_index=0, process_count=1))
    next(loader)
    state = loader.get_state()
    other = pipeline(corpus, block=8, global_batch_size=4, seed=1)
    with pytest.raises(ValueError, match="DataSource in checkpoint does not match"):
        iter(gp.make_data_loader(other, process_index=0, process_count=1)).set_state(state)


def test_restore_detects_corpus_bytes_changed_behind_the_manifest(corpus):
    config = pipeline(corpus, block=8, global_batch_size=4)
    state = state_after(config, 3)
    tokens = corpus / "tokens-00000.bin"
    ids = np.fromfile(tokens, "<u2")
    ids.tofile(tokens)
    fresh(config).set_state(state)  # same bytes rewritten: fine
    ids[:] = ids[::-1]  # same manifest, same fingerprint, different tokens
    ids.tofile(tokens)
    with pytest.raises(ValueError, match="resume verification failed: batch 2 recomputed"):
        fresh(config).set_state(state)
    with pytest.raises(gp.CorpusError, match="sha256 mismatch"):
        gp.verify_corpus(corpus)


CURRICULUM = {"keep": 30}


def changing_selector(order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """A selector that reads outside state: not deterministic across runs."""
    return order[order < CURRICULUM["keep"]]


def test_restore_detects_a_selector_that_changed_between_runs(corpus, monkeypatch):
    config = pipeline(corpus, block=8, global_batch_size=4, sequence_selector=changing_selector)
    state = state_after(config, 3)
    monkeypatch.setitem(CURRICULUM, "keep", 20)  # same name, same fingerprint, other documents
    with pytest.raises(ValueError, match="resume verification failed"):
        fresh(config).set_state(state)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"digest": "flip"}, "resume verification failed: batch 2 recomputed"),
        ({"step": 4}, "resume verification failed: batch 3 recomputed"),
        ({"step": 1}, "resume verification failed: batch 0 recomputed"),
        ({"fingerprint": 12345}, ANOTHER_CONFIG),
        ({"version": 2}, "corrupt grainpack iterator state .*: a version 2 state has 'counts'"),
        ({"version": 3}, "iterator state version 3 is not 1.*another grainpack release"),
        ({"version": 0}, "iterator state version 0 is not 1"),
        ({"version": 1, "counts": [4]}, "a version 1 state has no 'counts'"),
        ({"step": -1}, "corrupt grainpack iterator state"),
        ({"step": "3"}, "corrupt grainpack iterator state"),
        ({"fingerprint": "abc"}, "corrupt grainpack iterator state"),
        ({"process_index": 1}, "corrupt grainpack iterator state"),
        ({"extra": 1}, "not a grainpack iterator state: expected keys"),
    ],
    ids=lambda v: str(v),
)
def test_restore_refuses_a_tampered_state(corpus, change, message):
    config = pipeline(corpus, block=8, global_batch_size=4)
    state = state_after(config, 3)
    if change == {"digest": "flip"}:
        change = {"digest": state["digest"] ^ 1}
    it = fresh(config)
    with pytest.raises(ValueError, match=message):
        it.set_state(state | change)
    assert it.get_state()["step"] == 0  # a refused state changes nothing


def test_restore_refuses_a_state_without_keys(corpus):
    config = pipeline(corpus, block=8, global_batch_size=4)
    with pytest.raises(ValueError, match="not a grainpack iterator state"):
        fresh(config).set_state({"step": 3})
    with pytest.raises(ValueError, match="not a grainpack iterator state"):
        fresh(config).set_state({"next_index": 3})  # a plain Grain MapDataset state


def test_restore_refuses_a_zeroed_digest(corpus):
    config = pipeline(corpus, block=8, global_batch_size=4)
    state = state_after(config, 3)
    with pytest.raises(
        ValueError, match=r"digest is 0, .* but its step is 7: the state was edited"
    ):
        fresh(config).set_state(state | {"digest": 0, "step": 7})
    with pytest.raises(ValueError, match=r"step 0 with digest .* the state was edited"):
        fresh(config).set_state(state | {"step": 0})  # would restart the data silently


def test_restore_accepts_toggling_provenance(corpus):
    state = state_after(pipeline(corpus, block=8, global_batch_size=4, provenance=True), 3)
    it = fresh(pipeline(corpus, block=8, global_batch_size=4))
    it.set_state(state)
    assert it.get_state()["step"] == 3


# -- concurrent and failed writes ---------------------------------------------------------------


def documents_of(path: pathlib.Path) -> list[list[int]]:
    src = gp.open_corpus(path)
    return [src[i].tolist() for i in range(len(src))]


def test_second_writer_of_a_path_is_refused_while_the_first_writes(tmp_path):
    path = tmp_path / "c"
    first = gp.CorpusWriter(path)
    first.add([1, 2])
    message = f"another write to {path} is in progress \\(process {os.getpid()} holds"
    for overwrite in (False, True):
        with pytest.raises(gp.CorpusExistsError, match=message):
            gp.CorpusWriter(path, overwrite=overwrite)
    assert not path.exists()  # nothing is published before close()
    first.close()
    assert documents_of(path) == [[1, 2]]
    with pytest.raises(gp.CorpusExistsError, match="already holds a corpus"):
        gp.write_corpus(path, [[3]])  # the lock is free again; the corpus is protected
    assert documents_of(path) == [[1, 2]]


def failing_documents() -> Any:
    yield [1, 2]
    raise RuntimeError("the tokenizer crashed")


@pytest.mark.parametrize(
    ("documents", "error"),
    [([[1], [-5]], "token id -5 at position 0 is negative"), (None, "the tokenizer crashed")],
    ids=["bad-document", "generator-raises"],
)
def test_failed_overwrite_leaves_the_old_corpus_intact(tmp_path, documents, error):
    path = small_corpus(tmp_path / "c", shard_tokens=4)
    before = gp.open_corpus(path).fingerprint
    with pytest.raises((ValueError, RuntimeError), match=error):
        gp.write_corpus(path, documents or failing_documents(), overwrite=True)
    assert documents_of(path) == DOCS
    assert gp.verify_corpus(path).fingerprint == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]  # no staging, no lock left


def test_filtering_a_corpus_in_place_reads_the_old_while_writing_the_new(tmp_path):
    path = small_corpus(tmp_path / "c", shard_tokens=4)  # 4 shards: reads cross all of them
    src = gp.open_corpus(path)
    kept = gp.write_corpus(path, (src[i] for i in (4, 0, 2)), overwrite=True)
    assert [d.tolist() for d in kept] == [DOCS[4], DOCS[0], DOCS[2]]
    assert documents_of(path) == [DOCS[4], DOCS[0], DOCS[2]]
    # the old source now points at replaced files: it refuses to read them
    with pytest.raises(gp.CorpusError, match="changed since the corpus was opened"):
        src[1]


@pytest.mark.parametrize("overwrite", [False, True])
def test_writer_refuses_a_directory_with_other_files(tmp_path, overwrite):
    path = tmp_path / "c"
    path.mkdir()
    (path / "notes.txt").write_text("mine")
    with pytest.raises(gp.CorpusExistsError, match=r"holds files that are not part of a corpus"):
        gp.write_corpus(path, [[1]], overwrite=overwrite)
    assert (path / "notes.txt").read_text() == "mine"


# -- ids that would not fit the int32 batch arrays -------------------------------------------


def write_megatron_int64(prefix: pathlib.Path, docs: list[list[int]]) -> None:
    """A Megatron ``MMIDIDX`` v1 dataset of dtype code 5 (int64), written with struct."""
    prefix.with_suffix(".bin").write_bytes(b"".join(struct.pack(f"<{len(d)}q", *d) for d in docs))
    lengths = [len(d) for d in docs]
    s = len(docs)
    idx = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 5, s, s + 1)
    idx += struct.pack(f"<{s}i", *lengths)
    idx += struct.pack(f"<{s}q", *(8 * sum(lengths[:i]) for i in range(s)))
    idx += struct.pack(f"<{s + 1}q", *range(s + 1))
    prefix.with_suffix(".idx").write_bytes(idx)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"vocab_size": 2**32}, "vocab_size must be an int in [1, 2147483648] for uint32"),
        ({"vocab_size": 2**31 + 1}, "(batches hold int32 ids, so ids must be < 2**31)"),
    ],
)
def test_writer_caps_vocab_size_at_the_int32_batch_range(tmp_path, options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        gp.CorpusWriter(tmp_path / "c", dtype="uint32", **options)


def test_writer_refuses_ids_that_would_wrap_in_int32_batches(tmp_path):
    message = "token id 3000000000 at position 1 does not fit the int32 batch ids (max 2147483647)"
    with pytest.raises(ValueError, match=re.escape(message)):
        gp.write_corpus(tmp_path / "c", [[1, 3_000_000_000]], dtype="uint32")
    # the largest id that fits arrives intact
    src = gp.write_corpus(tmp_path / "d", [[2**31 - 1, *range(1, 9)]], dtype="uint32")
    assert src.max_token_id == 2**31 - 1
    assert first_batch(pipeline(tmp_path / "d"))["inputs"][0, 0] == 2**31 - 1


def test_pipeline_refuses_sources_whose_ids_may_exceed_int32(tmp_path):
    # a uint32 corpus whose manifest allows ids up to 2**32 - 1 (as older writers accepted)
    path = gp.write_corpus(tmp_path / "c", [list(range(1, 20))], dtype="uint32").shards[0]
    path = pathlib.Path(path.tokens_path).parent
    edit_manifest(path, lambda m: (m.update(vocab_size=2**32), m.pop("max_token_id")))
    with pytest.raises(ValueError, match=r"may hold token ids up to 4,294,967,295 \(vocab_size"):
        gp.make_dataset(pipeline(path), process_index=0, process_count=1)
    edit_manifest(path, lambda m: m.update(vocab_size=None))  # no bound recorded at all
    with pytest.raises(ValueError, match="dtype uint32 and no recorded vocab_size or max_token"):
        first_batch(pipeline(path))
    # a Megatron int64 corpus: 2**40 would arrive as 0
    write_megatron_int64(tmp_path / "m", [[2**40, 5, 6, 7, 8, 9]])
    with pytest.raises(ValueError, match=r"may hold token ids up to 9,223,372,036,854,775,807"):
        first_batch(pipeline(tmp_path / "m"))
    message = f"grainpack build {tmp_path / 'm'} -o NEW --dtype uint32"
    with pytest.raises(ValueError, match=re.escape(message)):
        first_batch(pipeline(tmp_path / "m"))


@pytest.mark.parametrize("field", ["pad_id", "boundary_id"])
def test_config_refuses_token_ids_outside_int32(field):
    with pytest.raises(ValueError, match=re.escape(f"{field} must be < 2**31 (batches hold int32")):
        gp.PipelineConfig(sources={"a": "/data/a"}, block=4, global_batch_size=2, **{field: 2**31})
    gp.PipelineConfig(sources={"a": "/data/a"}, block=4, global_batch_size=2, **{field: 2**31 - 1})


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


# -- bounded work on any state --------------------------------------------------------------


FAR = 10**12


def two_sources(tmp_path: pathlib.Path, **fields: Any) -> gp.PipelineConfig:
    small_corpus(tmp_path / "a")
    small_corpus(tmp_path / "b")
    sources = {"a": str(tmp_path / "a"), "b": str(tmp_path / "b")}
    return gp.PipelineConfig(sources=sources, block=4, global_batch_size=2, **fields)


def within_a_second(call: Callable[[], Any]) -> Any:
    """Runs ``call``; the bound is about 1000 times what it takes (a hang takes hours)."""
    start = time.perf_counter()
    try:
        return call()
    finally:
        assert time.perf_counter() - start < 1.0


def test_far_step_with_one_source_is_cheap(tmp_path):
    """One source: the occurrence is the slot, so step 10**12 costs what step 0 costs."""
    config = pipeline(small_corpus(tmp_path / "c"))
    account = within_a_second(lambda: gp.mixture_accounting(config, FAR))["a"]
    assert account.rows == 2 * FAR  # every slot took the only source
    assert (account.epoch, account.epoch_fraction) == (2 * FAR // 3, 2 / 3)  # 3 rows an epoch
    state = state_after(config, 2) | {"step": FAR}
    state["digest"] = gp.pipeline.dataset.batch_digest(
        gp.pipeline.batches.PipelineBatches(config).batch(FAR - 1, 0)
    )
    it = fresh(config)
    within_a_second(lambda: it.set_state(state))
    assert it.get_state()["step"] == FAR and next(it)["inputs"].shape == (2, 4)


def test_far_step_with_several_sources_is_refused_stating_the_cost(tmp_path):
    config = two_sources(tmp_path)
    cost = r"hashes every one of them: about [\d,]+ s and [\d,]+ MiB; grainpack refuses more "
    with pytest.raises(ValueError, match=cost):
        within_a_second(lambda: gp.mixture_accounting(config, FAR))
    state = state_after(config, 2) | {"step": FAR}
    it = fresh(config)
    with pytest.raises(ValueError, match=cost):
        within_a_second(lambda: it.set_state(state))
    assert it.get_state()["step"] == 0
    batches = gp.pipeline.batches.PipelineBatches(config)
    with pytest.raises(ValueError, match=cost):
        within_a_second(lambda: batches.batch(FAR, 0))


def keep_all(order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    return order


def test_far_step_with_a_selector_is_refused_stating_the_cost(tmp_path):
    config = pipeline(small_corpus(tmp_path / "c"), sequence_selector=keep_all)
    message = r"lies in about epoch [\d,]+ of source 'a', whose sequence_selector decides"
    with pytest.raises(ValueError, match=message):
        within_a_second(lambda: gp.mixture_accounting(config, FAR))
    state, it = state_after(config, 1) | {"step": FAR}, fresh(config)
    with pytest.raises(ValueError, match=message):
        within_a_second(lambda: it.set_state(state))


def keep_few_in_epoch_0(order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    return order[:1] if epoch == 0 else order


def test_replay_bound_counts_only_epochs_planned_at_once(tmp_path, monkeypatch):
    # The bound is on the work of one plan: a run planning a few epochs at a time passes any
    # number of epochs, and a small epoch 0 does not make the far epochs look more numerous
    # (epochs hold at most every document); a restore far ahead is refused before any work.
    path = tmp_path / "c"
    gp.write_corpus(path, [np.arange(1, 9)] * 6)  # 6 documents of 8 tokens: 10 rows of 5
    # an element plans about 100 epochs here; allow 150 at once (each costs MIN_EPOCH_COST)
    limit = 150 * MIN_EPOCH_COST
    monkeypatch.setattr(gp.pipeline.batches, "MAX_REPLAY_DOCUMENTS", limit)
    config = pipeline(path, sequence_selector=keep_few_in_epoch_0)
    it = fresh(config)
    assert it._batches.steps_per_element == 512  # a Grain element: about 100 epochs here
    for _ in range(3 * 512):
        next(it)
    rows = it._batches.rows(0)
    assert rows.planned_epochs >= 300 and rows.most_rows_per_epoch == 10
    state = it.get_state()
    restored = fresh(config)
    message = r"lies in about epoch [\d,]+ of source 'a', whose sequence_selector decides"
    with pytest.raises(ValueError, match=message):  # 300 epochs of 6 documents at once
        within_a_second(lambda: restored.set_state(state))
    replay = r"plans epochs 0..150 and more at once, over 2,457,600 document shuffles"
    with pytest.raises(ValueError, match=replay):  # the plan's own bound
        fresh(config)._batches.rows(0).locate(np.array([3000]))


def test_a_small_source_bounds_the_epochs_replayed_too(tmp_path):
    # 4 documents of 8 tokens, one row an epoch: 2**32 document shuffles would be 10**9
    # epochs of about 0.5 ms each; every epoch counts as MIN_EPOCH_COST documents.
    path = tmp_path / "c"
    gp.write_corpus(path, [np.arange(1, 9)] * 4)
    keep_all = gp.LengthBuckets(edges=(100,), rates=(1.0, 1.0))
    config = pipeline(path, block=31, global_batch_size=1, sequence_selector=keep_all)
    message = r"lies in about epoch [\d,]+ of source 'a'.*at least [\d,]+ document shuffles"
    with pytest.raises(ValueError, match=message):
        within_a_second(lambda: gp.mixture_accounting(config, 10_000_000))
    assert gp.mixture_accounting(config, 3000)["a"].epoch == 3000  # allowed: about 2 s


def test_step_beyond_int64_slots_is_refused(tmp_path):
    config = pipeline(small_corpus(tmp_path / "c"))
    state, it = state_after(config, 1) | {"step": 2**62}, fresh(config)
    message = r"step [\d,]+ is no step of any run: its slots pass 2\*\*62"
    with pytest.raises(ValueError, match=message):
        within_a_second(lambda: it.set_state(state))


@pytest.mark.parametrize("sources", [1, 2])
def test_show_step_far_future_answers_or_refuses_quickly(tmp_path, sources):
    small_corpus(tmp_path / "a")
    small_corpus(tmp_path / "b")
    flags = [f"--source=a={tmp_path / 'a'}"] + [f"--source=b={tmp_path / 'b'}"] * (sources - 1)
    argv = ["show-step", str(FAR), *flags, "--block", "4", "--batch-size", "2", "--json"]
    code = within_a_second(lambda: cli_main(argv))
    assert code == (0 if sources == 1 else 1)


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


# -- smaller messages -----------------------------------------------------------------------------


def test_vocab_size_zero_does_not_suggest_uint32(tmp_path):
    with pytest.raises(ValueError, match=r"got vocab_size=0$"):
        gp.CorpusWriter(tmp_path / "c", vocab_size=0)
    with pytest.raises(ValueError, match=r"got vocab_size=70000; use dtype='uint32'$"):
        gp.CorpusWriter(tmp_path / "c", vocab_size=70000, dtype="uint16")


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
        gp.convert_jsonl(tmp_path / "a.jsonl.gz", tmp_path / "out")
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
        fresh(config).set_state(state | {"process_count": 3})
    message = "digest of batch 2 is that of process 0 of 1, not of the process_index/process_count"
    with pytest.raises(ValueError, match=message):
        fresh(config).set_state(state | {"process_count": 2})
    # a state of process 1 of 2 given to a restore as process 0: its batch is named too
    two = iter(gp.make_dataset(config, process_index=1, process_count=2))
    for _ in range(3):
        next(two)
    with pytest.raises(ValueError, match="is that of process 1 of 2"):
        fresh(config).set_state(two.get_state() | {"process_index": 0})


def test_restore_names_a_forged_process_layout_in_the_compact_layout_too(corpus):
    config = pipeline(corpus, block=8, global_batch_size=4, layout="compact")
    state = state_after(config, 3)
    message = "digest of batch 2 is that of process 0 of 1, not of the process_index/process_count"
    with pytest.raises(ValueError, match=message):  # was a KeyError: no "inputs" in the batch
        fresh(config).set_state(state | {"process_count": 2})
    with pytest.raises(ValueError, match="batch 2 recomputed from the corpus differs"):
        fresh(config).set_state(state | {"digest": state["digest"] ^ 1})


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

    def check_then_publish(self, file, stat=None):
        check(self, file, stat)
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
