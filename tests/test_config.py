"""PipelineConfig: validation, probabilities, content mode, the fingerprinted description."""

from __future__ import annotations

import numpy as np
import pytest

import grainpack as gp

PATHS = {"en": "/data/en", "fr": "/data/fr"}


def test_probabilities_equal_by_default_and_from_weights_in_source_order():
    assert gp.PipelineConfig(sources=PATHS, block=8, global_batch_size=4).probabilities == (
        0.5,
        0.5,
    )
    weighted = gp.PipelineConfig(
        sources=PATHS, block=8, global_batch_size=4, weights={"fr": 0.25, "en": 0.75}
    )
    assert weighted.probabilities == (0.75, 0.25)


def test_premiums_give_content_matched_probabilities():
    # fr needs 3 tokens for what en says in 1: fr gets three times the token share
    cfg = gp.PipelineConfig(
        sources=PATHS, block=8, global_batch_size=4, premiums={"en": 1.0, "fr": 3.0}
    )
    assert cfg.probabilities == (0.25, 0.75)
    with pytest.raises(ValueError, match="either weights"):
        gp.PipelineConfig(
            sources=PATHS,
            block=8,
            global_batch_size=4,
            weights={"en": 0.5, "fr": 0.5},
            premiums={"en": 1.0, "fr": 3.0},
        )


def keep_all(order, seed, epoch):
    return order


def test_description_names_everything_that_decides_tokens_but_not_paths():
    cfg = gp.PipelineConfig(
        sources=PATHS,
        block=8,
        global_batch_size=4,
        seed=3,
        boundary_id=9,
        sequence_selector=keep_all,
        provenance=True,
    )
    assert cfg.description() == {
        "sources": ["en", "fr"],
        "block": 8,
        "global_batch_size": 4,
        "seed": 3,
        "probabilities": [0.5, 0.5],
        "unit": "documents",
        "boundary_id": 9,
        "pad_id": 0,
        "sequence_selector": "'test_config.keep_all'",
    }


def test_config_rejects_bad_input():
    paths = {"en": "/data/en", "fr": "/data/fr"}  # configs never touch the files
    with pytest.raises(ValueError, match="must sum to 1"):
        gp.PipelineConfig(
            sources=paths, block=8, global_batch_size=4, weights={"en": 0.5, "fr": 0.6}
        )
    with pytest.raises(ValueError, match="exactly the sources"):
        gp.PipelineConfig(sources=paths, block=8, global_batch_size=4, weights={"en": 1.0})
    with pytest.raises(ValueError, match="finite number"):
        gp.PipelineConfig(
            sources=paths, block=8, global_batch_size=4, weights={"en": float("nan"), "fr": 0.5}
        )
    with pytest.raises(ValueError, match=r"must be > 0; got 0.0 \(drop a source instead\)"):
        gp.PipelineConfig(
            sources=paths, block=8, global_batch_size=4, weights={"en": 0.0, "fr": 1.0}
        )
    with pytest.raises(ValueError, match="block must be >= 1"):
        gp.PipelineConfig(sources=paths, block=0, global_batch_size=4)
    with pytest.raises(ValueError, match="documents' only"):
        gp.PipelineConfig(
            sources=paths, block=8, global_batch_size=4, unit="windows", boundary_id=3
        )


def test_weights_accept_any_real_number_type(tmp_path):
    paths = {"en": str(tmp_path / "en"), "fr": str(tmp_path / "fr")}
    numpy = gp.PipelineConfig(
        sources=paths, block=8, global_batch_size=4,
        weights={"en": np.float32(0.5), "fr": np.float64(0.5)},
    )  # fmt: skip
    assert numpy.probabilities == (0.5, 0.5)
    assert (
        numpy.description()
        == gp.PipelineConfig(
            sources=paths, block=8, global_batch_size=4, weights={"en": 0.5, "fr": 0.5}
        ).description()
    )
    with pytest.raises(TypeError, match=r"weights\['en'\] must be a number; got '0\.5' of type"):
        gp.PipelineConfig(
            sources=paths, block=8, global_batch_size=4, weights={"en": "0.5", "fr": 0.5}
        )
