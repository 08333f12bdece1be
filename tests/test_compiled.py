"""The compiled gather (numba, the ``fast`` extra): the same batches as the join, bit for
bit, and a read table that disagrees with its buffers is refused, never read past them."""

from __future__ import annotations

import itertools
import sys
import types

import numpy as np
import pytest

import grainpack as gp
from grainpack.pipeline import gather as gather_module
from grainpack.pipeline.batches import PipelineBatches
from grainpack.pipeline.gather import compiled_gather

pytest.importorskip("numba")
from grainpack.pipeline.compiled import gather


def _corpora(tmp_path):
    rng = np.random.default_rng(5)
    short = [rng.integers(1, 60_000, size=n) for n in rng.integers(1, 9, size=3_000)]
    long = [rng.integers(1, 70_000, size=n) for n in rng.integers(1, 700, size=300)]
    gp.write_corpus(tmp_path / "short", short, shard_tokens=997)
    gp.write_corpus(tmp_path / "long", long, dtype="uint32")
    return {"short": str(tmp_path / "short"), "long": str(tmp_path / "long")}


def _batches(config, process_count, steps=12):
    out = []
    for p in range(process_count):
        iterator = iter(gp.make_dataset(config, process_index=p, process_count=process_count))
        out += [next(iterator) for _ in range(steps)]
    return out


@pytest.mark.parametrize(
    "unit, layout, boundary, provenance, process_count",
    [
        ("documents", "full", 5, False, 1),
        ("documents", "compact", 5, True, 2),
        ("documents", "full", None, True, 2),
        ("windows", "compact", None, False, 1),
        ("windows", "full", None, False, 2),
    ],
)
def test_batches_equal_the_joined_ones_bit_for_bit(
    tmp_path, monkeypatch, unit, layout, boundary, provenance, process_count
):
    config = gp.PipelineConfig(
        sources=_corpora(tmp_path),
        block=31,
        global_batch_size=4,
        unit=unit,
        layout=layout,
        boundary_id=boundary,
        provenance=provenance,
        seed=3,
    )
    compiled = _batches(config, process_count)
    monkeypatch.setattr(gather_module, "compiled_gather", lambda: None)
    joined = _batches(config, process_count)
    for a, b in zip(compiled, joined, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key].dtype == b[key].dtype, key
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    # short documents: many pieces a row (more than the join's 64 at a time in a batch)
    assert (compiled[0].get("segment_ids", np.zeros(1)).max() > 3) or layout == "compact"


def test_gather_copies_the_pieces_and_writes_the_marks():
    a, b = np.arange(100, 110, dtype=np.uint16), np.arange(200, 205, dtype=np.uint16)
    addresses = np.array([a.ctypes.data, b.ctypes.data])
    sizes = np.array([10, 5])
    table = np.array([[0, 1, 0], [2, 0, 9], [5, 3, 10]])  # [2, 5) of a, [0, 3) of b, [9, 10)
    out = np.zeros(7, dtype=np.uint16)
    marks = np.array([3, 9])  # row positions, minus the offset 2: 1 and 7 (7: not this read)
    assert gather(out, addresses, sizes, table, 0, 3, marks, 0, 1, 2, 9) == 0
    assert out.tolist() == [102, 9, 104, 200, 201, 202, 109]


@pytest.mark.parametrize(
    "table, size, marks",
    [
        ([[0], [0], [11]], 10, [0]),  # past the buffer's end
        ([[0], [3], [2]], 1, [0]),  # reversed
        ([[0], [-1], [1]], 2, [0]),  # before its start
        ([[0], [0], [5]], 4, [0]),  # more than out holds
        ([[0], [0], [3]], 4, [0]),  # fewer than out holds
        ([[0], [0], [4]], 4, [4]),  # a mark past out
        ([[0], [0], [4]], 4, [-1]),  # a mark before out
    ],
)
def test_gather_refuses_a_table_that_leaves_its_buffers(table, size, marks):
    a = np.arange(10, dtype=np.uint32)
    out = np.zeros(size, dtype=np.uint32)
    args = (np.array([a.ctypes.data]), np.array([10]), np.array(table), 0, 1, np.array(marks))
    assert gather(out, *args, 0, 1, 0, 7) == -1


def test_without_numba_the_join_gathers(monkeypatch):
    compiled_gather.cache_clear()
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba: ModuleNotFoundError
    monkeypatch.delitem(sys.modules, "grainpack.pipeline.compiled")
    try:
        assert compiled_gather() is None
    finally:
        compiled_gather.cache_clear()


def test_a_numba_that_does_not_import_warns_and_is_not_used(monkeypatch):
    compiled_gather.cache_clear()
    broken = types.ModuleType("grainpack.pipeline.compiled")  # no gather: an ImportError
    monkeypatch.setitem(sys.modules, "grainpack.pipeline.compiled", broken)
    try:
        with pytest.warns(UserWarning, match="numba is installed but does not import"):
            assert compiled_gather() is None
    finally:
        compiled_gather.cache_clear()


def test_a_reader_uses_the_kernel_unless_told_not_to(tmp_path):
    src = gp.write_corpus(tmp_path / "c", [[1, 2, 3], [4, 5]])
    config = gp.PipelineConfig(sources={"c": str(tmp_path / "c")}, block=3, global_batch_size=2)
    batches = PipelineBatches(config, process_count=1)
    packed = batches.packed_steps(0, 0)
    assert batches.reader(packed).kernel is gather
    kwargs = {"block": 3, "pad_id": 0, "boundary_id": None}
    plain = gather_module.RowReader(packed, [src], compiled=False, **kwargs)
    assert plain.kernel is None
    fast = gather_module.RowReader(packed, [src], **kwargs)
    for a, b in itertools.combinations_with_replacement(range(3), 2):
        np.testing.assert_array_equal(fast.read(a, b), plain.read(a, b))
