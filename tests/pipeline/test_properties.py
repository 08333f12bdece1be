"""Hypothesis properties of the pure layers, each against a brute-force reference.

Documents here are synthetic: token ``i`` of document ``d`` is ``d * 1000 + i``, so every
token of a corpus is distinct and a row says exactly which tokens it holds. A boundary token
is ``-1`` and padding ``-2``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import grainpack as gp
from grainpack.index.hashing import splitmix64_array
from grainpack.index.mixing import (
    BLOCK_SLOTS,
    SlotMixer,
    choose_source,
    choose_sources,
    cumulative_probabilities,
)
from grainpack.index.orders import (
    global_document_order,
    shard_documents_for_rank,
    window_permutation,
)
from grainpack.index.stream import SourceRows, Spans, row_spans, stream_plan
from grainpack.index.weights import normalize_probabilities
from grainpack.pipeline.batches import PipelineBatches
from grainpack.reference.packing import pack_documents

BOUNDARY, PAD = -1, -2
EPOCHS = 3

lengths_strategy = st.lists(st.integers(0, 12), min_size=1, max_size=25)


def synthetic_documents(lengths: list[int]) -> list[np.ndarray]:
    return [d * 1000 + np.arange(n, dtype=np.int64) for d, n in enumerate(lengths)]


def rows_from_spans(spans: Spans, num_rows: int, block: int, docs: list[np.ndarray]) -> np.ndarray:
    """Rebuilds the requested rows from a span table, one span at a time (no vectorization)."""
    rows = np.full((num_rows, block + 1), PAD, dtype=np.int64)
    for k in range(len(spans.row)):
        r, at, n = int(spans.row[k]), int(spans.offset[k]), int(spans.length[k])
        doc, start = int(spans.document[k]), int(spans.start[k])
        rows[r, at : at + n] = docs[doc][start : start + n]
        if spans.boundary[k]:
            rows[r, at + n] = BOUNDARY
    return rows


@dataclasses.dataclass(frozen=True)
class KeepSelector:
    """A deterministic filtering and reordering curriculum: keeps each document with a
    probability that depends on (salt, seed, epoch, document) and reverses odd epochs."""

    salt: int
    percent: int

    def __call__(self, order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
        draws = splitmix64_array(order + (self.salt * 7919 + seed * 131 + epoch) * 100_003)
        kept = order[draws % np.uint64(100) < np.uint64(self.percent)]
        return kept[::-1] if epoch % 2 else kept


selectors = st.one_of(
    st.none(),
    st.builds(KeepSelector, salt=st.integers(0, 1000), percent=st.integers(0, 100)),
)


# -- every token of an epoch exactly once ------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    lengths=lengths_strategy,
    block=st.integers(1, 9),
    boundary=st.booleans(),
    data=st.data(),
)
def test_row_spans_hold_every_token_of_the_epoch_exactly_once(lengths, block, boundary, data):
    order = np.array(data.draw(st.permutations(range(len(lengths)))), dtype=np.int64)
    docs = synthetic_documents(lengths)
    plan = stream_plan(np.array(lengths), order, boundary=boundary)
    num_rows = plan.num_rows(block)
    spans = row_spans(plan, np.arange(num_rows), block=block)
    rows = rows_from_spans(spans, num_rows, block, docs)

    # brute force: the documents in order, joined by the boundary token, chunked and padded
    pieces = []
    for k, d in enumerate(order.tolist()):
        pieces.append(docs[d])
        if boundary and k < len(order) - 1:
            pieces.append(np.array([BOUNDARY]))
    stream = np.concatenate(pieces)
    expected = np.full(num_rows * (block + 1), PAD, dtype=np.int64)
    expected[: len(stream)] = stream
    np.testing.assert_array_equal(rows, expected.reshape(num_rows, block + 1))

    tokens = rows[rows >= 0]
    assert np.unique(tokens).size == tokens.size == sum(lengths)  # each token once
    assert (rows == BOUNDARY).sum() == (len(lengths) - 1 if boundary else 0)
    assert spans.filled.tolist() == [
        min(block + 1, plan.total - r * (block + 1)) for r in range(num_rows)
    ]


# -- plans agree with pack_documents, epoch after epoch ------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    lengths=lengths_strategy,
    block=st.integers(1, 9),
    boundary=st.booleans(),
    seed=st.integers(0, 2**32),
    selector=selectors,
    data=st.data(),
)
def test_source_rows_agree_with_pack_documents(lengths, block, boundary, seed, selector, data):
    assume(sum(lengths) > 0)
    docs = synthetic_documents(lengths)
    rows = SourceRows(
        np.array(lengths),
        unit="documents",
        block=block,
        seed=seed,
        boundary=boundary,
        selector=selector,
    )
    packed = []
    for epoch in range(EPOCHS):
        order = global_document_order(len(docs), seed=seed, epoch=epoch, sequence_selector=selector)
        p = pack_documents(
            docs, order, block, pad_id=PAD, boundary_id=BOUNDARY if boundary else None
        )
        if p.rows.shape[0] == 0:  # the selector kept no token: a clear error, not an empty epoch
            with pytest.raises(ValueError, match=f"kept no tokens in epoch {epoch}"):
                rows.rows_in_epoch(epoch)
            break
        assert rows.rows_in_epoch(epoch) == p.rows.shape[0]
        assert rows.epoch_tokens(epoch) == p.real_tokens
        got = rows_from_spans(
            rows.spans(epoch, np.arange(p.rows.shape[0])), len(p.rows), block, docs
        )
        np.testing.assert_array_equal(got, p.rows)
        packed.append(p)
    assume(packed)

    # occurrence o -> (epoch, row): the epochs' rows one after another
    where = np.array([(e, r) for e, p in enumerate(packed) for r in range(len(p.rows))])
    real_before = np.cumsum([0] + [int((row != PAD).sum()) for p in packed for row in p.rows])
    total = len(where)
    queries = np.array(data.draw(st.lists(st.integers(0, total - 1), min_size=1, max_size=20)))
    epochs, local = rows.locate(queries)
    np.testing.assert_array_equal(np.stack([epochs, local], axis=1), where[queries])
    for o in queries.tolist():
        assert rows.real_tokens_before(o) == real_before[o]


@settings(max_examples=60, deadline=None)
@given(lengths=lengths_strategy, block=st.integers(1, 9), seed=st.integers(0, 2**32))
def test_window_rows_are_the_permuted_windows_of_the_stream(lengths, block, seed):
    width = block + 1
    n_windows = sum(lengths) // width
    assume(n_windows > 0)
    docs = synthetic_documents(lengths)
    stream = np.concatenate(docs)
    rows = SourceRows(np.array(lengths), unit="windows", block=block, seed=seed)
    assert rows.rows_in_epoch(0) == n_windows
    for epoch in range(2):
        perm = window_permutation(n_windows, seed, epoch)
        expected = np.stack([stream[w * width : (w + 1) * width] for w in perm.tolist()])
        got = rows_from_spans(rows.spans(epoch, np.arange(n_windows)), n_windows, block, docs)
        np.testing.assert_array_equal(got, expected)
        # every token of the whole windows appears exactly once per epoch
        assert np.array_equal(np.sort(got.ravel()), stream[: n_windows * width])
    epochs, local = rows.locate(np.arange(3 * n_windows))
    assert epochs.tolist() == np.repeat(np.arange(3), n_windows).tolist()
    assert local.tolist() == np.tile(np.arange(n_windows), 3).tolist()


# -- processes are disjoint and complete ------------------------------------------------------


@given(n=st.integers(0, 200), world_size=st.integers(1, 9), seed=st.integers(0, 1000))
def test_rank_shards_are_disjoint_and_complete(n, world_size, seed):
    order = global_document_order(n, seed=seed, epoch=0)
    shards = [shard_documents_for_rank(order, r, world_size) for r in range(world_size)]
    assert sum(len(s) for s in shards) == n
    assert np.array_equal(np.sort(np.concatenate(shards)), np.arange(n))
    woven = np.empty(n, dtype=np.int64)
    for r, shard in enumerate(shards):
        woven[r::world_size] = shard
    np.testing.assert_array_equal(woven, order)  # round-robin: rank r holds order[r::W]


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("corpora")
    rng = np.random.default_rng(11)
    gp.write_corpus(
        root / "en",
        [rng.integers(1, 900, size=rng.integers(0, 30)) for _ in range(40)],
        shard_tokens=150,
    )
    gp.write_corpus(root / "fr", [rng.integers(1, 900, size=rng.integers(1, 9)) for _ in range(5)])
    return {"en": str(root / "en"), "fr": str(root / "fr")}


@settings(max_examples=100, deadline=None)
@given(
    processes=st.integers(1, 6),
    per_process=st.integers(1, 4),
    step=st.integers(0, 60),
    seed=st.integers(0, 50),
    unit=st.sampled_from(["documents", "windows"]),
    weights=st.sampled_from([None, {"en": 0.8, "fr": 0.2}]),
)
def test_process_batches_partition_the_global_batch(
    corpora, processes, per_process, step, seed, unit, weights
):
    config = gp.PipelineConfig(
        sources=corpora,
        block=6,
        global_batch_size=processes * per_process,
        seed=seed,
        unit=unit,
        weights=weights,
        boundary_id=900 if unit == "documents" else None,
        provenance=True,
    )
    whole = PipelineBatches(config, process_count=1).batch(step, 0)
    sharded = PipelineBatches(config, process_count=processes)
    parts = [sharded.batch(step, p) for p in range(processes)]
    for key, value in whole.items():
        woven = np.full_like(value, -1)
        for p, part in enumerate(parts):
            assert part[key].shape[0] == per_process
            # per-segment provenance is only as wide as the batch's most fragmented row
            within = tuple(slice(0, n) for n in part[key].shape[1:])
            woven[(slice(p, None, processes), *within)] = part[key]
        np.testing.assert_array_equal(woven, value, err_msg=key)


def test_process_batches_have_the_same_shapes_with_provenance(corpora):
    config = gp.PipelineConfig(
        sources=corpora, block=6, global_batch_size=2, boundary_id=900, provenance=True
    )
    batches = PipelineBatches(config, process_count=2)
    for step in range(10):
        shapes = [{k: v.shape for k, v in batches.batch(step, p).items()} for p in range(2)]
        assert shapes[0] == shapes[1], step


# -- mixing -----------------------------------------------------------------------------------


@st.composite
def probabilities(draw: st.DrawFn) -> tuple[float, ...]:
    weights = draw(st.lists(st.integers(0, 20), min_size=1, max_size=5))
    assume(sum(weights) > 0)
    total = sum(weights)
    return normalize_probabilities([w / total for w in weights], len(weights))


@settings(max_examples=150, deadline=None)
@given(
    probs=probabilities(),
    seed=st.integers(0, 2**64 - 1),
    start=st.integers(0, 2**62),
    count=st.integers(0, 150),
)
def test_choose_sources_equals_choose_source(probs, seed, start, count):
    cumulative = cumulative_probabilities(probs)
    got = choose_sources(seed, start, start + count, cumulative)
    expected = [choose_source(seed, s, cumulative) for s in range(start, start + count)]
    assert got.tolist() == expected
    assert all(probs[j] > 0 for j in expected) or len(probs) == 1  # a zero weight is never chosen


near_block_edges = st.builds(
    lambda block, delta: max(block * BLOCK_SLOTS + delta, 0),
    st.integers(0, 3),
    st.integers(-300, 300),
)


@settings(max_examples=80, deadline=None)
@given(
    probs=probabilities(),
    seed=st.integers(0, 2**64 - 1),
    ranges=st.lists(st.tuples(near_block_edges, st.integers(0, 200)), min_size=1, max_size=6),
)
def test_slot_mixer_draws_equal_a_brute_force_count(probs, seed, ranges):
    mixer = SlotMixer(seed, probs)  # one mixer, queried out of order: caches must not leak
    cumulative = cumulative_probabilities(probs)
    stop = max(start + count for start, count in ranges)
    choices = choose_sources(seed, 0, stop, cumulative)
    for start, count in ranges:
        seen = np.bincount(choices[:start], minlength=len(probs)).tolist()
        expected_occurrences = []
        for j in choices[start : start + count].tolist():
            expected_occurrences.append(seen[j])
            seen[j] += 1
        sources, occurrences = mixer.draws(start, start + count)
        assert sources.tolist() == choices[start : start + count].tolist()
        assert occurrences.tolist() == expected_occurrences
        assert mixer.counts_before(start + count).tolist() == seen
