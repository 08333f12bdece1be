"""grainpack.reference.windows: the window loader's PackedStream and MixedStream."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from grainpack.index.mixing import BLOCK_SLOTS, choose_sources, cumulative_probabilities
from grainpack.ingest.writer import write_corpus
from grainpack.reference.windows import MixedStream, PackedStream


def write_flat_shards(directory, shards):
    """The flat-shard format: raw uint16 files plus index.json (name -> token count)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, tokens in shards.items():
        np.asarray(tokens, dtype=np.uint16).tofile(directory / name)
    index = {name: len(tokens) for name, tokens in shards.items()}
    (directory / "index.json").write_text(json.dumps(index))
    return directory


@pytest.fixture(scope="session")
def abc_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("abc_dir")  # read-only: shared by the tests
    # Listed out of order on purpose: the stream is a.bin, c.bin (sorted, empty b.bin skipped)
    # = 0 1 2 ... 9 100 101 102 103 104.
    return write_flat_shards(
        root / "abc",
        {"c.bin": range(100, 105), "b.bin": [], "a.bin": range(10)},
    )


@pytest.fixture(scope="session")
def en_ar(tmp_path_factory):
    root = tmp_path_factory.mktemp("en_ar")  # read-only: shared by the tests
    # en tokens < 1000, ar tokens >= 1000: a row's language is visible in its values.
    en = write_flat_shards(root / "en", {"0.bin": range(0, 40)})
    ar = write_flat_shards(root / "ar", {"0.bin": range(1000, 1030), "1.bin": range(2000, 2013)})
    return {"en": en, "ar": ar}


def test_packed_stream_get_golden(abc_dir):
    # Windows of seq_len + 1 = 3: w0=[0 1 2] w1=[3 4 5] w2=[6 7 8] w3=[9 100 101] (crosses
    # into c.bin) w4=[102 103 104]. Seed 7 orders: epoch 0 [3 2 4 1 0], epoch 1 [4 3 2 1 0].
    stream = PackedStream(abc_dir, 2, 7)
    assert stream.n_windows == 5
    got = [stream.get(k).tolist() for k in range(10)]
    assert got == [
        [9, 100, 101],
        [6, 7, 8],
        [102, 103, 104],
        [3, 4, 5],
        [0, 1, 2],
        [102, 103, 104],
        [9, 100, 101],
        [6, 7, 8],
        [3, 4, 5],
        [0, 1, 2],
    ]
    assert stream.get(0).dtype == np.uint16


def test_packed_stream_drops_the_tail(abc_dir):
    # 15 tokens in windows of 4: 3 windows, tokens 12..14 (102..104) are never read.
    stream = PackedStream(abc_dir, 3, 0)
    assert stream.n_windows == 3
    seen = np.concatenate([stream.get(k) for k in range(3)])
    assert sorted(seen.tolist()) == [*range(10), 100, 101]


def test_packed_stream_next_consumed_epochs_state(abc_dir):
    stream = PackedStream(abc_dir, 2, 7)
    first = [stream.next().tolist() for _ in range(7)]
    assert first == [stream.get(k).tolist() for k in range(7)]
    assert stream.consumed == 7
    assert stream.epochs == 7 / 5
    state = json.loads(json.dumps(stream.state_dict()))
    assert state == {"consumed": 7}
    other = PackedStream(abc_dir, 2, 7)
    other.load_state_dict(state)
    assert other.next().tolist() == stream.next().tolist()


def test_packed_stream_get_many_equals_get_across_epochs(abc_dir):
    stream = PackedStream(abc_dir, 2, 7)
    ks = [9, 0, 4, 5, 13, 1]
    assert stream.get_many(ks).tolist() == [stream.get(k).tolist() for k in ks]


def test_packed_stream_native_corpus_is_documents_concatenated(tmp_path, abc_dir):
    # Same tokens as abc_dir, stored as three native documents across small shards.
    docs = [list(range(4)), list(range(4, 10)), list(range(100, 105))]
    native = tmp_path / "native"
    write_corpus(native, docs, shard_tokens=3)
    a, b = PackedStream(native, 2, 7), PackedStream(abc_dir, 2, 7)
    assert [a.get(k).tolist() for k in range(10)] == [b.get(k).tolist() for k in range(10)]


def test_packed_stream_too_small_raises(abc_dir):
    with pytest.raises(ValueError, match="fewer than one window") as caught:
        PackedStream(abc_dir, 15, 0)  # 15 tokens < 16
    assert isinstance(caught.value, RuntimeError)  # the specification's type too


@pytest.mark.parametrize(
    ("state", "match"),
    [({}, "expected a PackedStream state"), ({"consumed": -1}, "consumed must be >= 0")],
)
def test_packed_stream_load_state_dict_validates(abc_dir, state, match):
    with pytest.raises(ValueError, match=match):
        PackedStream(abc_dir, 2, 0).load_state_dict(state)


def test_packed_stream_pickles(abc_dir):
    stream = PackedStream(abc_dir, 2, 7)
    stream.next()
    clone = pickle.loads(pickle.dumps(stream))
    assert clone.get(3).tolist() == stream.get(3).tolist()
    assert clone.consumed == 1


def _langs(rows):
    return ["ar" if r[0] >= 1000 else "en" for r in rows.tolist()]


def test_mixed_stream_next_batch_golden_choices(en_ar):
    # Seed 0, equal probabilities: slot hashes start e2, 91, 97, 1d, 6e, 63, bd, 63 (hex), so
    # slots 0..7 pick language 1 (ar) exactly when the first hex digit is >= 8.
    mix = MixedStream(en_ar, 4, 0)
    rows, counts = mix.next_batch(8)
    assert _langs(rows) == ["ar", "ar", "ar", "en", "en", "en", "ar", "en"]
    assert counts == {"en": 4, "ar": 4}
    # Occurrences count up per language; stream j is seeded seed + j.
    en, ar = PackedStream(en_ar["en"], 4, 0), PackedStream(en_ar["ar"], 4, 1)
    expected = [ar.get(0), ar.get(1), ar.get(2), en.get(0), en.get(1), en.get(2), ar.get(3)]
    expected.append(en.get(3))
    assert rows.tolist() == np.stack(expected).tolist()
    assert rows.dtype == np.uint16
    assert mix.slot == 8
    assert mix.stats() == {"en": {"windows": 4, "epochs": 0.5}, "ar": {"windows": 4, "epochs": 0.5}}


def test_mixed_stream_rank_batch_golden(en_ar):
    # World 3, rank 1 owns global rows 1, 4, 7 of the 8 above: ar, en, en.
    mix = MixedStream(en_ar, 4, 0)
    rows, counts = mix.rank_batch(8, 1, 3)
    assert _langs(rows) == ["ar", "en", "en"]
    assert counts == {"en": 2, "ar": 1}  # only the rank's own rows are counted
    # Every rank advanced every stream through all 8 slots.
    assert mix.state_dict() == {
        "slot": 8,
        "streams": {"en": {"consumed": 4}, "ar": {"consumed": 4}},
    }


@pytest.mark.parametrize(
    ("world", "n_global"),
    [(1, 7), (2, 8), (3, 8), (4, 10), (5, 3)],  # including a rank with no rows (5, 3)
)
def test_mixed_stream_rank_batches_interleave_to_next_batch(en_ar, world, n_global):
    probs = [0.3, 0.7]
    reference = MixedStream(en_ar, 4, 5, probs)
    reference.next_batch(13)  # start mid-stream
    ranks = [MixedStream(en_ar, 4, 5, probs) for _ in range(world)]
    for mix in ranks:
        mix.next_batch(13)
    for _ in range(3):  # several steps: streams roll over into new epochs
        rows, counts = reference.next_batch(n_global)
        parts = [m.rank_batch(n_global, r, world) for r, m in enumerate(ranks)]
        interleaved = np.empty_like(rows)
        for r, (part, _) in enumerate(parts):
            interleaved[r::world] = part
        assert np.array_equal(interleaved, rows)
        assert {k: sum(c[k] for _, c in parts) for k in counts} == counts
        assert all(m.state_dict() == reference.state_dict() for m in ranks)


def test_mixed_stream_draw_matches_next_batch(en_ar):
    a, b = MixedStream(en_ar, 4, 2), MixedStream(en_ar, 4, 2)
    rows, _ = a.next_batch(20)
    for i in range(20):
        lang, occ = b.draw()
        assert rows[i].tolist() == b.streams[lang].get(occ).tolist()
    assert a.state_dict() == b.state_dict()


def test_mixed_stream_state_dict_json_round_trip_resumes(en_ar):
    mix = MixedStream(en_ar, 4, 3, {"en": 0.25, "ar": 0.75})
    mix.next_batch(11)
    state = json.loads(json.dumps(mix.state_dict()))
    expected, _ = mix.next_batch(9)
    fresh = MixedStream(en_ar, 4, 3, [0.25, 0.75])
    fresh.load_state_dict(state)
    got, _ = fresh.next_batch(9)
    assert np.array_equal(got, expected)


def test_mixed_stream_skip_to_equals_consuming(en_ar):
    # Cross block boundaries (BLOCK_SLOTS) and land mid-block, then keep going.
    probs = (0.4, 0.6)
    mix = MixedStream(en_ar, 4, 9, probs)
    mix.next_batch(5)
    target = 2 * BLOCK_SLOTS + 777
    mix.skip_to(target)
    choices = choose_sources(9, 0, target, cumulative_probabilities(probs))
    assert mix.slot == target
    assert [mix.streams[k].consumed for k in ("en", "ar")] == np.bincount(choices).tolist()
    mix.skip_to(target + 10)  # a short skip past the cache
    walked = MixedStream(en_ar, 4, 9, probs)
    walked.load_state_dict(mix.state_dict())
    assert np.array_equal(mix.next_batch(6)[0], walked.next_batch(6)[0])
    choices = choose_sources(9, 0, target + 16, cumulative_probabilities(probs))
    assert [mix.streams[k].consumed for k in ("en", "ar")] == np.bincount(choices).tolist()


def test_mixed_stream_sums_float32_probs_in_float32_as_the_seed(tmp_path):
    # The seed sums `acc = 0.0; acc += p`: under NumPy 2 np.float32 values keep the sum in
    # float32 and `u < acc` compares in float32. Slot 4 of seed 11 has u = 0.54672472178...,
    # below the float64 sum of the first two (0.54672473669...) but not below their float32
    # sum: 'y' with Python floats, 'z' with float32 values.
    langs = {k: write_flat_shards(tmp_path / k, {"0.bin": range(i, i + 40)})
             for i, k in ((0, "x"), (100, "y"), (200, "z"))}  # fmt: skip
    a, b = np.float32(0.25), np.float32(0.29672474)
    probs32 = [a, b, np.float32(1) - a - b]
    mix = MixedStream(langs, 3, 11, probs32)
    assert [mix.draw()[0] for _ in range(8)] == ["z", "x", "x", "z", "z", "z", "x", "x"]
    floats = MixedStream(langs, 3, 11, [float(p) for p in probs32])
    assert [floats.draw()[0] for _ in range(8)][4] == "y"
    rows, counts = MixedStream(langs, 3, 11, probs32).next_batch(8)
    assert counts == {"x": 4, "y": 0, "z": 4}
    assert rows[:, 0].tolist() == [204, 24, 12, 216, 224, 236, 36, 0]  # the seed code's rows
    skipped = MixedStream(langs, 3, 11, probs32)
    skipped.skip_to(8)
    assert skipped.state_dict() == mix.state_dict()


def test_mixed_stream_skip_backwards_raises(en_ar):
    mix = MixedStream(en_ar, 4, 0)
    mix.skip_to(10)
    with pytest.raises(ValueError, match="only move forward") as caught:
        mix.skip_to(9)
    assert isinstance(caught.value, AssertionError)  # the specification asserts


@pytest.mark.parametrize(
    ("probs", "match"),
    [
        ([0.6, 0.6], "sum to 1"),  # sums to 1.2
        ([1.0], "one value per source"),  # wrong length
        ([-0.5, 1.5], ">= 0"),  # negative
        ({"en": 0.5, "fr": 0.5}, "exactly the languages"),  # wrong names
    ],
)
def test_mixed_stream_rejects_bad_probs(en_ar, probs, match):
    with pytest.raises(ValueError, match=match) as caught:
        MixedStream(en_ar, 4, 0, probs)
    # the specification asserts the sum; the names of a mapping are grainpack's own
    assert isinstance(caught.value, AssertionError) == (match != "exactly the languages")


@pytest.mark.parametrize("empty", [[], (), {}])
def test_mixed_stream_empty_probs_mean_equal(en_ar, empty):
    # the seed's `self.probs = probs or [1.0 / len(langs)] * len(langs)`
    assert MixedStream(en_ar, 4, 0, empty).probs == [0.5, 0.5]


def test_mixed_stream_load_state_dict_validates_before_changing(en_ar):
    mix = MixedStream(en_ar, 4, 0)
    with pytest.raises(ValueError, match="unknown languages"):
        mix.load_state_dict({"slot": 3, "streams": {"fr": {"consumed": 1}}})
    with pytest.raises(ValueError, match="consumed must be >= 0"):
        mix.load_state_dict({"slot": 3, "streams": {"en": {"consumed": 2}, "ar": {"consumed": -1}}})
    assert mix.state_dict() == {
        "slot": 0,
        "streams": {"en": {"consumed": 0}, "ar": {"consumed": 0}},
    }


def test_mixed_stream_single_language_always_chosen(en_ar):
    mix = MixedStream({"ar": en_ar["ar"]}, 4, 1)
    rows, counts = mix.next_batch(12)  # 43 tokens -> 8 windows: rolls into epoch 1
    assert counts == {"ar": 12}
    assert mix.stats() == {"ar": {"windows": 12, "epochs": 1.5}}
    stream = PackedStream(en_ar["ar"], 4, 1)
    assert rows.tolist() == [stream.get(k).tolist() for k in range(12)]


def test_mixed_stream_empty_batch(en_ar):
    mix = MixedStream(en_ar, 4, 0)
    assert mix.next_batch(0)[0].shape == (0, 5)
    assert mix.rank_batch(1, 1, 2)[0].shape == (0, 5)
    assert mix.slot == 1


def test_mixed_stream_pickles_and_continues(en_ar):
    mix = MixedStream(en_ar, 4, 6)
    mix.skip_to(3 * BLOCK_SLOTS)
    clone = pickle.loads(pickle.dumps(mix))
    assert np.array_equal(clone.next_batch(5)[0], mix.next_batch(5)[0])
    assert clone.state_dict() == mix.state_dict()


def test_packed_stream_has_the_specification_attributes(abc_dir, en_ar):
    stream = PackedStream(abc_dir, 4, 0)
    assert stream.paths == [abc_dir / "a.bin", abc_dir / "c.bin"]  # empty b.bin skipped
    assert stream.lens.tolist() == [10, 5] and stream.cum.tolist() == [0, 10, 15]
    assert (stream.lens.dtype, stream.cum.dtype) == (np.int64, np.int64)
    assert (stream.lang, stream.total_tokens, stream.n_windows) == (None, 15, 3)
    mix = MixedStream(en_ar, 4, 0)
    assert [s.lang for s in mix.streams.values()] == ["en", "ar"]
    assert mix.streams["ar"].cum.tolist() == [0, 30, 43]
