"""Bad pipeline configs and selectors: refused before anything is planned, naming the fix.

Part of the bad-input catalogue; helpers in ``tests/bad_inputs.py``.
"""

from __future__ import annotations

import math
import pathlib
import re

import numpy as np
import pytest
from bad_inputs import (  # noqa: F401
    DOCS,
    SOURCES,
    documents_of,
    edit_manifest,
    first_batch,
    fresh,
    pipeline,
    restamp,
    small_corpus,
    state_after,
    write_megatron_int64,
)

import grainpack as gp

# -- empty and short sources -----------------------------------------------------------------


@pytest.mark.parametrize("documents", [[], [[], []]], ids=["no-documents", "no-tokens"])
def test_empty_corpus_is_a_valid_corpus_but_no_pipeline_source(tmp_path, documents):
    src = gp.write_corpus(tmp_path / "c", documents)
    assert (len(src), src.num_tokens) == (len(documents), 0)
    assert gp.open_corpus(tmp_path / "c").lengths.tolist() == [0] * len(documents)
    assert gp.verify_corpus(tmp_path / "c").max_token_id is None
    config = pipeline(tmp_path / "c")
    message = re.escape("source 'a' holds 0 tokens, fewer than one row of block + 1 = 5")
    with pytest.raises(ValueError, match=message + ".*smaller block or a larger corpus"):
        first_batch(config)
    with pytest.raises(ValueError, match=message):
        next(iter(gp.make_eval_dataset(config, process_index=0, process_count=1)))


def test_source_shorter_than_one_row_is_named(tmp_path):
    gp.write_corpus(tmp_path / "en", DOCS)
    gp.write_corpus(tmp_path / "fr", [[1, 2], [3]])
    sources = {"en": str(tmp_path / "en"), "fr": str(tmp_path / "fr")}
    for unit in ("documents", "windows"):
        config = gp.PipelineConfig(sources=sources, block=3, global_batch_size=2, unit=unit)
        with pytest.raises(ValueError, match=re.escape("source 'fr' holds 3 tokens, fewer than")):
            first_batch(config)
    # exactly one row is enough: windows of block + 1 = 3 tokens
    config = gp.PipelineConfig(sources=sources, block=2, global_batch_size=2, unit="windows")
    assert first_batch(config)["inputs"].shape == (2, 2)


# -- config -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("weights", "error", "message"),
    [
        ({"en": 0, "fr": 1}, ValueError, "weights['en'] must be > 0; got 0"),
        ({"en": -0.5, "fr": 1.5}, ValueError, "weights['en'] must be > 0; got -0.5"),
        ({"en": math.nan, "fr": 1}, ValueError, "weights['en'] must be a finite number; got nan"),
        ({"en": math.inf, "fr": 1}, ValueError, "weights['en'] must be a finite number; got inf"),
        ({"en": True, "fr": 1}, TypeError, "weights['en'] must be a number; got True"),
        ({"en": "0.5", "fr": 0.5}, TypeError, "weights['en'] must be a number; got '0.5'"),
        ({"en": 0.3, "fr": 0.3}, ValueError, "weights must sum to 1"),
        ({"en": 1.0}, ValueError, "weights must name exactly the sources ['en', 'fr']; got ['en']"),
        ({"en": 0.5, "fr": 0.5, "de": 0.0}, ValueError, "must name exactly the sources"),
        ({"EN": 0.5, "fr": 0.5}, ValueError, "must name exactly the sources"),
        ([0.5, 0.5], TypeError, "weights must be a mapping name -> number"),
    ],
)
def test_config_refuses_bad_weights(weights, error, message):
    with pytest.raises(error, match=re.escape(message)):
        gp.PipelineConfig(sources=SOURCES, block=4, global_batch_size=2, weights=weights)


@pytest.mark.parametrize("premium", [0, -1.0, math.nan])
def test_config_refuses_bad_premiums(premium):
    with pytest.raises(ValueError, match=re.escape("premiums['en'] must be")):
        gp.PipelineConfig(
            sources=SOURCES, block=4, global_batch_size=2, premiums={"en": premium, "fr": 1}
        )


@pytest.mark.parametrize(
    ("block", "error", "message"),
    [
        (0, ValueError, "block must be >= 1"),
        (-3, ValueError, "block must be >= 1"),
        (2.5, TypeError, "block must be an int"),
        ("8", TypeError, "block must be an int"),
    ],
)
def test_config_refuses_block_below_one(block, error, message):
    with pytest.raises(error, match=re.escape(message)):
        gp.PipelineConfig(sources=SOURCES, block=block, global_batch_size=2)


@pytest.mark.parametrize(
    "make", [gp.make_dataset, gp.pipeline.make_data_loader, gp.make_eval_dataset]
)
def test_global_batch_size_not_divisible_by_process_count(tmp_path, make):
    config = pipeline(small_corpus(tmp_path / "c"), global_batch_size=6)
    message = "global_batch_size=6 is not divisible by process_count=4.*multiple of the process"
    with pytest.raises(ValueError, match=message):
        make(config, process_index=0, process_count=4)
    make(config, process_index=0, process_count=3)  # divides: fine


# -- selectors ----------------------------------------------------------------------------------


def out_of_range(order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    return np.append(order, len(order))


def negative(order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    return np.append(order[:-1], -1)


def duplicates(order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    return np.append(order, order[:2])


def floats(order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    return order.astype(np.float64)


def matrix(order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    return order.reshape(1, -1)


def nothing(order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    return order[:0]


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        (out_of_range, "selected order has 1 ids outside [0, 5), e.g. [5]"),
        (negative, "selected order has 1 ids outside [0, 5), e.g. [-1]"),
        (duplicates, "selected order repeats document ids"),
        (floats, "selected order must hold integer ids, got dtype float64"),
        (matrix, "selected order must be 1-D, got shape (1, 5)"),
        (nothing, "sequence_selector kept no tokens in epoch 0 of source 'a'"),
    ],
)
def test_selector_returning_bad_ids_fails_through_make_dataset(tmp_path, selector, message):
    config = pipeline(small_corpus(tmp_path / "c"), sequence_selector=selector)
    with pytest.raises(ValueError, match=re.escape(message)):
        first_batch(config)


# -- ids that would not fit the int32 batch arrays -------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"vocab_size": 2**32}, "vocab_size must be an int in [1, 2147483648] for uint32"),
        ({"vocab_size": 2**31 + 1}, "(batches hold int32 ids, so ids must be < 2**31)"),
    ],
)
def test_writer_caps_vocab_size_at_the_int32_batch_range(tmp_path, options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        gp.ingest.CorpusWriter(tmp_path / "c", dtype="uint32", **options)


def test_writer_refuses_ids_that_would_wrap_in_int32_batches(tmp_path):
    message = "token id 3000000000 at position 1 does not fit the int32 batch ids (max 2147483647)"
    with pytest.raises(ValueError, match=re.escape(message)):
        gp.write_corpus(tmp_path / "c", [[1, 3_000_000_000]], dtype="uint32")
    # the largest id that fits arrives intact
    src = gp.write_corpus(tmp_path / "d", [[2**31 - 1, *range(1, 9)]], dtype="uint32")
    assert src.max_token_id == 2**31 - 1
    assert first_batch(pipeline(tmp_path / "d"))["inputs"][0, 0] == 2**31 - 1


def test_pipeline_refuses_sources_whose_ids_may_exceed_int32(tmp_path):
    # a uint32 corpus whose manifest allows ids up to 2**32 - 1 (as older writers accepted)
    path = gp.write_corpus(tmp_path / "c", [list(range(1, 20))], dtype="uint32").shards[0]
    path = pathlib.Path(path.tokens_path).parent
    edit_manifest(path, lambda m: (m.update(vocab_size=2**32), m.pop("max_token_id")))
    with pytest.raises(ValueError, match=r"may hold token ids up to 4,294,967,295 \(vocab_size"):
        gp.make_dataset(pipeline(path), process_index=0, process_count=1)
    edit_manifest(path, lambda m: m.update(vocab_size=None))  # no bound recorded at all
    with pytest.raises(ValueError, match="dtype uint32 and no recorded vocab_size or max_token"):
        first_batch(pipeline(path))
    # a Megatron int64 corpus: 2**40 would arrive as 0
    write_megatron_int64(tmp_path / "m", [[2**40, 5, 6, 7, 8, 9]])
    with pytest.raises(ValueError, match=r"may hold token ids up to 9,223,372,036,854,775,807"):
        first_batch(pipeline(tmp_path / "m"))
    message = f"grainpack build {tmp_path / 'm'} -o NEW --dtype uint32"
    with pytest.raises(ValueError, match=re.escape(message)):
        first_batch(pipeline(tmp_path / "m"))


@pytest.mark.parametrize("field", ["pad_id", "boundary_id"])
def test_config_refuses_token_ids_outside_int32(field):
    with pytest.raises(ValueError, match=re.escape(f"{field} must be < 2**31 (batches hold int32")):
        gp.PipelineConfig(sources={"a": "/data/a"}, block=4, global_batch_size=2, **{field: 2**31})
    gp.PipelineConfig(sources={"a": "/data/a"}, block=4, global_batch_size=2, **{field: 2**31 - 1})
