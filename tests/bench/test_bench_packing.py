"""``grainpack bench --packing`` (issue 34): concat against best fit and Grain's
``BestFitPackIterDataset``, exact on fixed lengths where the index decides the figures."""

from __future__ import annotations

import json

import numpy as np
import pytest

from grainpack.bench import packing
from grainpack.cli.main import main

LENGTHS = packing.document_lengths(4000)  # seed 0: 3,383 of them fit a row of 2049


def test_the_lengths_are_realistic_and_fixed():
    assert LENGTHS[:5].tolist() == [697, 512, 1293, 680, 315]
    assert int((LENGTHS + 1 <= 2049).sum()) == 3383 and int(LENGTHS.sum()) == 4_802_906


@pytest.mark.parametrize(
    ("block", "concat", "best_fit"),
    [  # (cut documents, fitting documents, rows, spans) of concat; (rows, spans) of best_fit
        (2048, (1017, 3383, 2346, 6344), (2347, 5094)),
        (8192, (499, 3942, 587, 4586), (587, 4065)),
    ],
)
def test_index_figures_of_fixed_lengths(block, concat, best_fit):
    cut, fitting, rows, spans = concat
    found = packing.packing_metrics(LENGTHS, block=block, packing="concat")
    assert found["cut"] == cut / fitting and found["rows"] == rows
    assert found["segments_per_row"] == spans / rows
    tokens = int(LENGTHS.sum()) + len(LENGTHS) - 1  # a boundary between documents
    assert found["padding"] == 1 - tokens / (rows * (block + 1))
    for window in packing.WINDOWS:  # 4,000 documents: one window whatever K·C
        found = packing.packing_metrics(LENGTHS, block=block, packing="best_fit", window=window)
        assert found["cut"] == 0.0  # no document that fits a row is cut
        assert (found["rows"], found["segments_per_row"]) == (
            best_fit[0],
            best_fit[1] / best_fit[0],
        )
        tokens = int(LENGTHS.sum()) + len(LENGTHS)  # a boundary after every document
        assert found["padding"] == 1 - tokens / (best_fit[0] * (block + 1))


def test_grain_packs_the_same_pieces_with_more_padding():
    found = packing.grain_best_fit(LENGTHS[:300], block=2048, bins=128)
    assert found["rows"] == 182 and found["cut"] == 0.0
    assert round(found["padding"], 6) == 0.012475
    ours = packing.packing_metrics(LENGTHS[:300], block=2048, packing="best_fit")
    assert ours["rows"] < found["rows"] and ours["padding"] < found["padding"]


def test_bad_packing_is_refused():
    with pytest.raises(ValueError, match="packing must be 'concat' or 'best_fit'; got 'first_fit'"):
        packing.packing_metrics(LENGTHS, block=2048, packing="first_fit")


@pytest.mark.slow
def test_bench_packing_quick_prints_the_table_and_writes_its_json(tmp_path, capsys):
    out = tmp_path / "packing.json"
    assert main(["bench", "--packing", "--quick", "--json", str(out)]) == 0
    table = capsys.readouterr().out
    results = json.loads(out.read_text())
    assert set(results) == {"settings", "packing", "throughput"}
    assert results["settings"]["quick"] is True and results["settings"]["rounds"] == 5
    rows = results["packing"]
    assert [(r["block"], r["packing"], r["window"]) for r in rows] == [
        (block, packer, window)
        for block in (2048, 8192)
        for packer, window in [
            ("concat", None),
            ("best_fit", 4096),
            ("best_fit", 65536),
            ("best_fit", None),
            ("grain", None),
            ("best_fit", 4096),  # on Grain's documents
        ]
    ]
    assert [r["cut"] for r in rows if r["packing"] != "concat"] == [0.0] * 10
    assert [r.get("documents") for r in rows].count(300) == 2
    assert [r["cut"] for r in rows if r["packing"] == "concat"] == [1017 / 3383, 499 / 3942]
    best_fit = [r["rows"] for r in rows if r["packing"] == "best_fit"]
    assert best_fit == [2347, 2347, 2347, 180, 587, 587, 587, 45]
    for measured in results["throughput"]:
        assert len(measured["ratios"]) == len(measured["cpu_ratios"]) == 5
        assert measured["ratio"] == float(np.median(measured["ratios"]))
        assert measured["steps"] == max(1, (1 << 18) // (32 * (measured["block"] + 1)))
    assert "30.06 %" in table and "Grain BestFitPackIterDataset, 128 bins" in table
    assert table.rstrip().endswith("too small for the throughput figures to mean anything")
