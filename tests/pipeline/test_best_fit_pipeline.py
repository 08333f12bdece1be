"""PipelineConfig(packing="best_fit") end to end: batches equal the packed spans' tokens,
P in {1, 2, 3} give the same global batches, restores on another process count continue
exactly (mid-window, at a window boundary, at an epoch boundary), mixtures, provenance,
accounting, the compact layout, workers, and the config (fingerprint, to_dict/from_dict)."""

from __future__ import annotations

import numpy as np
import pytest

import grainpack as gp
from grainpack.index.bestfit import BestFitRows, best_fit_rows
from grainpack.pipeline.batches import PipelineBatches

BLOCK, PAD, EOS = 15, 0, 1


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """Two sources of 300 and 200 documents of 0-39 tokens, a tenth 40-119 tokens long."""
    root = tmp_path_factory.mktemp("bestfit")
    paths, docs = {}, {}
    for k, (name, n) in enumerate((("en", 300), ("fr", 200))):
        rng = np.random.default_rng(10 + k)
        lengths = rng.integers(0, 40, size=n)
        lengths[rng.integers(0, n, size=n // 10)] = rng.integers(40, 120, size=n // 10)
        docs[name] = [rng.integers(2, 500, size=m) for m in lengths]
        paths[name] = str(root / name)
        gp.write_corpus(paths[name], docs[name], vocab_size=500, shard_tokens=2_000)
    return paths, docs


BLOCKED = gp.BlockedOrder(block_docs=8, window_blocks=4)


def config(paths, **kw):
    fields = dict(
        sources=paths,
        block=BLOCK,
        global_batch_size=6,
        seed=5,
        boundary_id=EOS,
        pad_id=PAD,
        packing="best_fit",
    )
    return gp.PipelineConfig(**(fields | kw))


def take(it, n):
    return [next(it) for _ in range(n)]


def expected_rows(batches: PipelineBatches, docs, step: int) -> np.ndarray:
    """The rows of global batch ``step`` built from the index's spans and the documents."""
    cfg = batches.config
    size, width = cfg.global_batch_size, cfg.block + 1
    chosen, occurrences = batches.mixer.draws(step * size, (step + 1) * size)
    out = np.full((size, width), PAD, dtype=np.int64)
    for k in range(size):
        j = int(chosen[k])
        name = list(cfg.sources)[j]
        rows = batches.rows(j)
        epochs, within = rows.locate(occurrences[k : k + 1])
        s = rows.spans(int(epochs[0]), within)
        for doc, start, length, offset, bnd in zip(
            s.document.tolist(), s.start.tolist(), s.length.tolist(), s.offset.tolist(),
            s.boundary.tolist(),
        ):  # fmt: skip
            out[k, offset : offset + length] = docs[name][doc][start : start + length]
            if bnd:
                out[k, offset + length] = EOS
    return out


def tokens(batch) -> np.ndarray:
    return np.concatenate([batch["inputs"], batch["targets"][:, -1:]], axis=1)


@pytest.mark.parametrize("order", ["exact", BLOCKED], ids=["exact", "blocked"])
def test_batches_hold_the_packed_documents(corpora, order):
    paths, docs = corpora
    cfg = config(paths, order=order, weights={"en": 0.6, "fr": 0.4})
    batches = PipelineBatches(cfg)
    it = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    for step in range(40):  # past the end of epoch 0 of both sources
        batch = next(it)
        want = expected_rows(batches, docs, step)
        np.testing.assert_array_equal(tokens(batch), want, err_msg=f"step {step}")
        # segments restart at each document, padding is segment 0 and masked out
        real = want != PAD
        np.testing.assert_array_equal(batch["loss_mask"], real[:, 1:].astype(np.int32))
        assert (batch["segment_ids"][~real[:, :-1]] == 0).all()
        assert (batch["positions"][batch["segment_ids"] > 0] >= 0).all()
    assert all(isinstance(batches.rows(j), BestFitRows) for j in range(2))


@pytest.mark.parametrize("order", ["exact", BLOCKED], ids=["exact", "blocked"])
def test_world_size_independence(corpora, order):
    paths, _ = corpora
    cfg = config(paths, order=order, provenance=True)
    reference = take(iter(gp.make_dataset(cfg, process_index=0, process_count=1)), 30)
    for count in (2, 3):
        per_process = [
            take(iter(gp.make_dataset(cfg, process_index=p, process_count=count)), 30)
            for p in range(count)
        ]
        for t in range(30):
            for key, value in reference[t].items():
                interleaved = np.empty_like(value)
                for p in range(count):
                    interleaved[p::count] = per_process[p][t][key]
                np.testing.assert_array_equal(interleaved, value, err_msg=f"{key} step {t}")


def boundaries(cfg) -> dict[str, int]:
    """Steps that start mid-window, exactly at a window boundary (the first such one in
    epochs 0..2) and at the step holding source en's first epoch boundary."""
    rows = PipelineBatches(cfg).rows(0)
    size = cfg.global_batch_size
    starts = [
        rows.window_anchor(epoch, w).occurrence
        for epoch in range(3)
        for w in range(1, rows.num_windows)
    ]
    window = next(r // size for r in starts if r % size == 0)
    inside = (starts[2] + starts[3]) // 2
    return {"mid-window": inside // size, "window": window, "epoch": rows.rows_in_epoch(0) // size}


@pytest.mark.parametrize("at", ["mid-window", "window", "epoch"])
def test_restore_on_another_process_count_continues_exactly(corpora, at):
    paths, _ = corpora
    cfg = config({"en": paths["en"]}, order=BLOCKED, provenance=True)
    step = boundaries(cfg)[at]
    assert step == {"mid-window": 33, "window": 102, "epoch": 84}[at]  # pinned
    single = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    take(single, step)
    state = single.get_state()
    expected = take(single, 3)
    for count in (2, 3):
        its = [
            iter(gp.make_dataset(cfg, process_index=p, process_count=count)) for p in range(count)
        ]
        for it in its:
            it.set_state(state)
        for t in range(3):
            got = [next(it) for it in its]
            for key, value in expected[t].items():
                for p in range(count):
                    np.testing.assert_array_equal(value[p::count], got[p][key], err_msg=key)


def test_provenance_names_the_packed_documents(corpora):
    paths, docs = corpora
    cfg = config({"en": paths["en"]}, provenance=True)
    batch = next(iter(gp.make_dataset(cfg, process_index=0, process_count=1)))
    rows = tokens(batch)
    for k in range(len(rows)):
        segments = batch["segment_document"][k]
        for seg, (doc, offset) in enumerate(zip(segments, batch["segment_offset"][k])):
            if doc < 0:
                break
            where = np.flatnonzero(batch["segment_ids"][k] == seg + 1)
            if len(where) == 0:
                continue
            got = rows[k, where]
            text = np.append(docs["en"][doc], EOS)[offset : offset + len(where)]
            np.testing.assert_array_equal(got, text)


def test_accounting_counts_real_tokens_and_padding(corpora):
    paths, docs = corpora
    cfg = config({"en": paths["en"]})
    batches = PipelineBatches(cfg)
    epoch_rows = batches.rows(0).rows_in_epoch(0)
    steps = epoch_rows // cfg.global_batch_size
    account = gp.mixing.mixture_accounting(cfg, steps)["en"]
    it = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
    real = sum(int((tokens(b) != PAD).sum()) for b in take(it, steps))
    assert account.real_tokens == real  # pad 0 is no document token (they are 2..499)
    whole = gp.mixing.mixture_accounting(cfg, -(-epoch_rows // cfg.global_batch_size))["en"]
    assert whole.epoch == 1 or whole.real_tokens == sum(len(d) + 1 for d in docs["en"])


def test_compact_layout_expands_to_the_full_one(corpora):
    paths, _ = corpora
    full = take(iter(gp.make_dataset(config(paths), process_index=0, process_count=1)), 12)
    compact_cfg = config(paths, layout="compact")
    compact = take(iter(gp.make_dataset(compact_cfg, process_index=0, process_count=1)), 12)
    for a, b in zip(full, compact):
        expanded = gp.expand(b)
        for key in ("inputs", "targets", "segment_ids", "positions", "loss_mask"):
            np.testing.assert_array_equal(np.asarray(expanded[key]), a[key], err_msg=key)


@pytest.mark.slow
def test_workers_give_the_same_batches(corpora):
    paths, _ = corpora
    cfg = config(paths, order=BLOCKED)
    alone = take(iter(gp.make_dataset(cfg, process_index=0, process_count=1)), 10)
    workers = take(iter(gp.make_dataset(cfg, process_index=0, process_count=1, worker_count=2)), 10)
    for a, b in zip(alone, workers):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


def test_max_segments_holds_in_batches(corpora):
    paths, _ = corpora
    cfg = config(paths, max_segments=2)
    for batch in take(iter(gp.make_dataset(cfg, process_index=0, process_count=1)), 20):
        assert batch["segment_ids"].max() <= 2


def test_config_packing_fields_and_fingerprint(corpora):
    paths, _ = corpora
    concat = gp.PipelineConfig(sources=paths, block=BLOCK, global_batch_size=6)
    assert "packing" not in concat.description()  # saved checkpoints keep their fingerprint
    best = config(paths, max_segments=4)
    assert best.description()["packing"] == "best_fit"
    assert best.description()["max_segments"] == 4
    assert gp.PipelineConfig.from_dict(best.to_dict()) == best
    assert gp.PipelineConfig.from_dict(concat.to_dict()) == concat
    with pytest.raises(ValueError, match="packing='best_fit' packs documents"):
        gp.PipelineConfig(sources=paths, block=8, global_batch_size=4, unit="windows",
                          packing="best_fit")  # fmt: skip
    with pytest.raises(ValueError, match="max_segments=3 applies to packing='best_fit' only"):
        gp.PipelineConfig(sources=paths, block=8, global_batch_size=4, max_segments=3)
    with pytest.raises(ValueError, match="packing must be 'concat'"):
        gp.PipelineConfig(sources=paths, block=8, global_batch_size=4, packing="bfd")
    with pytest.raises(ValueError, match="max_segments"):
        config(paths, max_segments=0)


def test_a_state_saved_in_concat_is_refused_in_best_fit(corpora):
    paths, _ = corpora
    concat = gp.PipelineConfig(sources=paths, block=BLOCK, global_batch_size=6, boundary_id=EOS)
    it = iter(gp.make_dataset(concat, process_index=0, process_count=1))
    take(it, 2)
    state = it.get_state()
    with pytest.raises(ValueError, match="another pipeline config"):
        iter(gp.make_dataset(config(paths), process_index=0, process_count=1)).set_state(state)


def test_compiled_placement_equals_the_reference():
    compiled = pytest.importorskip("grainpack.pipeline.compiled")
    rng = np.random.default_rng(0)
    for trial in range(300):
        width, n = int(rng.integers(1, 80)), int(rng.integers(0, 400))
        sizes = rng.integers(1, width + 1, size=n)
        if trial % 2:
            sizes = np.sort(sizes)[::-1].copy()
        cap = int(rng.integers(0, 5))
        want = best_fit_rows(sizes, width, cap)
        got = compiled.best_fit(sizes.astype(np.int64), width, cap)
        assert got[1] == want[1] and np.array_equal(got[0], want[0]), trial


def keep_even(order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """A selector: the even documents, in the order given."""
    return order[order % 2 == 0]


def test_schedules_and_selectors_pack_the_kept_documents(corpora):
    paths, docs = corpora
    weights = [(0, {"en": 0.9, "fr": 0.1}), gp.Stage(10, {"en": 0.2, "fr": 0.8}, ramp=5)]
    cfg = config(paths, weights=weights, sequence_selector=keep_even, provenance=True)
    batches = PipelineBatches(cfg)
    reference = take(iter(gp.make_dataset(cfg, process_index=0, process_count=1)), 30)
    halves = [
        take(iter(gp.make_dataset(cfg, process_index=p, process_count=2)), 30) for p in (0, 1)
    ]
    for t, batch in enumerate(reference):
        np.testing.assert_array_equal(tokens(batch), expected_rows(batches, docs, t))
        for key, value in batch.items():
            for p in (0, 1):
                np.testing.assert_array_equal(value[p::2], halves[p][t][key], err_msg=key)
        named = batch["segment_document"][batch["segment_document"] >= 0]
        assert (named % 2 == 0).all()  # only the kept documents
    rows = batches.rows(0)
    n = rows.rows_in_epoch(0)
    assert sorted(set(rows.spans(0, np.arange(n)).document.tolist())) == [
        d for d in range(len(docs["en"])) if d % 2 == 0 and len(docs["en"][d]) + 1 > 0
    ]


def test_show_step_names_the_packed_documents(corpora):
    paths, _ = corpora
    cfg = config({"en": paths["en"]})
    shown = gp.pipeline.describe_step(cfg, 3, process_count=2)
    batch = take(
        iter(
            gp.make_dataset(
                config({"en": paths["en"]}, provenance=True), process_index=0, process_count=1
            )
        ),
        4,
    )[3]
    for k, row in enumerate(shown["rows"]):
        documents = [segment["document"] for segment in row["segments"]]
        named = batch["segment_document"][k]
        assert documents == named[named >= 0].tolist()
