"""describe_step: the rows of one global step and the mixture before it, as data."""

from __future__ import annotations

import dataclasses

import pytest

from grainpack.index.options import OptionError
from grainpack.ingest.writer import write_corpus
from grainpack.pipeline.batches import PipelineBatches
from grainpack.pipeline.config import PipelineConfig
from grainpack.pipeline.show import describe_step


@pytest.fixture
def config(tmp_path):
    write_corpus(tmp_path / "a", [[5, 6, 7], [8, 9], list(range(1, 12))])
    write_corpus(tmp_path / "b", [[20, 21, 22, 23]] * 3)
    return PipelineConfig(
        sources={"a": str(tmp_path / "a"), "b": str(tmp_path / "b")},
        block=4,
        global_batch_size=4,
        seed=3,
        weights=[[0, {"a": 0.75, "b": 0.25}], [2, {"a": 0.25, "b": 0.75}, 2]],
        layout="compact",  # described in the full layout all the same
    )


def test_describe_step_rows_weights_and_mixture(config):
    shown = describe_step(config, 3, process_count=2)
    assert shown["weights"] == {"a": 0.5, "b": 0.5}  # halfway through the ramp
    assert shown["schedule"] == "schedule from 0: 0.75/0.25; from 2 ramp 2: 0.25/0.75"
    segments = [[(s["document"], s["offset"]) for s in r["segments"]] for r in shown["rows"]]
    rows = [
        (r["slot"], r["process"], r["source"], r["epoch"], r["real_targets"]) for r in shown["rows"]
    ]
    assert rows == [(12, 0, "a", 2, 0), (13, 1, "b", 0, 4), (14, 0, "b", 0, 1), (15, 1, "b", 1, 4)]
    assert segments == [[(1, 1)], [(2, 1), (1, 0)], [(1, 2)], [(2, 0), (1, 0)]]
    batch = PipelineBatches(dataclasses.replace(config, layout="full", provenance=True)).batch(3, 0)
    assert [r["source"] for r in shown["rows"]] == [["a", "b"][j] for j in batch["source"]]
    a, b = shown["mixture"]["a"], shown["mixture"]["b"]
    assert (a["target_share"], a["rows"], a["real_tokens"], a["epochs"], a["repeats"]) == (
        0.75, 11, 47, 2.75, 2,
    )  # fmt: skip
    assert (b["rows"], b["tokens"], b["real_share"]) == (1, 5, 1.0)


def test_describe_step_before_any_row_of_a_source_has_no_real_share(config):
    assert describe_step(config, 0)["mixture"]["b"]["real_share"] is None  # not NaN: JSON


def test_describe_step_of_fixed_weights_has_no_schedule(config, tmp_path):
    fixed = PipelineConfig(sources={"a": str(tmp_path / "a")}, block=4, global_batch_size=2)
    shown = describe_step(fixed, 1)
    assert shown["schedule"] == "" and shown["weights"] == {"a": 1.0}
    assert [r["process"] for r in shown["rows"]] == [0, 0]


def test_describe_step_refusals_name_the_options(config):
    with pytest.raises(OptionError) as err:
        describe_step(config, 0, process_count=3)
    assert str(err.value).startswith("global_batch_size=4 is not divisible by process_count=3")
    spelled = err.value.spelled(
        {"global_batch_size": "--batch-size", "process_count": "--processes"}
    )
    assert spelled.startswith("--batch-size 4 is not divisible by --processes 3")
    huge = PipelineConfig(sources=config.sources, block=8, global_batch_size=10**7)
    with pytest.raises(ValueError, match=r"global_batch_size=10000000 x \(block=8 \+ 1\) is "):
        describe_step(huge, 0)
