"""The compiled kernels (numba, the ``fast`` extra): the same batches as the numpy paths, bit
for bit, and a table that disagrees with its buffers or rows is refused, never followed."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import grainpack as gp
from grainpack.pipeline import fast
from grainpack.pipeline.batches import PipelineBatches
from grainpack.pipeline.expand import expand_rows
from grainpack.pipeline.gather import RowReader

pytest.importorskip("numba")
from grainpack.pipeline.compiled import expand, gather


def _corpora(tmp_path, tiny):
    rng = np.random.default_rng(5)
    short = [rng.integers(1, 60_000, size=n) for n in rng.integers(1, 9, size=3_000)]
    long = [rng.integers(1, 70_000, size=n) for n in rng.integers(1, 700, size=300)]
    if tiny:  # epochs of a few rows: padded rows at every epoch's end
        short, long = short[:40], long[:2]
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
    "unit, layout, boundary, provenance, process_count, tiny",
    [
        ("documents", "full", 5, False, 1, False),
        ("documents", "compact", 5, True, 2, False),
        ("documents", "full", None, True, 2, False),
        ("windows", "compact", None, False, 1, False),
        ("windows", "full", None, False, 2, False),
        ("documents", "full", 5, True, 2, True),
        ("windows", "full", None, False, 1, True),
    ],
)
def test_batches_equal_the_numpy_ones_bit_for_bit(
    tmp_path, monkeypatch, unit, layout, boundary, provenance, process_count, tiny
):
    config = gp.PipelineConfig(
        sources=_corpora(tmp_path, tiny),
        block=31,
        global_batch_size=4,
        unit=unit,
        layout=layout,
        boundary_id=boundary,
        provenance=provenance,
        seed=3,
    )
    compiled = _batches(config, process_count)
    monkeypatch.setattr(fast, "kernels", lambda: None)
    plain = _batches(config, process_count)
    for a, b in zip(compiled, plain, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key].dtype == b[key].dtype, key
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    if layout == "full" and unit == "documents":  # what the cases are for
        # short documents: many pieces a row (more than the join's 64 at a time in a batch)
        assert max(b["segment_ids"].max() for b in compiled) > 3
        if tiny:
            assert sum(int((b["loss_mask"][:, -1] == 0).sum()) for b in compiled) >= 3


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


def test_a_reader_uses_the_kernel_unless_told_not_to(tmp_path):
    src = gp.write_corpus(tmp_path / "c", [[1, 2, 3], [4, 5]])
    config = gp.PipelineConfig(sources={"c": str(tmp_path / "c")}, block=3, global_batch_size=2)
    batches = PipelineBatches(config, process_count=1)
    packed = batches.packed_steps(0, 0)
    assert batches.reader(packed).kernel is gather
    kwargs = {"block": 3, "pad_id": 0, "boundary_id": None}
    plain = RowReader(packed, [src], compiled=False, **kwargs)
    assert plain.kernel is None
    compiled = RowReader(packed, [src], **kwargs)
    for a, b in itertools.combinations_with_replacement(range(3), 2):
        np.testing.assert_array_equal(compiled.read(a, b), plain.read(a, b))


def _plan(tmp_path, rows=6, block=7):
    """A full-layout plan of ``rows`` rows (some padded: a 23-token corpus) and its tokens."""
    rng = np.random.default_rng(1)
    docs = [rng.integers(1, 60_000, size=n) for n in (1, 9, 2, 5, 3, 1, 2)]
    gp.write_corpus(tmp_path / "c", docs)
    config = gp.PipelineConfig(
        sources={"c": str(tmp_path / "c")}, block=block, global_batch_size=rows, boundary_id=0
    )
    batches = PipelineBatches(config, process_count=1)
    packed = batches.packed_steps(0, 0, steps=3)
    return packed, batches.reader(packed).read(0, packed.num_rows)


def test_expand_equals_numpy_for_every_range_of_rows(tmp_path):
    packed, tokens = _plan(tmp_path)
    assert (packed.filled <= 7).sum() >= 2  # padded rows
    for a, b in itertools.combinations(range(packed.num_rows + 1), 2):
        got = expand_rows(packed, tokens[a:b], first=a)
        want = expand_rows(packed, tokens[a:b], first=a, compiled=False)
        assert got.keys() == want.keys()
        for key in want:
            assert got[key].dtype == want[key].dtype == np.int32
            np.testing.assert_array_equal(got[key], want[key], err_msg=f"{key} [{a}, {b})")


@pytest.mark.parametrize(
    "edit",
    [
        lambda start, count, filled: count.__setitem__(0, count[0] + 1),  # past the rows
        lambda start, count, filled: count.__setitem__(-1, count[-1] - 1),  # short of them
        lambda start, count, filled: start.__setitem__(1, start[1] + 1),  # a gap
        lambda start, count, filled: count.__setitem__(0, -1),
        lambda start, count, filled: filled.__setitem__(0, 9),  # more than block + 1
        lambda start, count, filled: filled.__setitem__(0, -1),
    ],
)
def test_expand_refuses_a_layout_that_does_not_tile_the_rows(tmp_path, edit):
    packed, tokens = _plan(tmp_path)
    start, count, filled = packed.start.copy(), packed.count.copy(), packed.filled.copy()
    lo, hi = int(packed.row_piece[0]), int(packed.row_piece[2])
    out = [np.empty((2, 7), np.int32) for _ in range(5)]
    args = (start, count, packed.segment, lo, hi, filled, 0, *out)
    assert expand(tokens[:2], *args) == 0
    edit(start[lo:hi], count[lo:hi], filled)
    assert expand(tokens[:2], *args) == -1


def test_gather_refuses_ranges_and_outputs_that_do_not_fit_before_touching_anything():
    a = np.arange(100, 110, dtype=np.uint16)
    addresses, sizes = np.array([a.ctypes.data]), np.array([10])
    table = np.array([[0], [0], [3]])
    cases = [
        (np.zeros(3, np.uint16), np.array([[1], [0], [3]]), 0, 1, 0, 0),  # buffer 1 of 1
        (np.zeros(3, np.uint16), np.array([[10**9], [0], [3]]), 0, 1, 0, 0),
        (np.zeros(3, np.uint16), table, 0, 2, 0, 0),  # pieces past the table
        (np.zeros(3, np.uint16), table, 1, 0, 0, 0),  # reversed
        (np.zeros(6, np.uint16)[::2], table, 0, 1, 0, 0),  # a strided out
        (np.zeros(3, np.uint16)[::-1], table, 0, 1, 0, 0),  # a reversed out
        (np.zeros(3, np.uint16), table, 0, 1, 0, 2),  # marks past their array
    ]
    for out, t, first, stop, m0, m1 in cases:
        marks = np.array([1])
        assert gather(out, addresses, sizes, t, first, stop, marks, m0, m1, 0, 7) == -1
        assert not out.any()  # nothing written
    out = np.zeros(3, np.uint16)
    assert gather(out, addresses, sizes, table, 0, 1, np.array([1]), 0, 1, 0, 7) == 0
    assert out.tolist() == [100, 7, 102]


def test_expand_refuses_arrays_of_other_shapes_before_writing(tmp_path):
    packed, tokens = _plan(tmp_path)
    lo, hi = int(packed.row_piece[0]), int(packed.row_piece[2])
    layout = (packed.start, packed.count, packed.segment)

    def outputs(**shapes):
        return [np.full(shapes.get(k, (2, 7)), -7, np.int32) for k in "itspm"]

    cases = [
        (tokens[:2, :7], lo, hi, outputs()),  # rows of block tokens, not block + 1
        (tokens[:2], lo, hi, outputs(s=(1, 7))),  # a short output
        (tokens[:2], lo, hi, outputs(m=(2, 6))),
        (tokens[:2], lo, len(packed.count) + 1, outputs()),  # pieces past the table
        (tokens[:2], -1, hi, outputs()),
    ]
    for rows, first_piece, stop_piece, out in cases:
        args = (*layout, first_piece, stop_piece, packed.filled, 0, *out)
        assert expand(rows, *args) == -1
        assert all((o == -7).all() for o in out)  # nothing written
    count = packed.count.copy()
    count[lo] = 2**63 - 1  # no overflow past the check
    out = outputs()
    args = (packed.start, count, packed.segment, lo, hi, packed.filled, 0, *out)
    assert expand(tokens[:2], *args) == -1
