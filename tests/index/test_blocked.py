"""The blocked order: the keyed bijection, its epochs and windows (pure), and every pipeline
contract with ``order=BlockedOrder(...)`` (exact expected values on small corpora)."""

from __future__ import annotations

import contextlib
import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grainpack as gp
from grainpack.index.blocked import BlockedOrder, BlockedRows, feistel, mix_key
from grainpack.index.stream import row_spans, stream_plan
from grainpack.pipeline.batches import PipelineBatches


@pytest.fixture(autouse=True)
def summary_cache(tmp_path, monkeypatch):
    """Block totals computed for a corpus are cached here, not in the user's cache."""
    monkeypatch.setenv("GRAINPACK_CACHE", str(tmp_path / "cache"))


class Layout:
    """A corpus layout over an in-memory offsets array (what the blocked order reads)."""

    def __init__(self, lengths):
        self.offsets = np.r_[0, np.cumsum(lengths)].astype(np.int64)
        self.num_tokens = int(self.offsets[-1])

    def __len__(self):
        return len(self.offsets) - 1

    def offsets_between(self, first, stop):
        return self.offsets[first : stop + 1]

    def document_offsets(self, documents):
        return self.offsets[documents]

    def documents_at(self, positions):
        return np.searchsorted(self.offsets, positions, side="right") - 1


def blocked_rows(lengths, c, k, **options):
    lengths = np.asarray(lengths)
    totals = np.add.reduceat(lengths, np.arange(0, len(lengths), c)) if len(lengths) else []
    options = {"unit": "documents", "block": 4, "seed": 0, "plan_ahead": False} | options
    return BlockedRows(Layout(lengths), order=BlockedOrder(c, k), block_tokens=totals, **options)


def visits(rows, epoch):
    """Documents in the order an epoch starts them, and the spans of the whole epoch."""
    spans = rows.spans(epoch, np.arange(rows.rows_in_epoch(epoch)))
    first = (spans.start == 0) & ((spans.length > 0) | spans.boundary)
    return spans.document[first], spans


# -- the bijection ---------------------------------------------------------------------------


def test_feistel_golden():
    # Determinism contract: update only with a versioned, deliberate change of the order.
    assert feistel(np.arange(10), 10, key=7).tolist() == [4, 9, 1, 7, 0, 3, 8, 5, 6, 2]
    assert mix_key(0, 0, 0xB10C) == 0x68034345656A5A8A


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 7, 1000, 65_537, 1_000_003])
def test_feistel_is_a_bijection(size):
    image = feistel(np.arange(size), size, key=size)
    assert np.array_equal(np.sort(image), np.arange(size))
    if size > 4:
        assert not np.array_equal(image, feistel(np.arange(size), size, key=size + 1))


def test_feistel_is_elementwise_and_refuses_outside_inputs():
    x = np.array([[5, 0], [999, 3]])
    assert feistel(x, 1000, 3).tolist() == [
        [int(feistel(np.array([v]), 1000, 3)[0]) for v in row] for row in x.tolist()
    ]
    with pytest.raises(ValueError, match=r"feistel inputs must lie in \[0, 10\)"):
        feistel(np.array([10]), 10, 0)


# -- epochs and windows (pure) ---------------------------------------------------------------


def test_blocked_rows_golden():
    # Blocks of 3: {0,1,2} {3,4,5} {6,7,8} {9}; windows of 2 blocks. Epoch 0 puts blocks 1 and
    # 3 in window 0 and blocks 0 and 2 in window 1; each window permutes its documents.
    rows = blocked_rows([3, 1, 4, 1, 5, 9, 2, 6, 0, 3], 3, 2, boundary=True)
    assert (rows.num_blocks, rows.num_windows, rows.rows_per_epoch) == (4, 2, 9)
    assert [rows._window(0, w).documents.tolist() for w in (0, 1)] == [
        [9, 3, 5, 4],
        [7, 0, 6, 1, 8, 2],
    ]
    # 34 tokens + 9 boundaries; document 8 is empty (its boundary only), document 2 is last.
    assert rows._window(0, 1).bounds.tolist() == [22, 29, 33, 36, 38, 39, 43]
    order, spans = visits(rows, 0)
    assert order.tolist() == [9, 3, 5, 4, 7, 0, 6, 1, 8, 2]
    assert spans.row[:6].tolist() == [0, 0, 1, 1, 2, 3]
    assert spans.start[:6].tolist() == [0, 0, 1, 0, 4, 9]
    assert spans.length[:6].tolist() == [3, 1, 0, 4, 5, 0]
    assert spans.boundary[:6].tolist() == [True, False, True, False, False, True]
    assert visits(rows, 1)[0].tolist() == [4, 6, 8, 7, 3, 5, 9, 0, 2, 1]


@settings(max_examples=80, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 12), min_size=1, max_size=60),
    c=st.integers(1, 7),
    k=st.integers(1, 5),
    block=st.integers(1, 9),
    boundary=st.booleans(),
    seed=st.integers(0, 2**40),
)
def test_every_document_once_per_epoch_and_the_exact_stream_rule(
    lengths, c, k, block, boundary, seed
):
    rows = blocked_rows(lengths, c, k, block=block, boundary=boundary, seed=seed)
    lengths = np.array(lengths)
    for epoch in range(2):
        spans = visits(rows, epoch)[1]
        stream = lengths.sum() + (len(lengths) - 1 if boundary else 0)
        assert rows.rows_in_epoch(epoch) == -(-stream // (block + 1))  # as the exact order
        assert int((spans.length + spans.boundary).sum()) == stream == rows.epoch_tokens(epoch)
        # The exact order's spans of the same document order: identical tables.
        stream_order = _stream_order(rows, epoch)
        assert np.array_equal(np.sort(stream_order), np.arange(len(lengths)))
        expected = row_spans(
            stream_plan(lengths, stream_order, boundary=boundary),
            np.arange(rows.rows_in_epoch(epoch)),
            block=block,
        )
        for field in ("row", "offset", "document", "start", "length", "boundary", "filled"):
            assert getattr(spans, field).tolist() == getattr(expected, field).tolist(), field


def _stream_order(rows, epoch):
    return np.concatenate(
        [rows._window(epoch, w).documents.astype(np.int64) for w in range(rows.num_windows)]
    )


def test_epochs_and_seeds_give_different_orders():
    lengths = np.full(4000, 5)
    orders = [
        visits(blocked_rows(lengths, 16, 8, seed=s), e)[0] for s, e in ((0, 0), (0, 1), (1, 0))
    ]
    for a in range(3):
        assert np.array_equal(np.sort(orders[a]), np.arange(4000))
        for b in range(a):
            assert (orders[a] != orders[b]).mean() > 0.99


def test_windows_unit_visits_every_window_once_per_epoch():
    lengths = [7, 0, 10, 3, 11]  # 31 tokens: 7 windows of 4
    rows = blocked_rows(lengths, 2, 2, unit="windows", block=3)
    assert rows.rows_per_epoch == 7
    seen = []
    for epoch in (0, 1):
        spans = rows.spans(epoch, np.arange(7))
        stream = Layout(lengths).offsets[spans.document] + spans.start
        first = stream[np.r_[True, spans.row[1:] != spans.row[:-1]]]
        assert sorted(first.tolist()) == [0, 4, 8, 12, 16, 20, 24]
        assert (spans.filled == 4).all() and int(spans.length.sum()) == 28
        seen.append(first.tolist())
    assert seen[0] == (feistel(np.arange(7), 7, mix_key(0, 0, 0xB1A5)) * 4).tolist()
    assert seen[0] != seen[1]


def test_windows_unit_refuses_offsets_that_decrease_inside_a_window():
    rows = blocked_rows([7, 0, 10, 3, 11], 2, 2, unit="windows", block=3)
    rows.corpus.offsets = np.array([0, 7, 7, 5, 20, 31])  # document 3 starts at 5, not 17
    with pytest.raises(ValueError, match="offsets decrease from document 2 to 3"):
        rows.spans(0, np.arange(7))  # the window [4, 8) runs through documents 0-3


@pytest.mark.parametrize("boundary", [None, 0])
def test_an_epoch_has_at_most_the_rows_of_every_document(tmp_path, boundary):
    # The replay bound divides by this: with a selector, rows of an unselected epoch (an
    # epoch 0 keeping few documents made far steps look many more epochs away).
    rng = np.random.default_rng(1)
    path = tmp_path / "c"
    gp.write_corpus(path, [np.ones(n, int) for n in rng.integers(1, 60, 200)])
    common = dict(sources={"c": str(path)}, block=8, global_batch_size=4, boundary_id=boundary)
    order = BlockedOrder(block_docs=4, window_blocks=4)
    ramp = gp.curriculum.LinearRamp(start=(1.0, 0.0), end=(1.0, 1.0), epochs=1)
    selected = PipelineBatches(
        gp.PipelineConfig(
            **common,
            order=order,
            sequence_selector=gp.curriculum.LengthBuckets(edges=(10,), rates=ramp),
        )
    ).rows(0)
    every = PipelineBatches(gp.PipelineConfig(**common, order=order)).rows(0)
    assert selected.rows_per_epoch is None and every.rows_per_epoch is not None
    assert selected.most_rows_per_epoch == every.rows_per_epoch == selected.rows_in_epoch(1)
    assert selected.rows_in_epoch(0) < every.rows_per_epoch


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"block_docs": 0}, ValueError, "block_docs must be >= 1"),
        ({"window_blocks": 1.5}, TypeError, "window_blocks must be an int"),
        ({"block_docs": True}, TypeError, "block_docs must be an int"),
        ({"block_docs": 2**63}, ValueError, r"block_docs must be <= 2\*\*40"),
        ({"window_blocks": 10**30}, ValueError, r"window_blocks must be <= 2\*\*40"),
    ],
)
def test_bad_blocked_order_parameters_are_refused(options, error, match):
    with pytest.raises(error, match=match):
        BlockedOrder(**options)


def test_the_largest_blocks_and_windows_are_the_whole_corpus(corpora):
    big = gp.BlockedOrder(block_docs=2**40, window_blocks=2**40)
    whole = gp.BlockedOrder(block_docs=2**20, window_blocks=1)
    config = {"sources": {"en": corpora["en"]}, "block": 7, "global_batch_size": 4}
    batches = [
        [b["inputs"] for b in itertools.islice(gp.make_dataset(
            gp.PipelineConfig(**config, order=order), process_count=1, process_index=0), 6)]
        for order in (big, whole)
    ]  # fmt: skip
    assert all(np.array_equal(x, y) for x, y in zip(*batches, strict=True))


def test_rows_outside_the_epoch_are_refused():
    rows = blocked_rows([5, 5], 1, 1)
    with pytest.raises(IndexError, match=r"rows must lie in \[0, 2\)"):
        rows.spans(0, np.array([2]))


def test_a_summary_that_disagrees_with_the_offsets_is_caught():
    rows = BlockedRows(
        Layout([3, 3, 3]), order=BlockedOrder(1, 1), unit="documents", block=2, seed=0,
        block_tokens=np.array([3, 3, 4]), plan_ahead=False,
    )  # fmt: skip
    with pytest.raises(ValueError, match="corpus summary does not match the corpus"):
        rows.spans(0, np.arange(rows.rows_per_epoch))


def test_planning_ahead_gives_the_same_rows():
    lengths = np.random.default_rng(0).integers(0, 20, 3000)
    a = blocked_rows(lengths, 8, 4, boundary=True)
    b = blocked_rows(lengths, 8, 4, boundary=True, plan_ahead=True)
    for epoch in range(2):
        for lo in range(0, a.rows_in_epoch(epoch), 97):
            rows = np.arange(lo, min(lo + 97, a.rows_in_epoch(epoch)))
            assert a.spans(epoch, rows).document.tolist() == b.spans(epoch, rows).document.tolist()


class Announced(Layout):
    """A layout that records the runs announced to it (a corpus on object storage fetches
    them early)."""

    def __init__(self, lengths):
        super().__init__(lengths)
        self.calls = []

    def read_ahead(self, runs, *, ahead):
        self.calls.append((ahead, runs))


def test_the_next_window_and_the_one_after_are_announced_while_one_is_read():
    """Rows of window 0 are read: window 0's runs are announced as it is planned, window 1's
    as it is planned ahead, and window 2's (two ahead) after it; crossing into the next epoch,
    its first window's. A run is a block of C stored documents, ascending."""
    from grainpack.index.blocked import _prefetcher

    lengths = np.random.default_rng(1).integers(1, 20, 100)  # 13 blocks of 8, 4 windows
    layout = Announced(lengths)
    totals = np.add.reduceat(lengths, np.arange(0, 100, 8))
    rows = BlockedRows(layout, order=BlockedOrder(8, 4), block_tokens=totals, unit="documents",
                       block=4, seed=3)  # fmt: skip
    rows.spans(0, np.arange(2))
    _prefetcher().submit(lambda: None).result()  # the planning ahead is done
    assert layout.calls == [
        (1, [(0, 8), (48, 56), (64, 72), (80, 88)]),  # window 0, planned for these rows
        (1, [(8, 16), (32, 40), (72, 80), (96, 100)]),  # window 1, planned ahead
        (2, [(24, 32), (40, 48), (56, 64), (88, 96)]),  # window 2, announced two ahead
    ]
    rows.spans(0, np.array([rows.rows_in_epoch(0) - 1]))  # window 3 (one block), the last
    _prefetcher().submit(lambda: None).result()
    assert layout.calls[3:] == [
        (1, [(16, 24)]),  # window 3, planned for this row
        (1, [(0, 8), (32, 40), (40, 48), (72, 80)]),  # epoch 1's window 0, planned ahead
        (2, [(8, 16), (16, 24), (48, 56), (96, 100)]),  # epoch 1's window 1
    ]


class CountingBuckets:
    """A BlockSelector keeping the even blocks in odd epochs; counts its per-document calls."""

    def __init__(self, lengths, block_docs):
        self.lengths, self.block_docs, self.calls = np.asarray(lengths), block_docs, 0

    def __call__(self, order, seed, epoch):
        self.calls += 1
        return order[(order // self.block_docs) % 2 == 0] if epoch % 2 else order

    def block_totals(self, seed, epoch):
        blocks = np.arange(len(self.lengths)) // self.block_docs
        keep = np.ones(len(self.lengths), bool) if epoch % 2 == 0 else blocks % 2 == 0
        tokens = np.bincount(blocks, weights=self.lengths * keep).astype(np.int64)
        return tokens, np.bincount(blocks, weights=keep).astype(np.int64)


def test_selector_epochs_come_from_block_totals_without_replay():
    lengths = np.full(12, 3)
    selector = CountingBuckets(lengths, 2)
    rows = BlockedRows(
        Layout(lengths), order=BlockedOrder(2, 2), unit="documents", block=5, seed=0,
        selector=selector, plan_ahead=False,
    )  # fmt: skip
    assert [rows.rows_in_epoch(e) for e in range(4)] == [6, 3, 6, 3]  # 36 and 18 tokens
    epochs, within = rows.locate(np.array([5, 6, 9, 10**4]))  # 9 rows every two epochs
    assert epochs.tolist() == [0, 1, 2, 2222] and within.tolist() == [5, 0, 0, 1]
    assert selector.calls == 0  # a late step never touches documents of earlier epochs
    order, _ = visits(rows, 1)
    assert sorted(order.tolist()) == [0, 1, 4, 5, 8, 9]


# -- the pipeline with order=BlockedOrder -----------------------------------------------------

BLOCKED = gp.BlockedOrder(block_docs=4, window_blocks=3)


@pytest.fixture(scope="session")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpora")  # read-only: shared by the tests
    rng = np.random.default_rng(11)
    paths = {}
    for name, n in (("en", 300), ("fr", 80)):
        docs = [rng.integers(1, 1000, rng.integers(0, 40)) for _ in range(n)]
        gp.write_corpus(root / name, docs, shard_tokens=900)
        paths[name] = str(root / name)
    return paths


def config(paths, **changes):
    options = dict(
        sources=paths, weights={"en": 0.7, "fr": 0.3}, block=16, global_batch_size=8, seed=5,
        boundary_id=1000, order=BLOCKED,
    )  # fmt: skip
    return gp.PipelineConfig(**(options | changes))


def batches(cfg, steps, p=0, count=1, **options):
    it = iter(gp.make_dataset(cfg, process_index=p, process_count=count, **options))
    return [next(it) for _ in range(steps)], it


def test_blocked_pipeline_golden(corpora):
    # Determinism contract: update only with a versioned, deliberate change of the order.
    (batch,), it = batches(config(corpora), 1)
    assert batch["inputs"][0, :8].tolist() == [697, 214, 133, 651, 602, 483, 306, 118]
    assert batch["inputs"][:, 0].tolist() == [697, 425, 14, 297, 97, 200, 642, 1000]
    assert it.get_state()["counts"] == [4, 4]


@pytest.mark.parametrize("count", [2, 4])
def test_world_size_independence(corpora, count):
    cfg = config(corpora)
    one, _ = batches(cfg, 6)
    parts = [batches(cfg, 6, p, count)[0] for p in range(count)]
    for t in range(6):
        for p in range(count):
            for key in one[t]:
                np.testing.assert_array_equal(parts[p][t][key], one[t][key][p::count])


def test_elastic_restore_and_the_counts_in_the_state(corpora):
    cfg = config(corpora)
    reference, _ = batches(cfg, 40)
    _, saved = batches(cfg, 25, 1, 2)
    state = json.loads(json.dumps(saved.get_state()))
    assert state["version"] == 2 and sum(state["counts"]) == 25 * 8
    restored = iter(gp.make_dataset(cfg, process_index=2, process_count=4))
    restored.set_state(state)
    for t in range(25, 40):
        np.testing.assert_array_equal(next(restored)["inputs"], reference[t]["inputs"][2::4])


def test_restore_checks_the_counts_and_reads_version_1_states(corpora):
    cfg = config(corpora)
    _, it = batches(cfg, 30)
    state = it.get_state()
    wrong = dict(state, counts=[state["counts"][0] - 1, state["counts"][1] + 1])
    # Counts the mixer's cache holds are compared; others change the recomputed last batch.
    with pytest.raises(ValueError, match=r"disagree with the slot hash|resume verification"):
        iter(gp.make_dataset(cfg, process_index=0, process_count=1)).set_state(wrong)
    with pytest.raises(ValueError, match="corrupt grainpack iterator state"):
        iter(gp.make_dataset(cfg, process_index=0, process_count=1)).set_state(
            dict(state, counts=[1, 2])
        )
    # as written before version 2 (and before states carried a check value)
    old = {k: v for k, v in state.items() if k not in ("counts", "check")} | {"version": 1}
    again = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    again.set_state(old)  # counted from slot 0, as before version 2
    np.testing.assert_array_equal(next(again)["inputs"], next(it)["inputs"])


def test_data_loader_equals_dataset(corpora):
    cfg = config(corpora)
    want, _ = batches(cfg, 4, 1, 2)
    loader = iter(gp.pipeline.make_data_loader(cfg, process_index=1, process_count=2))
    for t in range(4):
        np.testing.assert_array_equal(next(loader)["inputs"], want[t]["inputs"])


def test_mixture_accounting_is_exact(corpora):
    cfg = config(corpora, provenance=True)
    got, _ = batches(cfg, 60)
    real = {0: 0, 1: 0}
    for b in got:
        for j in (0, 1):
            mine = b["source"] == j
            real[j] += int((b["loss_mask"][mine].sum(axis=1) + 1).sum())
    accounts = gp.mixing.mixture_accounting(cfg, 60)
    assert [accounts[n].real_tokens for n in ("en", "fr")] == [real[0], real[1]]
    assert [accounts[n].rows for n in ("en", "fr")] == [
        int(sum((b["source"] == j).sum() for b in got)) for j in (0, 1)
    ]


def test_selectors_are_applied_per_block(corpora):
    selector = gp.curriculum.LengthBuckets(edges=(10,), rates=((1.0, 0.0), (0.0, 1.0)))
    cfg = config(corpora, weights=None, sources={"en": corpora["en"]}, sequence_selector=selector)
    source = gp.open_corpus(corpora["en"])
    rows = PipelineBatches(cfg).rows(0)
    for epoch, short in ((0, True), (1, False)):
        order, _ = visits(rows, epoch)
        assert ((source.lengths[order] < 10) == short).all()
        keep = rows.selector(np.arange(len(source)), cfg.seed, epoch)
        missing = np.setdiff1d(keep, order)  # only an empty last document leaves no token
        assert np.isin(order, keep).all() and len(order) == len(np.unique(order))
        assert len(missing) <= 1 and (source.lengths[missing] == 0).all()


def test_a_selector_with_the_blocked_order_through_make_dataset(corpora):
    # Epoch 0 keeps only documents shorter than 10 tokens (a step's check of the selector's
    # replay cost once failed on blocked rows).
    selector = gp.curriculum.LengthBuckets(edges=(10,), rates=((1.0, 0.0), (0.0, 1.0)))
    cfg = config(
        corpora, weights=None, sources={"en": corpora["en"]}, sequence_selector=selector,
        provenance=True,
    )  # fmt: skip
    lengths = gp.open_corpus(corpora["en"]).lengths
    got, _ = batches(cfg, 6)
    for batch in got[:3]:  # within epoch 0 (its short documents hold about 60 rows)
        assert (batch["epoch"] == 0).all()
        documents = batch["segment_document"][batch["segment_document"] >= 0]
        assert len(documents) and (lengths[documents] < 10).all()
    fresh = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    fresh.set_state(batches(cfg, 3)[1].get_state())  # a restore at step 3
    for step in range(3, 6):
        batch = next(fresh)
        assert all(np.array_equal(batch[k], got[step][k]) for k in batch), step


def test_arbitrary_selectors_need_the_exact_order(corpora):
    cfg = config(corpora, sequence_selector=np.sort)
    with pytest.raises(TypeError, match="order=BlockedOrder needs a selector"):
        batches(cfg, 1)


def test_the_order_is_part_of_the_fingerprint(corpora):
    exact = config(corpora, order="exact")
    assert "order" not in exact.description()  # saved exact-order checkpoints stay valid
    _, it = batches(config(corpora), 3)
    with pytest.raises(ValueError, match="another pipeline config"):
        iter(gp.make_dataset(exact, process_index=0, process_count=1)).set_state(it.get_state())
    with pytest.raises(ValueError, match=r"order must be 'exact' or a gp\.BlockedOrder"):
        config(corpora, order="blocked")  # a wrong value
    with pytest.raises(TypeError, match=r"order must be 'exact' or a gp\.BlockedOrder"):
        config(corpora, order=3)  # a wrong type


def test_the_exact_order_refuses_a_corpus_too_large_for_it(corpora):
    with pytest.raises(
        ValueError, match=r"order='exact' would hold about 0\.0 MiB .*gp\.BlockedOrder"
    ):
        gp.make_dataset(config(corpora, order="exact"), process_index=0, process_count=1,
                        max_index_bytes=10_000)  # fmt: skip
    gp.make_dataset(config(corpora), process_index=0, process_count=1, max_index_bytes=10_000)
    for bad, error in ((float("nan"), TypeError), (-1, ValueError)):  # were accepted
        with pytest.raises(error, match="max_index_bytes must be"):
            gp.make_dataset(config(corpora), process_index=0, process_count=1, max_index_bytes=bad)
    # an evaluation pass plans the exact order too: the same guard, for its source only
    exact = config(corpora, order="exact")
    for limit, refused in ((2_000, True), (5_000, False)):  # 34 B a document: fr 80, en 300
        with contextlib.nullcontext() if not refused else pytest.raises(ValueError, match="80 "):
            gp.make_dataset(exact, process_index=0, process_count=1, evaluation="fr",
                            max_index_bytes=limit)  # fmt: skip


@pytest.mark.slow
def test_workers_and_a_restore_with_workers(corpora):
    cfg = config(corpora)
    want, it = batches(cfg, 30)
    state = it.get_state()
    got, _ = batches(cfg, 30, worker_count=2)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a["inputs"], b["inputs"])
    restored = iter(gp.make_dataset(cfg, process_index=0, process_count=1, worker_count=2))
    restored.set_state(state)  # the workers start at the restored counts
    np.testing.assert_array_equal(next(restored)["inputs"], next(it)["inputs"])
    restored.close()
