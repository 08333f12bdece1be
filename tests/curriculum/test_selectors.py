"""Curriculum selectors: length buckets, schedules, the bandit, composition, checkpoints."""

from __future__ import annotations

import json
import math
import pickle

import numpy as np
import orbax.checkpoint as ocp
import pytest

import grainpack as gp
from grainpack.curriculum.bandit import LengthBandit, UndecidedEpochError
from grainpack.curriculum.protocols import BindsToSource
from grainpack.curriculum.selectors import Chain, LengthBuckets, LinearRamp, PerSource
from grainpack.index.hashing import splitmix64

EDGES = (16, 64)  # buckets: [1, 16), [16, 64), [64, ...)
PER_BUCKET = 300


def reverse_order(order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    return order[::-1]


def add_unknown_id(order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    return np.append(order[:-1], order.max() + 1000)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """300 documents in each bucket, interleaved; lengths 1..15, 16..63, 64..199."""
    rng = np.random.default_rng(0)
    ranges = [(1, 16), (16, 64), (64, 200)]
    lengths = np.stack([rng.integers(lo, hi, PER_BUCKET) for lo, hi in ranges], axis=1).ravel()
    docs = [rng.integers(1, 500, n) for n in lengths]
    path = tmp_path_factory.mktemp("curriculum") / "c"
    return gp.write_corpus(path, docs), str(path)


def buckets_of(lengths: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """Bucket by direct comparison with EDGES (independent of searchsorted)."""
    n = lengths[docs]
    return (n >= 16).astype(int) + (n >= 64).astype(int)


def counts(lengths: np.ndarray, docs: np.ndarray) -> list[int]:
    return np.bincount(buckets_of(lengths, docs), minlength=3).tolist()


def base(src, seed=0, epoch=0):
    return gp.global_document_order(len(src), seed=seed, epoch=epoch)


# -- LengthBuckets ------------------------------------------------------------------------------


def test_length_buckets_rates_zero_and_one_are_exact(corpus):
    src, _ = corpus
    sel = LengthBuckets(edges=EDGES, rates=(1.0, 0.0, 1.0), corpus=src)
    for epoch in range(3):
        kept = sel(base(src, 3, epoch), 3, epoch)
        assert counts(src.lengths, kept) == [PER_BUCKET, 0, PER_BUCKET]


def test_length_buckets_rate_half_keeps_about_half_of_each_bucket(corpus):
    src, _ = corpus
    sel = LengthBuckets(edges=EDGES, rates=(0.5, 0.5, 0.5), corpus=src)
    bound = 4 * math.sqrt(PER_BUCKET * 0.25)  # 4 standard deviations of Binomial(300, 0.5)
    for epoch in range(5):
        for c in counts(src.lengths, sel(base(src, 1, epoch), 1, epoch)):
            assert abs(c - PER_BUCKET / 2) < bound


def test_length_buckets_keep_base_order_and_the_documented_hash_rule(corpus):
    src, _ = corpus
    rates = (0.25, 0.5, 0.75)
    sel = LengthBuckets(edges=EDGES, rates=rates, corpus=src)
    order = base(src, 7, 2)
    kept = sel(order, 7, 2)
    # Reference: the module docstring's rule on Python ints.
    key = splitmix64(splitmix64(7 ^ 0x5E1EC7) ^ 2)
    bucket = buckets_of(src.lengths, order)
    expected = [
        d for d, b in zip(order.tolist(), bucket.tolist()) if splitmix64(key ^ d) < rates[b] * 2**64
    ]
    assert kept.tolist() == expected


def test_length_buckets_deterministic_and_pickled_copy_agrees(corpus):
    src, _ = corpus
    sel = LengthBuckets(edges=EDGES, rates=(0.3, 0.6, 0.9), corpus=src)
    first = sel(base(src, 2, 4), 2, 4)
    np.testing.assert_array_equal(sel(base(src, 2, 4), 2, 4), first)
    copy = pickle.loads(pickle.dumps(sel))
    np.testing.assert_array_equal(copy(base(src, 2, 4), 2, 4), first)
    assert repr(copy) == repr(sel)


def test_length_buckets_pickle_small_whatever_the_corpus_size(corpus):
    src, _ = corpus
    sel = LengthBuckets(edges=EDGES, rates=(1.0, 1.0, 0.5), corpus=src)
    sel(base(src), 0, 0)  # lengths are now cached in the source
    assert len(pickle.dumps(sel)) < 2000 < src.lengths.nbytes


def test_length_buckets_different_epochs_keep_different_long_documents(corpus):
    src, _ = corpus
    sel = LengthBuckets(edges=EDGES, rates=(1.0, 1.0, 0.5), corpus=src)
    long_docs = np.flatnonzero(src.lengths >= 64)
    kept = [set(sel(base(src, 0, e), 0, e).tolist()) & set(long_docs.tolist()) for e in range(10)]
    assert kept[0] != kept[1]
    overlap = len(kept[0] & kept[1]) / len(kept[0])
    assert 0.3 < overlap < 0.7  # independent draws: about half of epoch 0's long docs again
    # P(a document is never kept in 10 epochs) = 2**-10: about 0.3 of 300 missing.
    assert len(set().union(*kept)) >= PER_BUCKET - 5


def test_length_buckets_schedule_table_and_linear_ramp(corpus):
    src, _ = corpus
    table = LengthBuckets(edges=EDGES, rates=np.array([(1, 1, 0), (1, 1, 1)]), corpus=src)
    assert counts(src.lengths, table(base(src), 0, 0)) == [300, 300, 0]
    assert counts(src.lengths, table(base(src, 0, 5), 0, 5)) == [300, 300, 300]  # last row
    ramp = LinearRamp(start=(1.0, 1.0, 0.0), end=(1.0, 0.0, 1.0), epochs=4)
    assert ramp.rates(0) == (1.0, 1.0, 0.0)
    assert ramp.rates(1) == (1.0, 0.75, 0.25)
    assert ramp.rates(2) == (1.0, 0.5, 0.5)
    assert ramp.rates(9) == (1.0, 0.0, 1.0)
    sel = LengthBuckets(edges=EDGES, rates=ramp, corpus=src)
    assert counts(src.lengths, sel(base(src, 0, 0), 0, 0))[2] == 0
    assert counts(src.lengths, sel(base(src, 0, 4), 0, 4)) == [300, 0, 300]


def test_length_buckets_report_counts_by_hand(tmp_path):
    src = gp.write_corpus(tmp_path / "c", [np.ones(n, int) for n in (3, 20, 5, 100, 30)])
    sel = LengthBuckets(edges=(10, 50), rates=(1.0, 0.0, 1.0), corpus=src)
    report = sel.report(None, 0, 0)
    assert report.documents == (2, 2, 1)
    assert report.kept_documents == (2, 0, 1)
    assert report.tokens == (8, 50, 100)
    assert report.kept_tokens == (8, 0, 100)
    assert report.token_shares == (8 / 108, 0.0, 100 / 108)
    assert json.loads(json.dumps(report.as_dict()))["kept_tokens"] == [8, 0, 100]
    assert sel.report(np.array([4, 1]), 0, 0).documents == (0, 2, 0)
    assert sel.bucket_of(np.array([0, 1, 3])).tolist() == [0, 1, 2]


@pytest.mark.parametrize("order", ["exact", "blocked"])
def test_selector_report_counts_what_the_pipeline_kept(corpus, order):
    # The report of an unbound selector as the pipeline applies it (its corpus, its seed,
    # per block under the blocked order) equals the documents epoch 0's batches hold.
    src, path = corpus
    blocked = gp.BlockedOrder(block_docs=4, window_blocks=8) if order == "blocked" else "exact"
    sel = LengthBuckets(edges=EDGES, rates=(1.0, 0.5, 0.3))
    cfg = gp.PipelineConfig(
        sources={"c": path},
        block=32,
        global_batch_size=32,
        seed=3,
        sequence_selector=sel,
        order=blocked,
        provenance=True,
    )
    seen: set[int] = set()
    it = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    while (batch := next(it))["epoch"].min() == 0:
        docs = batch["segment_document"][batch["epoch"] == 0]
        seen |= set(docs[docs >= 0].tolist())
    seen_docs = np.array(sorted(seen))
    report = gp.mixing.selector_report(cfg, "c", 0)
    assert report.kept_documents == tuple(counts(src.lengths, seen_docs))
    kept_tokens = np.bincount(buckets_of(src.lengths, seen_docs), src.lengths[seen_docs], 3)
    assert report.kept_tokens == tuple(int(t) for t in kept_tokens)
    assert report.documents == (PER_BUCKET,) * 3
    assert report.rates == (1.0, 0.5, 0.3)
    with pytest.raises(ValueError, match="source 'x' is not one of"):
        gp.mixing.selector_report(cfg, "x", 0)


def test_length_buckets_repr_is_stable_and_content_derived(corpus):
    src, path = corpus
    a = LengthBuckets(edges=[16, 64], rates=[1, 0.5, 0.25], corpus=src)
    b = LengthBuckets(edges=(16, 64), rates=(1.0, 0.5, 0.25), corpus=gp.open_corpus(path))
    assert repr(a) == repr(b)
    assert src.fingerprint[:16] in repr(a)
    assert "0x" not in repr(a)  # no memory addresses


# -- the pipeline -----------------------------------------------------------------------------


def take(iterator, n):
    return [next(iterator) for _ in range(n)]


def test_pipeline_rows_come_only_from_kept_documents(corpus):
    src, path = corpus
    sel = LengthBuckets(edges=EDGES, rates=(1.0, 0.0, 0.5), corpus=src)
    cfg = gp.PipelineConfig(
        sources={"c": path}, block=32, global_batch_size=8, sequence_selector=sel, provenance=True
    )
    seen: dict[int, set[int]] = {}
    for batch in take(iter(gp.make_dataset(cfg, process_index=0, process_count=1)), 60):
        for row_epoch, docs in zip(batch["epoch"], batch["segment_document"]):
            seen.setdefault(int(row_epoch), set()).update(int(d) for d in docs if d >= 0)
    for epoch, docs in seen.items():
        kept = set(sel(base(src, 0, epoch), 0, epoch).tolist())
        assert docs <= kept
    assert counts(src.lengths, np.array(sorted(seen[0])))[1] == 0


@pytest.mark.parametrize("process_count", [2, 4])
def test_pipeline_with_selector_is_identical_across_world_sizes(corpus, process_count):
    src, path = corpus
    sel = Chain(LengthBuckets(edges=EDGES, rates=(0.2, 0.5, 1.0), corpus=src), reverse_order)
    cfg = gp.PipelineConfig(
        sources={"c": path}, block=64, global_batch_size=32, seed=5, sequence_selector=sel
    )
    steps = 40  # epoch 0 of the selection is about 22 global batches: epoch 1 is included
    reference = take(iter(gp.make_dataset(cfg, process_index=0, process_count=1)), steps)
    per_process = [
        take(iter(gp.make_dataset(cfg, process_index=p, process_count=process_count)), steps)
        for p in range(process_count)
    ]
    for t in range(steps):
        for key, value in reference[t].items():
            interleaved = np.empty_like(value)
            for p in range(process_count):
                interleaved[p::process_count] = per_process[p][t][key]
            np.testing.assert_array_equal(interleaved, value, err_msg=f"{key} step {t}")


# -- Chain and PerSource ----------------------------------------------------------------------


def test_chain_applies_selectors_in_order(corpus):
    src, _ = corpus
    short = LengthBuckets(edges=EDGES, rates=(1.0, 0.0, 0.0), corpus=src)
    order = base(src, 1, 1)
    chained = Chain(short, reverse_order)(order, 1, 1)
    np.testing.assert_array_equal(chained, short(order, 1, 1)[::-1])
    assert repr(Chain(short, reverse_order)) == (f"Chain({short!r}, {__name__}.reverse_order)")


def test_chained_length_buckets_keep_the_minimum_rate(corpus):
    src, _ = corpus
    a = LengthBuckets(edges=EDGES, rates=(1.0, 0.5, 0.2), corpus=src)
    b = LengthBuckets(edges=EDGES, rates=(0.3, 1.0, 0.6), corpus=src)
    both = LengthBuckets(edges=EDGES, rates=(0.3, 0.5, 0.2), corpus=src)
    order = base(src, 4, 3)
    np.testing.assert_array_equal(Chain(a, b)(order, 4, 3), both(order, 4, 3))
    reports = Chain(a, b).report(order, 4, 3)
    assert [r.rates for r in reports] == [a.rates_for(3), b.rates_for(3)]
    assert reports[1].documents == reports[0].kept_documents
    assert Chain(reverse_order, a, b).report(None, 4, 3) == reports  # None: every document
    with pytest.raises(ValueError, match="needs a LengthBuckets stage with a corpus"):
        Chain(reverse_order).report(None, 4, 3)


def test_chain_rejects_bad_stages():
    with pytest.raises(TypeError, match="at least one"):
        Chain()
    # a lambda is a selector wherever PipelineConfig takes one (in process, and in Grain
    # workers, which receive it through cloudpickle)
    assert Chain(lambda o, s, e: o[::-1])(np.arange(3), 0, 0).tolist() == [2, 1, 0]
    with pytest.raises(TypeError, match="must be callable"):
        Chain(3)
    with pytest.raises(ValueError, match=rf"stage 1 \({__name__}.add_unknown_id\)"):
        Chain(reverse_order, add_unknown_id)(np.arange(5), 0, 0)


def test_bind_gives_each_source_its_lengths_and_per_source_selectors(corpus, tmp_path):
    src, _ = corpus
    other = gp.write_corpus(tmp_path / "o", [np.ones(n, int) for n in (100, 3)])
    unbound = LengthBuckets(edges=EDGES, rates=(1.0, 1.0, 0.0))
    with pytest.raises(ValueError, match="needs document lengths"):
        unbound(np.arange(2), 0, 0)
    assert unbound.bind("o", other)(np.array([0, 1]), 0, 0).tolist() == [1]
    per = PerSource({"c": LengthBuckets(edges=EDGES, rates=(0, 1, 1)), "o": None})
    assert counts(src.lengths, per.bind("c", src)(base(src), 0, 0)) == [0, 300, 300]
    assert per.bind("o", other) is None and per.bind("x", other) is None
    assert not callable(per)  # only binds: an order does not say which source it is from
    assert not isinstance(per, gp.curriculum.SequenceSelector) and isinstance(per, BindsToSource)
    assert isinstance(unbound, gp.curriculum.SequenceSelector) and isinstance(
        np.sort, gp.curriculum.SequenceSelector
    )
    bound = LengthBuckets(edges=EDGES, rates=(1.0, 1.0, 0.0), corpus=src)
    with pytest.raises(ValueError, match="applies it to source 'o'"):
        bound.bind("o", other)
    assert Chain(unbound, reverse_order).bind("o", other)(np.array([0, 1]), 0, 0).tolist() == [1]


def test_pipeline_binds_per_source_selectors(corpus, tmp_path):
    src, path = corpus
    gp.write_corpus(tmp_path / "s", [np.full(n, 7) for n in (3, 20, 100, 40)])
    sel = PerSource({"c": LengthBuckets(edges=EDGES, rates=(1.0, 0.0, 1.0)), "s": None})
    cfg = gp.PipelineConfig(
        sources={"c": path, "s": str(tmp_path / "s")},
        block=32,
        global_batch_size=8,
        sequence_selector=sel,
        provenance=True,
    )
    seen: list[set[int]] = [set(), set()]
    for batch in take(iter(gp.make_dataset(cfg, process_index=0, process_count=1)), 40):
        for j, docs in zip(batch["source"], batch["segment_document"]):
            seen[j].update(int(d) for d in docs if d >= 0)
    assert counts(src.lengths, np.array(sorted(seen[0])))[1] == 0
    assert seen[1] == {0, 1, 2, 3}  # not filtered, although it has 16..63 token documents


def test_per_source_keys_must_be_sources(corpus):
    _, path = corpus
    sel = PerSource({"C": LengthBuckets(edges=EDGES, rates=(1.0, 0.0, 1.0))})
    with pytest.raises(ValueError, match=r"PerSource names \['C'\], which are not sources"):
        gp.PipelineConfig(sources={"c": path}, block=32, global_batch_size=8, sequence_selector=sel)


def test_selector_built_on_another_corpus_is_a_clear_error(corpus):
    src, _ = corpus
    sel = LengthBuckets(edges=EDGES, rates=(1.0, 1.0, 1.0), corpus=src)
    with pytest.raises(ValueError, match="serves that corpus only"):
        sel(np.arange(len(src) + 5), 0, 0)


@pytest.mark.parametrize("blocked", [False, True])
def test_length_buckets_refuse_float_ids_and_negative_epochs(corpus, blocked):
    src, _ = corpus
    sel = LengthBuckets(edges=EDGES, rates=[(1.0, 0.0, 1.0), (1.0, 1.0, 1.0)], corpus=src)
    sel = sel.for_blocks(4) if blocked else sel
    with pytest.raises(TypeError, match="order must hold integer document ids; got dtype float"):
        sel(np.array([0.9, 1.7]), 0, 0)  # was truncated to documents 0 and 1
    with pytest.raises(ValueError, match="epoch must be >= 0"):
        sel(np.arange(4), 0, -1)  # was the table's last row
    assert sel(np.array([], dtype=np.int64), 0, 0).tolist() == []


def test_length_buckets_rates_table_of_numpy_rows():
    rows = [np.array([1.0, 0.5]), np.array([1.0, 1.0])]
    assert LengthBuckets(edges=(10,), rates=rows).rates == ((1.0, 0.5), (1.0, 1.0))


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"edges": (64, 16), "rates": (1, 1, 1)}, ValueError, "strictly increasing"),
        ({"edges": (16, 16), "rates": (1, 1, 1)}, ValueError, "strictly increasing"),
        ({"edges": (0, 16), "rates": (1, 1, 1)}, ValueError, "edges must be >= 1, got edges=0"),
        ({"edges": (1.5,), "rates": (1, 1)}, TypeError, "edges must be an int"),
        ({"edges": (16,), "rates": (1.0, 1.5)}, ValueError, r"in \[0, 1\]"),
        ({"edges": (16,), "rates": (-0.1, 1.0)}, ValueError, r"in \[0, 1\]"),
        ({"edges": (16,), "rates": (float("nan"), 1.0)}, ValueError, "finite"),
        ({"edges": (16,), "rates": (1.0, 1.0, 1.0)}, ValueError, "need 2 values"),
        ({"edges": (16,), "rates": [(1.0, 1.0), (1.0,)]}, ValueError, "need 2 values"),
        ({"edges": (16,), "rates": LengthBandit(3)}, ValueError, "need 2 values"),
        ({"edges": (16,), "rates": ()}, TypeError, "rates must be"),
        ({"edges": (16,), "rates": (1, 1), "corpus": "/data/c"}, TypeError, "expose .lengths"),
    ],
)
def test_length_buckets_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        LengthBuckets(**kwargs)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: LinearRamp(start=(1.0,), end=(1.0, 0.5), epochs=2), ValueError, "one rate"),
        (lambda: LinearRamp(start=(1.0,), end=(2.0,), epochs=2), ValueError, r"in \[0, 1\]"),
        (lambda: LinearRamp(start=(1.0,), end=(0.0,), epochs=0), ValueError, "epochs must"),
        (lambda: LengthBandit(0), ValueError, "num_buckets must"),
        (lambda: LengthBandit(2, exploration=0.0), ValueError, "exploration must lie"),
        (lambda: LengthBandit(2, learning_rate=-1.0), ValueError, "learning_rate must be > 0"),
        (lambda: LengthBandit(2, delay=0), ValueError, "delay must"),
        (lambda: LengthBandit(2, decay=1.0), ValueError, r"decay must lie in \[0.0, 1.0\)"),
        (lambda: LengthBandit(2).update(1, [0.0, 0.0]), ValueError, "epoch 0; got epoch=1"),
        (lambda: LengthBandit(2).update(0, [0.0]), ValueError, "one value per bucket"),
        (lambda: LengthBandit(2).update(0, [0.0, math.inf]), ValueError, "finite"),
        (lambda: LengthBandit(2).update(0, "ab"), TypeError, "sequence"),
        (lambda: PerSource({1: reverse_order}), TypeError, "source names"),
    ],
)
def test_schedule_and_bandit_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


class TwoBucketsOneRate:
    """A RateSchedule that claims two buckets but gives one rate."""

    num_buckets = 2

    def rates(self, epoch: int) -> tuple[float, ...]:
        return (1.0,)


def test_a_schedule_giving_the_wrong_number_of_rates_is_a_clear_error(corpus):
    src, _ = corpus
    sel = LengthBuckets(edges=(16,), rates=TwoBucketsOneRate(), corpus=src)
    with pytest.raises(ValueError, match="gave 1 rates for epoch 0, but 1 edges make 2 buckets"):
        sel(base(src), 0, 0)


# -- the bandit -------------------------------------------------------------------------------


def test_bandit_keeps_every_bucket_at_least_exploration_share():
    bandit = LengthBandit(4, learning_rate=10.0, exploration=0.2, delay=1)
    for e in range(20):
        bandit.update(e, [1.0, -1.0, -1.0, -1.0])
    assert bandit.rates(20)[0] == 1.0
    assert all(r >= 0.2 / 4 for r in bandit.rates(20))


def report_when_next_epoch_appears(bandit: LengthBandit, batch, rewards_of) -> None:
    """A stateless training-loop rule: report epoch u once rows of u + 1 appear."""
    while int(batch["epoch"].max()) > bandit.updates:
        bandit.update(bandit.updates, rewards_of(bandit.updates))


def fixed_rewards(epoch: int) -> list[float]:
    return [0.5, 0.0, -0.5 - 0.1 * epoch]


def bandit_config(src, path, bandit):
    sel = LengthBuckets(edges=EDGES, rates=bandit, corpus=src)
    return gp.PipelineConfig(
        sources={"c": path},
        block=64,
        global_batch_size=32,
        seed=1,
        sequence_selector=sel,
        provenance=True,
    )


def run(iterator, bandit, steps):
    out = []
    for _ in range(steps):
        batch = next(iterator)
        report_when_next_epoch_appears(bandit, batch, fixed_rewards)
        out.append(batch)
    return out


def test_bandit_in_the_pipeline_changes_composition_and_reports(corpus):
    src, path = corpus
    bandit = LengthBandit(3, learning_rate=2.0, exploration=0.3, delay=2)
    cfg = bandit_config(src, path, bandit)
    run(iter(gp.make_dataset(cfg, process_index=0, process_count=1)), bandit, 150)
    assert bandit.updates >= 3
    sel = cfg.sequence_selector
    first, last = sel.report(None, 1, 0), sel.report(None, 1, bandit.updates)
    assert first.kept_documents == (300, 300, 300)
    assert last.kept_documents[0] == 300 and last.kept_documents[2] < 150


def test_bandit_pipeline_is_identical_across_world_sizes(corpus):
    src, path = corpus
    steps = 120
    reference_bandit = LengthBandit(3, learning_rate=2.0, exploration=0.3)
    cfg = bandit_config(src, path, reference_bandit)
    reference = run(
        iter(gp.make_dataset(cfg, process_index=0, process_count=1)), reference_bandit, steps
    )
    # Two processes, each with its own bandit, reporting from global information (the
    # largest epoch in the global batch, as an all-reduce would give every process).
    bandits = [LengthBandit(3, learning_rate=2.0, exploration=0.3) for _ in range(2)]
    iterators = [
        iter(gp.make_dataset(bandit_config(src, path, b), process_index=p, process_count=2))
        for p, b in enumerate(bandits)
    ]
    for t in range(steps):
        local = [next(it) for it in iterators]
        global_epoch = {"epoch": np.concatenate([b["epoch"] for b in local])}
        for bandit in bandits:
            report_when_next_epoch_appears(bandit, global_epoch, fixed_rewards)
        for key, value in reference[t].items():
            # segment_* provenance is as wide as the most segments in a row of *this* batch.
            interleaved = np.full_like(value, -1)
            for p in range(2):
                part = local[p][key]
                if part.ndim == 2:
                    interleaved[p::2, : part.shape[1]] = part
                else:
                    interleaved[p::2] = part
            np.testing.assert_array_equal(interleaved, value, err_msg=f"{key} step {t}")
    assert bandits[0].history == bandits[1].history == reference_bandit.history
    assert reference_bandit.updates >= 5


def test_pipeline_stops_with_a_clear_error_when_rewards_are_not_reported(corpus):
    src, path = corpus
    bandit = LengthBandit(3)  # epochs 0 and 1 decided; nobody calls update
    it = iter(gp.make_dataset(bandit_config(src, path, bandit), process_index=0, process_count=1))
    with pytest.raises(UndecidedEpochError, match=r"epoch 2 is needed; call update\(0, "):
        take(it, 200)


def test_bandit_state_json_round_trip_keeps_its_choices(corpus):
    src, _ = corpus
    bandit = LengthBandit(3, learning_rate=2.0, exploration=0.3)
    for e in range(4):
        bandit.update(e, fixed_rewards(e))
    restored = LengthBandit(3, learning_rate=2.0, exploration=0.3)
    restored.load_state_dict(json.loads(json.dumps(bandit.state_dict())))
    assert restored.history == bandit.history and restored.updates == 4
    assert restored.update(4, [0.1, 0.2, 0.3]) == bandit.update(4, [0.1, 0.2, 0.3])
    a = LengthBuckets(edges=EDGES, rates=bandit, corpus=src)
    b = LengthBuckets(edges=EDGES, rates=restored, corpus=src)
    for e in range(7):
        np.testing.assert_array_equal(a(base(src, 1, e), 1, e), b(base(src, 1, e), 1, e))
    with pytest.raises(ValueError, match="saved by a bandit with"):
        LengthBandit(4).load_state_dict(bandit.state_dict())
    with pytest.raises(ValueError, match="not a LengthBandit state"):
        LengthBandit(3).load_state_dict({"rates": []})


def test_bandit_orbax_round_trip_continues_identically(corpus, tmp_path):
    src, path = corpus
    steps, cut = 150, 70
    reference_bandit = LengthBandit(3, learning_rate=2.0, exploration=0.3)
    reference_cfg = bandit_config(src, path, reference_bandit)
    reference = run(
        iter(gp.make_dataset(reference_cfg, process_index=0, process_count=1)),
        reference_bandit,
        steps,
    )
    bandit = LengthBandit(3, learning_rate=2.0, exploration=0.3)
    it = iter(gp.make_dataset(bandit_config(src, path, bandit), process_index=0, process_count=1))
    run(it, bandit, cut)
    assert 0 < bandit.updates < reference_bandit.updates  # the cut is mid-run
    options = ocp.CheckpointManagerOptions(create=True)
    with ocp.CheckpointManager(tmp_path / "ckpt", options=options) as mngr:
        args = ocp.args.Composite(
            data=gp.CheckpointSave(it), curriculum=ocp.args.JsonSave(bandit.state_dict())
        )
        mngr.save(cut, args=args)
        mngr.wait_until_finished()

    fresh = LengthBandit(3, learning_rate=2.0, exploration=0.3)
    fresh_it = iter(
        gp.make_dataset(bandit_config(src, path, fresh), process_index=0, process_count=1)
    )
    with ocp.CheckpointManager(tmp_path / "ckpt", options=options) as mngr:
        step = mngr.latest_step()
        # The bandit first: the iterator's set_state recomputes the last batch to verify it.
        saved = mngr.restore(step, args=ocp.args.Composite(curriculum=ocp.args.JsonRestore()))
        fresh.load_state_dict(saved.curriculum)
        mngr.restore(step, args=ocp.args.Composite(data=gp.CheckpointRestore(fresh_it)))
    rest = run(fresh_it, fresh, steps - cut)
    assert fresh.history == reference_bandit.history
    for t, (a, b) in enumerate(zip(rest, reference[cut:])):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"{key} step {cut + t}")


def test_bandit_rolled_back_in_process_continues_as_a_fresh_restore(corpus):
    # A rollback in the same process (load an earlier bandit state, set an earlier iterator
    # state, then report other rewards) must not reuse the epoch plans cached from the
    # decisions that were rolled back.
    src, path = corpus

    def pipeline():
        bandit = LengthBandit(3, learning_rate=2.0, exploration=0.3)
        cfg = bandit_config(src, path, bandit)
        return bandit, iter(gp.make_dataset(cfg, process_index=0, process_count=1))

    def train(iterator, bandit, steps, rewards):
        out = []
        for _ in range(steps):
            out.append(next(iterator))
            report_when_next_epoch_appears(bandit, out[-1], lambda e: rewards)
        return out

    bandit, it = pipeline()
    train(it, bandit, 30, [1.0, 0.0, -1.0])
    state, saved = it.get_state(), bandit.state_dict()
    train(it, bandit, 60, [1.0, 0.0, -1.0])  # epochs decided past the checkpoint's
    bandit.load_state_dict(saved)
    it.set_state(state)
    rolled = train(it, bandit, 60, [-1.0, 0.0, 1.0])
    fresh_bandit, fresh = pipeline()
    fresh_bandit.load_state_dict(saved)
    fresh.set_state(state)
    reference = train(fresh, fresh_bandit, 60, [-1.0, 0.0, 1.0])
    assert int(reference[-1]["epoch"].max()) >= 4  # the rolled-back epochs are replanned
    assert fresh_bandit.history == bandit.history
    for t, (a, b) in enumerate(zip(rolled, reference)):
        np.testing.assert_array_equal(a["inputs"], b["inputs"], err_msg=f"step {t}")


@pytest.mark.slow
def test_bandit_with_worker_processes_after_close_matches_in_process(corpus):
    src, path = corpus
    steps = 60  # two updates, so the workers restart twice (about 3 s each)
    reference_bandit = LengthBandit(3, learning_rate=2.0, exploration=0.3)
    cfg = bandit_config(src, path, reference_bandit)
    reference = run(
        iter(gp.make_dataset(cfg, process_index=0, process_count=1)), reference_bandit, steps
    )
    bandit = LengthBandit(3, learning_rate=2.0, exploration=0.3)
    it = iter(
        gp.make_dataset(
            bandit_config(src, path, bandit), process_index=0, process_count=1, worker_count=2
        )
    )
    got = []
    for _ in range(steps):
        batch = next(it)
        before = bandit.updates
        report_when_next_epoch_appears(bandit, batch, fixed_rewards)
        if bandit.updates != before:
            it.close()  # the workers restart with the new bandit state at the next batch
        got.append(batch)
    it.close()
    assert bandit.updates >= 2
    for t, (a, b) in enumerate(zip(got, reference)):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"{key} step {t}")


def test_length_buckets_under_the_blocked_order_never_build_the_lengths_array(tmp_path):
    # reading source.lengths builds 8 bytes a document: 80 GB at 10^10 documents
    rng = np.random.default_rng(4)
    src = gp.write_corpus(tmp_path / "c", [np.ones(n, int) for n in rng.integers(1, 90, 400)])
    selector = gp.curriculum.LengthBuckets(edges=(30,), rates=(1.0, 0.5), corpus=src)
    assert src._lengths is None
    config = gp.PipelineConfig(
        sources={"c": str(tmp_path / "c")},
        block=16,
        global_batch_size=4,
        order=gp.BlockedOrder(16, 4),
        sequence_selector=gp.curriculum.LengthBuckets(edges=(30,), rates=(1.0, 0.5)),
    )
    dataset = gp.make_dataset(config, process_index=0, process_count=1)
    with iter(dataset) as iterator:
        next(iterator)
    assert dataset.batches.sources[0]._lengths is None
    assert selector.corpus is src


def test_length_buckets_accept_a_corpus_that_forwards_lengths(tmp_path):
    src = gp.write_corpus(tmp_path / "c", [[1, 2, 3], [4]])

    class Forwarding:  # a wrapper: .lengths comes from __getattr__
        def __getattr__(self, name):
            return getattr(src, name)

    selector = gp.curriculum.LengthBuckets(edges=(2,), rates=(0.0, 1.0), corpus=Forwarding())
    assert selector(np.array([1, 0]), 0, 0).tolist() == [0]
    with pytest.raises(TypeError, match=r"corpus must expose \.lengths"):
        gp.curriculum.LengthBuckets(edges=(2,), rates=(0.0, 1.0), corpus=object())
