"""Tests for grainpack.order: splitmix64, document orders, rank shards, window orders."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from grainpack.index.hashing import splitmix64, splitmix64_array
from grainpack.index.orders import (
    check_selected_order,
    global_document_order,
    shard_documents_for_rank,
    window_permutation,
)

GOLDEN_GAMMA = 0x9E3779B97F4A7C15


def test_splitmix64_reference_sequence_seed_zero():
    # Vigna's splitmix64.c seeded 0: output k hashes state k * gamma. Published first outputs.
    states = [k * GOLDEN_GAMMA % 2**64 for k in range(3)]
    assert [splitmix64(s) for s in states] == [
        0xE220A8397B1DCDAF,
        0x6E789E6AA1B965F4,
        0x06C45D188009454F,
    ]


def test_splitmix64_reference_sequence_seed_1234567():
    # The Rosetta Code "Pseudo-random numbers/Splitmix64" task, seed 1234567.
    outputs = [splitmix64(1234567 + k * GOLDEN_GAMMA) for k in range(5)]
    assert outputs == [
        6457827717110365317,
        3203168211198807973,
        9817491932198370423,
        4593380528125082431,
        16408922859458223821,
    ]


@pytest.mark.parametrize(
    ("x", "same_as"),
    [
        (2**64, 0),  # wraps like the window loader's masking
        (-1, 2**64 - 1),  # negative ints are reduced mod 2**64
        (3 * 2**64 + 5, 5),  # far above 2**64
    ],
)
def test_splitmix64_reduces_modulo_2_64(x, same_as):
    assert splitmix64(x) == splitmix64(same_as)


@pytest.mark.parametrize("x", [1.5, 1.9999, "1"])
def test_splitmix64_refuses_what_is_not_an_int_as_the_seed_does(x):
    with pytest.raises(TypeError):  # int(x) made 1.5 and 1.9999 the hash of 1
        splitmix64(x)


def test_splitmix64_array_matches_scalar_on_edges():
    xs = [0, 1, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1, GOLDEN_GAMMA]
    out = splitmix64_array(np.array(xs, dtype=np.uint64))
    assert out.dtype == np.uint64
    assert out.tolist() == [splitmix64(x) for x in xs]


def test_splitmix64_array_signed_input_wraps_and_is_not_modified():
    x = np.array([-1, 0, 5], dtype=np.int64)
    out = splitmix64_array(x)
    assert out.tolist() == [splitmix64(2**64 - 1), splitmix64(0), splitmix64(5)]
    assert x.tolist() == [-1, 0, 5]


def test_splitmix64_array_rejects_floats():
    with pytest.raises(TypeError, match="integer array"):
        splitmix64_array(np.array([1.0]))


@given(st.lists(st.integers(0, 2**64 - 1), max_size=50))
def test_splitmix64_array_equals_scalar(xs):
    out = splitmix64_array(np.array(xs, dtype=np.uint64))
    assert out.tolist() == [splitmix64(x) for x in xs]


def test_global_document_order_golden():
    # Pins numpy's SeedSequence([seed, epoch, 0xD0C5]) + PCG64 permutation (determinism
    # contract: update only with a versioned, deliberate change of order).
    assert global_document_order(10, seed=0, epoch=0).tolist() == [0, 2, 6, 8, 9, 7, 5, 4, 3, 1]
    assert global_document_order(10, seed=0, epoch=1).tolist() == [3, 5, 8, 9, 4, 2, 6, 1, 7, 0]


@given(st.integers(0, 300), st.integers(0, 2**40), st.integers(0, 1000))
def test_global_document_order_is_int64_permutation(n, seed, epoch):
    order = global_document_order(n, seed=seed, epoch=epoch)
    assert order.dtype == np.int64
    assert np.array_equal(np.sort(order), np.arange(n))


def test_global_document_order_seed_and_epoch_are_mixed_not_added():
    a = global_document_order(50, seed=1, epoch=0)
    b = global_document_order(50, seed=0, epoch=1)
    assert not np.array_equal(a, b)
    assert np.array_equal(a, global_document_order(50, seed=1, epoch=0))


def test_global_document_order_selector_filters_and_reorders():
    def longest_first_evens(order, seed, epoch):
        return np.sort(order[order % 2 == 0])[::-1]

    out = global_document_order(7, seed=3, epoch=2, sequence_selector=longest_first_evens)
    assert out.tolist() == [6, 4, 2, 0]
    assert out.dtype == np.int64


def test_global_document_order_selector_receives_seed_and_epoch():
    seen = []

    def spy(order, seed, epoch):
        seen.append((seed, epoch))
        return order

    global_document_order(3, seed=11, epoch=4, sequence_selector=spy)
    assert seen == [(11, 4)]


@pytest.mark.parametrize(
    ("selected", "match"),
    [
        ([0, 5], r"outside \[0, 3\).*\[5\]"),  # out of range
        ([-1], r"outside"),  # negative
        ([[0, 1]], "1-D"),  # wrong rank
        ([0.5], "integer ids"),  # floats
    ],
)
def test_global_document_order_rejects_bad_selector_result(selected, match):
    with pytest.raises(ValueError, match=match) as info:
        global_document_order(3, seed=0, epoch=0, sequence_selector=lambda o, s, e: selected)
    assert "must return document ids it was given" in str(info.value)


def test_global_document_order_lets_a_selector_repeat_documents_but_the_pipeline_does_not():
    # the specification: a selector "may reorder, filter, or otherwise transform" the order
    def twice(order, seed, epoch):
        return np.concatenate([order, order[:2]])

    base = global_document_order(4, seed=0, epoch=0)
    order = global_document_order(4, seed=0, epoch=0, sequence_selector=twice)
    assert order.tolist() == [*base.tolist(), *base[:2].tolist()]
    with pytest.raises(ValueError, match=r"repeats document ids \[\d, \d\].*each once"):
        check_selected_order(order, 4)  # what the pipeline's epochs (one visit each) check


def test_check_selected_order_accepts_empty_and_uint():
    assert check_selected_order([], 0).tolist() == []
    assert check_selected_order(np.array([2, 0], dtype=np.uint32), 3).dtype == np.int64


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"num_documents": -1, "seed": 0, "epoch": 0}, ValueError),  # negative size
        ({"num_documents": 3, "seed": -1, "epoch": 0}, ValueError),  # negative seed
        ({"num_documents": 3, "seed": 0, "epoch": 1.0}, TypeError),  # float epoch
        ({"num_documents": 3, "seed": True, "epoch": 0}, TypeError),  # bool is not a seed
    ],
)
def test_global_document_order_validates_arguments(kwargs, error):
    with pytest.raises(error, match="non-negative int"):
        global_document_order(**kwargs)


@given(st.integers(0, 200), st.integers(1, 17))
def test_shard_documents_for_rank_disjoint_and_complete(n, world):
    order = global_document_order(n, seed=5, epoch=0)
    shards = [shard_documents_for_rank(order, r, world) for r in range(world)]
    both = np.concatenate(shards)
    assert np.array_equal(np.sort(both), np.arange(n))
    # Round-robin: rank r holds positions r, r + W, ... of the global order.
    for r, shard in enumerate(shards):
        assert np.array_equal(shard, order[r::world])


def test_shard_documents_for_rank_golden():
    assert shard_documents_for_rank(np.array([9, 8, 7, 6, 5]), 1, 2).tolist() == [8, 6]


@pytest.mark.parametrize(
    ("rank", "world_size", "error", "match"),
    [
        (2, 2, ValueError, r"rank must be in \[0, world_size\)"),  # rank == world
        (-1, 2, ValueError, "non-negative"),  # negative rank
        (0, 0, ValueError, "world_size must be >= 1"),  # empty world
        (0, 2.0, TypeError, "int"),  # float world size
    ],
)
def test_shard_documents_for_rank_validates(rank, world_size, error, match):
    with pytest.raises(error, match=match):
        shard_documents_for_rank(np.arange(4), rank, world_size)


def test_window_permutation_golden():
    # The window loader's epoch order: default_rng([seed, epoch, 0xDA7A]).permutation(n).
    assert window_permutation(5, 7, 0).tolist() == [3, 2, 4, 1, 0]
    assert window_permutation(5, 7, 1).tolist() == [4, 3, 2, 1, 0]
