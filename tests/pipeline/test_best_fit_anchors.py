"""Window anchors of packing="best_fit" in the blocked order: states carry them (version 3),
a restore on another process count starts from them and prepares no earlier window, an edited
anchor is refused, a state without them restores by counting, running forward prepares each
window once (no epoch is counted at once), and workers get them."""

from __future__ import annotations

import collections
import json
import pickle
import re
import time

import numpy as np
import pytest

import grainpack as gp
from grainpack.index.bestfit import BestFitRows
from grainpack.index.blocked import _prefetcher
from grainpack.pipeline.batches import PipelineBatches
from grainpack.pipeline.state import IteratorState, state_check

BLOCKED = gp.BlockedOrder(block_docs=8, window_blocks=4)


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    """Two sources of 300 and 200 documents of 0-39 tokens, a tenth 40-119 tokens long:
    windows of 32 documents, 10 and 7 per epoch."""
    root = tmp_path_factory.mktemp("anchors")
    paths = {}
    for k, (name, n) in enumerate((("en", 300), ("fr", 200))):
        rng = np.random.default_rng(10 + k)
        lengths = rng.integers(0, 40, size=n)
        lengths[rng.integers(0, n, size=n // 10)] = rng.integers(40, 120, size=n // 10)
        paths[name] = str(root / name)
        docs = [rng.integers(2, 500, size=m) for m in lengths]
        gp.write_corpus(paths[name], docs, vocab_size=500, shard_tokens=2_000)
    return paths


def config(paths, **kw):
    fields = dict(
        sources=paths,
        block=15,
        global_batch_size=6,
        seed=5,
        boundary_id=1,
        pad_id=0,
        packing="best_fit",
        order=BLOCKED,
        weights={"en": 0.6, "fr": 0.4},
        provenance=True,
    )
    return gp.PipelineConfig(**(fields | kw))


def iterators(cfg, count):
    return [iter(gp.make_dataset(cfg, process_index=p, process_count=count)) for p in range(count)]


def take(it, n):
    return [next(it) for _ in range(n)]


@pytest.fixture(scope="module")
def reference(paths):
    """Global batches 0..149 of one process."""
    return take(iterators(config(paths), 1)[0], 150)


@pytest.fixture
def prepared(monkeypatch):
    """(source, epoch, window) of every window packed or counted, in order (from the test's
    start: the background work of the tests before it is done first)."""
    settled([])
    calls = []
    original = BestFitRows._documents

    def recording(self, epoch, window):
        calls.append((self.name, epoch, window))
        return original(self, epoch, window)

    monkeypatch.setattr(BestFitRows, "_documents", recording)
    return calls


def settled(calls):
    """``calls`` once the background thread's packing ahead is done."""
    _prefetcher().submit(lambda: None).result()
    return list(calls)


def assert_continues(reference, step, its):
    count = len(its)
    for t in range(step, step + 3):
        got = [next(it) for it in its]
        for key, value in reference[t].items():
            for p in range(count):
                np.testing.assert_array_equal(value[p::count], got[p][key], err_msg=f"{key} {t}")


@pytest.mark.parametrize(
    ("step", "anchors"),
    [
        # batch 39 inside en's window 2 (rows 116..172) and fr's window 1
        (40, [[0, 2, 116, 116, 1838], [0, 1, 49, 49, 780]]),
        # en's rows before step 47 end at its window 3 (row 173): the next batch starts it
        (47, [[0, 2, 116, 116, 1838], [0, 2, 104, 104, 1647]]),
        # batch 47 starts at en's window 3
        (48, [[0, 3, 173, 173, 2731], [0, 2, 104, 104, 1647]]),
        # batch 141 in en's last window of epoch 0; the next one starts epoch 1
        (142, [[0, 9, 481, 481, 7603], [1, 0, 326, 0, 5152]]),
        # batch 142 starts en's epoch 1 (row 508)
        (143, [[1, 0, 508, 0, 8033], [1, 0, 326, 0, 5152]]),
    ],
    ids=["mid-window", "at-window-start", "window-start-before", "epoch-before", "epoch"],
)
def test_a_restore_from_anchors_continues_exactly_on_another_process_count(
    paths, reference, prepared, step, anchors
):
    cfg = config(paths)
    saved = iterators(cfg, 2)
    for it in saved:
        take(it, step)
    states = [it.get_state() for it in saved]
    assert [s["version"] for s in states] == [3, 3]
    assert (
        states[0]["anchors"] == states[1]["anchors"] == anchors
    )  # global: the same on every process
    restored = iterators(cfg, 3)
    settled(prepared)  # the saved iterators' packing ahead is not the restore's
    del prepared[:]
    for p, it in enumerate(restored):
        it.set_state(states[p % 2])
    assert_continues(reference, step, restored)
    start = {name: (a[0], a[1]) for name, a in zip(cfg.sources, anchors)}
    windows = settled(prepared)
    assert windows and all((e, w) >= start[name] for name, e, w in windows)  # none before


def test_an_edited_anchor_is_refused(paths):
    cfg = config(paths)
    it = iterators(cfg, 1)[0]
    take(it, 47)
    state = it.get_state()
    edited = {**state, "anchors": [[0, 3, 116, 116, 1838], state["anchors"][1]]}
    message = (
        "corrupt grainpack iterator state: field anchors[0][1] (window of source 'en') is 3, "
        "but the check value was computed with 2 (one bit or digit changed)"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        iterators(cfg, 1)[0].set_state(edited)
    # the same edit with its check value recomputed: the batch located from it differs
    forged = {**edited, "check": state_check(edited)}
    with pytest.raises(ValueError, match="resume verification failed: batch 46 recomputed"):
        iterators(cfg, 1)[0].set_state(forged)
    # an anchor past the rows the source gave (180 > 174) is no anchor of this state
    past = {**state, "anchors": [[0, 3, 180, 180, 2731], state["anchors"][1]]}
    past["check"] = state_check(past)
    with pytest.raises(ValueError, match=r"corrupt grainpack iterator state .*wrong: anchors"):
        iterators(cfg, 1)[0].set_state(past)


def test_a_state_without_anchors_restores_by_counting(paths, reference, prepared):
    cfg = config(paths)
    it = iterators(cfg, 1)[0]
    take(it, 143)
    state = it.get_state()
    old = {k: v for k, v in state.items() if k not in ("anchors", "check")} | {"version": 2}
    old["check"] = state_check(old)
    restored = iterators(cfg, 2)
    del prepared[:]
    for r in restored:
        r.set_state(old)
    assert_continues(reference, 143, restored)
    windows = settled(prepared)
    assert ("en", 0, 0) in windows and ("fr", 0, 0) in windows  # counted from the start


@pytest.mark.parametrize("background", ["prompt", "late"])
def test_running_forward_prepares_each_window_once(paths, prepared, monkeypatch, background):
    """Also when the background thread packs each window 50 ms late (a busy machine): the
    loop packs a window handed to it that it needs first, and the thread then skips it
    (before, the loop counted it and packed it, and the thread packed it again)."""
    if background == "late":
        ahead = BestFitRows._ahead
        monkeypatch.setattr(
            BestFitRows, "_ahead", lambda self, *a: time.sleep(0.05) or ahead(self, *a)
        )
    batches = PipelineBatches(config(paths))
    for step in range(200):  # past the end of epoch 0 of both sources (steps 142 and 139)
        batches.packed_steps(step, 0)  # the rows of each batch, one at a time
        batches.window_anchors_at(step + 1)  # and the anchors of each state
    windows = settled(prepared)
    assert max(collections.Counter(windows).values()) == 1  # no epoch counted, then packed
    en = [(e, w) for name, e, w in windows if name == "en"]
    fr = [(e, w) for name, e, w in windows if name == "fr"]
    assert en == [(0, w) for w in range(10)] + [(1, w) for w in range(5)]
    assert fr == [(0, w) for w in range(7)] + [(1, w) for w in range(4)]


def test_workers_get_the_anchors(paths):
    cfg = config(paths)
    it = iterators(cfg, 1)[0]
    take(it, 48)
    state = it.get_state()
    restored = iterators(cfg, 1)[0]
    restored.set_state(state)
    batches = pickle.loads(pickle.dumps(restored._batches))  # as a Grain worker gets it
    assert batches.window_anchors == tuple(tuple(a) for a in state["anchors"])
    assert batches.rows(0).anchor_of(173) == (0, 3, 173, 173, 2731)


@pytest.mark.slow
def test_a_restore_with_workers_continues_exactly(paths, reference):
    cfg = config(paths)
    it = iterators(cfg, 1)[0]
    take(it, 143)
    state = it.get_state()
    restored = iter(gp.make_dataset(cfg, process_index=0, process_count=1, worker_count=2))
    restored.set_state(state)
    try:
        assert_continues(reference, 143, [restored])
    finally:
        restored.close()


def test_orbax_saves_and_restores_the_anchors(paths, reference, tmp_path):
    ocp = pytest.importorskip("orbax.checkpoint")
    cfg = config(paths)
    it = iterators(cfg, 1)[0]
    take(it, 48)
    options = ocp.CheckpointManagerOptions(create=True)
    with ocp.CheckpointManager(tmp_path / "ckpt", options=options) as manager:
        manager.save(48, args=ocp.args.Composite(data=gp.CheckpointSave(it)))
        manager.wait_until_finished()
    saved = json.loads((tmp_path / "ckpt/48/data/process_0-of-1.json").read_text())
    assert saved["anchors"] == [[0, 3, 173, 173, 2731], [0, 2, 104, 104, 1647]]
    fresh = iterators(cfg, 2)
    with ocp.CheckpointManager(tmp_path / "ckpt", options=options) as manager:
        for f in fresh:
            manager.restore(48, args=ocp.args.Composite(data=gp.CheckpointRestore(f)))
    assert_continues(reference, 48, fresh)


def test_a_version_3_state_reads_and_writes_back_the_same_json():
    state = IteratorState(
        step=3, process_index=0, process_count=1, fingerprint=7, digest=9, counts=(5, 4),
        anchors=((0, 1, 2, 2, 40), (0, 0, 0, 0, 0)),
    )  # fmt: skip
    saved = {
        "version": 3, "step": 3, "process_index": 0, "process_count": 1, "fingerprint": 7,
        "digest": 9, "counts": [5, 4], "anchors": [[0, 1, 2, 2, 40], [0, 0, 0, 0, 0]],
        "check": 6812576329778475142,
    }  # fmt: skip
    assert state.to_dict() == saved
    assert IteratorState.from_dict(json.loads(json.dumps(saved))) == state
    for anchors in ([[0, 1, 2, 2, 40]], [[0, 1, 2, 3, 40], [0] * 5], [[0, 1, 6, 2, 40], [0] * 5]):
        # one per source; its row <= its occurrence; its occurrence <= the source's count
        with pytest.raises(ValueError, match=r"corrupt grainpack iterator state .*wrong: anchors"):
            IteratorState.from_dict({**saved, "anchors": anchors})
