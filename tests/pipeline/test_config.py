"""PipelineConfig: validation, probabilities, content mode, the fingerprinted description."""

from __future__ import annotations

import dataclasses
import functools
import json

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
    with pytest.raises(ValueError, match="sources must be a non-empty mapping"):
        gp.PipelineConfig(sources={}, block=8, global_batch_size=4)
    with pytest.raises(TypeError, match="sources must be a non-empty mapping"):
        gp.PipelineConfig(sources=["/data/en"], block=8, global_batch_size=4)
    with pytest.raises(ValueError, match="documents' only"):
        gp.PipelineConfig(
            sources=paths, block=8, global_batch_size=4, unit="windows", boundary_id=3
        )


class _NoRepr:
    def __call__(self, order, seed, epoch):
        return order


def _first(n):
    def select(order, seed, epoch):
        return order[:n]

    return select


@pytest.mark.parametrize(
    "selector",
    [
        _NoRepr(),
        functools.partial(keep_all),
        gp.curriculum.PerSource({"en": _NoRepr()}),
        _first(_NoRepr()),
        _NoRepr().__call__,
    ],
    ids=["object", "partial", "nested", "closure", "method"],
)
def test_a_selector_whose_repr_holds_an_address_is_refused(selector):
    # the address differs in every process: the fingerprint would refuse every restore
    with pytest.raises(TypeError, match=r"repr .* holds a memory address.* __repr__"):
        gp.PipelineConfig(sources=PATHS, block=8, global_batch_size=4, sequence_selector=selector)
    lengths = gp.curriculum.LengthBuckets(edges=[4], rates=[1.0, 0.5])  # a repr of its parameters
    config = gp.PipelineConfig(
        sources=PATHS, block=8, global_batch_size=4, sequence_selector=lengths
    )
    assert " at 0x" not in config.description()["sequence_selector"]


def test_selectors_of_other_parameters_or_code_have_other_fingerprints():
    def described(selector):
        config = gp.PipelineConfig(
            sources=PATHS, block=8, global_batch_size=4, sequence_selector=selector
        )
        return config.description()["sequence_selector"]

    # a closure's values, a lambda's code: they were described by their names alone
    assert described(_first(3)) == f"'{__name__}._first.<locals>.select(closure=(3,))'"
    assert described(_first(3)) != described(_first(4))
    a, b = (lambda o, s, e: o[:5]), (lambda o, s, e: o[:6])
    assert described(a) != described(b)
    assert described(a) == described(lambda o, s, e: o[:5])  # the same code
    assert described(keep_all) == f"'{keep_all.__module__}.keep_all'"  # saved ones hold


def test_an_unknown_field_names_the_fields_and_the_likely_one():
    with pytest.raises(TypeError, match=r"no field 'batch_size' \(did you mean 'global_batch_"):
        gp.PipelineConfig(sources=PATHS, block=8, batch_size=4)
    with pytest.raises(TypeError, match=r"'blok' \(did you mean 'block'\?\), 'zzz'; its fields"):
        gp.PipelineConfig(sources=PATHS, blok=8, global_batch_size=4, zzz=1)


def test_mappings_changed_in_place_after_validation_are_refused_by_every_pipeline(tmp_path):
    gp.write_corpus(tmp_path / "en", [list(range(1, 40))] * 4)
    paths = {"en": str(tmp_path / "en"), "fr": str(tmp_path / "en")}
    weights = {"en": 0.5, "fr": 0.5}
    config = gp.PipelineConfig(sources=paths, block=8, global_batch_size=4, weights=weights)
    assert gp.mixing.mixture_accounting(config, 3)["en"].rows > 0  # as built: fine
    assert json.dumps(dataclasses.asdict(config)["weights"])  # plain dicts, for loggers
    config.weights["en"] = 0.9  # sums to 1.4: was mixed with the weights validated before
    for use in (
        lambda: gp.make_dataset(config, process_index=0, process_count=1),
        lambda: gp.mixing.mixture_accounting(config, 3),
        lambda: gp.mixing.target_shares(config, 0, 3),
        lambda: config.probabilities_at(0),  # answered with the old weights before
    ):
        with pytest.raises(ValueError, match="changed in place after it was built"):
            use()


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


def test_numpy_integers_are_stored_as_ints(tmp_path):
    # The fingerprint (and so get_state) is JSON of the config: np.int64 could not be written.
    ints = dict(block=8, global_batch_size=4, seed=3, pad_id=0, boundary_id=9)
    numpy = gp.PipelineConfig(
        sources={"en": str(tmp_path)}, **{k: np.int64(v) for k, v in ints.items()},
        order=gp.BlockedOrder(block_docs=np.int32(16), window_blocks=np.uint8(2)),
    )  # fmt: skip
    for key, value in ints.items():
        assert type(getattr(numpy, key)) is int and getattr(numpy, key) == value
    assert type(numpy.order.block_docs) is int and type(numpy.order.window_blocks) is int
    assert json.loads(json.dumps(numpy.description()))["block"] == 8


# -- schedules ------------------------------------------------------------------------------


def test_a_one_stage_schedule_describes_itself_as_fixed_weights():
    fixed = gp.PipelineConfig(
        sources=PATHS, block=8, global_batch_size=4, weights={"en": 0.7, "fr": 0.3}
    )
    for weights in (
        [(0, {"en": 0.7, "fr": 0.3})],
        [gp.Stage(0, {"fr": 0.3, "en": 0.7})],
        [(0, {"en": 0.7, "fr": 0.3}), (100, {"en": 0.7, "fr": 0.3}, 10)],  # never changes
    ):
        staged = gp.PipelineConfig(sources=PATHS, block=8, global_batch_size=4, weights=weights)
        assert staged.description() == fixed.description()  # same fingerprint, same checkpoints
        assert staged.probabilities == staged.constant_probabilities == (0.7, 0.3)
    content = gp.PipelineConfig(
        sources=PATHS, block=8, global_batch_size=4, premiums=[(0, {"en": 1.0, "fr": 3.0})]
    )
    assert content.description()["probabilities"] == [0.25, 0.75]


def test_schedule_description_and_weights_by_step():
    cfg = gp.PipelineConfig(
        sources=PATHS,
        block=8,
        global_batch_size=4,
        weights=[(0, {"en": 1.0, "fr": 0.0}), gp.Stage(8, {"en": 0.5, "fr": 0.5}, ramp=4)],
    )
    assert cfg.description()["schedule"] == [
        {"start": 0, "probabilities": [1.0, 0.0], "ramp": 0},
        {"start": 8, "probabilities": [0.5, 0.5], "ramp": 4},
    ]
    assert "probabilities" not in cfg.description()
    assert cfg.weights[1] == gp.Stage(8, {"en": 0.5, "fr": 0.5}, 4)
    assert [cfg.probabilities_at(t) for t in (7, 8, 9, 10, 11, 12)] == [
        (1.0, 0.0),
        (1.0, 0.0),
        (0.875, 0.125),
        (0.75, 0.25),
        (0.625, 0.375),
        (0.5, 0.5),
    ]
    assert cfg.probabilities == (1.0, 0.0) and cfg.constant_probabilities is None
    content = gp.PipelineConfig(
        sources=PATHS,
        block=8,
        global_batch_size=4,
        premiums=[(0, {"en": 1.0, "fr": 1.0}), (5, {"en": 1.0, "fr": 3.0})],
    )
    assert content.probabilities_at(4) == (0.5, 0.5) and content.probabilities_at(5) == (
        0.25,
        0.75,
    )


@pytest.mark.parametrize(
    ("field", "value", "error", "match"),
    [
        ("weights", [(5, {"en": 0.5, "fr": 0.5})], ValueError, "weights: stage 0.*start at step 0"),
        ("weights", [(0, {"en": 0.5})], ValueError, "weights stage 0 must name exactly"),
        ("weights", [(0, {"en": 0.5, "fr": 0.6})], ValueError, "weights stage 0 must sum to 1"),
        ("weights", [(0, {"en": 1.0, "fr": 0.0})], ValueError, r"\['fr'\] have weight 0 in every"),
        ("weights", [(0, {"en": -0.5, "fr": 1.5})], ValueError, "'en' in weights stage 0 must be"),
        ("weights", [{"en": 1.0}], TypeError, r"weights stage 0 must be \(start_step"),
        ("weights", [(0,)], ValueError, r"weights stage 0 must be .*got 1 items"),
        ("weights", "ab", TypeError, "or a schedule: a non-empty list of stages"),
        (
            "weights",
            [(0, {"en": 1.0, "fr": 0.0}), (4, {"en": 0.0, "fr": 1.0}, 9), (6, {"en": 1, "fr": 0})],
            ValueError,
            "weights: stage 1 .*ramp of 9 steps runs past",
        ),
        ("premiums", [(0, {"en": 0.0, "fr": 1.0})], ValueError, r"'en' in premiums stage 0"),
        (
            "weights",
            gp.curriculum.MixtureBandit(["fr", "en"], stage_steps=5),
            ValueError,
            "in this order",
        ),
        # hashed as 64 bits: the blocked order's windows unit gave seed 0's batches
        ("seed", 2**64 + 3, ValueError, r"seed must be below 2\*\*64 .* would act as 3\)"),
        ("provenance", "no", TypeError, "provenance must be True or False; got 'no'"),
        ("pad_id", None, TypeError, "pad_id must be an int .* got None"),  # failed at next()
    ],
)
def test_bad_schedules_are_refused(field, value, error, match):
    with pytest.raises(error, match=match):
        gp.PipelineConfig(sources=PATHS, block=8, global_batch_size=4, **{field: value})


def test_an_online_schedule_is_described_by_its_configuration():
    bandit = gp.curriculum.MixtureBandit(
        ["en", "fr"], stage_steps=5, initial={"en": 0.8, "fr": 0.2}
    )
    cfg = gp.PipelineConfig(sources=PATHS, block=8, global_batch_size=4, weights=bandit)
    described = cfg.description()["schedule"]
    assert described == repr(bandit) and "stage_steps=5" in described
    assert cfg.probabilities == (0.8, 0.2)
    bandit.update(0, [1.0, 2.0])
    assert cfg.description()["schedule"] == described  # learning keeps the fingerprint


def test_to_dict_writes_every_field_as_json():
    cfg = gp.PipelineConfig(
        sources=PATHS,
        block=8,
        global_batch_size=4,
        seed=3,
        premiums=[(0, {"en": 1.0, "fr": 3.0}), gp.Stage(10, {"en": 1, "fr": 1}, ramp=5)],
        boundary_id=9,
        order=gp.BlockedOrder(block_docs=16, window_blocks=4),
        layout="compact",
    )
    assert cfg.to_dict() == {
        "sources": {"en": "/data/en", "fr": "/data/fr"},
        "block": 8,
        "global_batch_size": 4,
        "seed": 3,
        "weights": None,
        "premiums": [[0, {"en": 1.0, "fr": 3.0}, 0], [10, {"en": 1.0, "fr": 1.0}, 5]],
        "unit": "documents",
        "boundary_id": 9,
        "pad_id": 0,
        "sequence_selector": None,
        "provenance": False,
        "order": {"kind": "blocked", "block_docs": 16, "window_blocks": 4},
        "layout": "compact",
        "packing": "concat",
        "max_segments": None,
    }
    assert json.loads(json.dumps(cfg.to_dict())) == cfg.to_dict()


@pytest.mark.parametrize(
    "fields",
    [
        {},  # every default
        {"weights": {"en": 0.25, "fr": 0.75}, "seed": 2**64 - 1, "provenance": True},
        {"weights": [(0, {"en": 0.5, "fr": 0.5}), gp.Stage(4, {"en": 1, "fr": 0}, ramp=2)]},
        {"premiums": {"en": 1.0, "fr": 2.0}, "layout": "compact", "pad_id": 7},
        {"unit": "windows", "order": gp.BlockedOrder(block_docs=8, window_blocks=2)},
    ],
)
def test_from_dict_inverts_to_dict(fields):
    cfg = gp.PipelineConfig(sources=PATHS, block=8, global_batch_size=4, **fields)
    again = gp.PipelineConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg and again.description() == cfg.description()


def test_from_dict_takes_the_short_forms_of_a_run_json():
    cfg = gp.PipelineConfig.from_dict(
        {
            "sources": PATHS,
            "block": 8,
            "global_batch_size": 4,
            "weights": [[0, {"en": 0.875, "fr": 0.125}], [4, {"en": 0.125, "fr": 0.875}, 4]],
            "order": {"block_docs": 2, "window_blocks": 3},
        }
    )
    assert cfg.weights == (
        gp.Stage(0, {"en": 0.875, "fr": 0.125}, 0),
        gp.Stage(4, {"en": 0.125, "fr": 0.875}, 4),
    )
    assert cfg.order == gp.BlockedOrder(block_docs=2, window_blocks=3)
    assert cfg.probabilities_at(6) == (0.5, 0.5)
    exact = gp.PipelineConfig.from_dict({"sources": PATHS, "block": 8, "global_batch_size": 4})
    assert exact == gp.PipelineConfig.from_dict({**exact.to_dict(), "order": "exact"})
    # dataclasses.asdict (what loggers record) reads back too
    for config in (exact, cfg):
        logged = json.loads(json.dumps(dataclasses.asdict(config)))
        assert gp.PipelineConfig.from_dict(logged) == config
    assert dataclasses.asdict(exact)["order"] == {"kind": "exact"}


@pytest.mark.parametrize(
    ("fields", "error", "match"),
    [
        (["sources"], TypeError, r"expected a JSON object of PipelineConfig fields \(block, "),
        (
            {"sources": PATHS, "blocks": 8},
            ValueError,
            r"unknown PipelineConfig fields \['blocks'\] \(did you mean 'block'\?\); the fields "
            r"are block, boundary_id, global_batch_size, layout, max_segments, order, packing, "
            r"pad_id, premiums",
        ),
        # another loader's name for a field is recognised
        ({"seq_len": 8}, ValueError, r"fields \['seq_len'\] \(did you mean 'block'\?\)"),
        ({"zzz": 8}, ValueError, r"fields \['zzz'\]; the fields are block,"),
        ({"sources": PATHS}, ValueError, "PipelineConfig needs block, global_batch_size; none"),
        (
            {"order": {"block": 2}},
            ValueError,
            r'"order" must be "exact" or \{"block_docs": C, "window_blocks": K\} \(a Blocked',
        ),
        ({"order": {"kind": "exact", "block_docs": 2}}, ValueError, '"order" must be "exac'),
        ({"order": "blocked"}, ValueError, "order must be 'exact' or a gp.BlockedOrder"),
        # values are checked by the constructor
        ({"seed": -1}, ValueError, "seed must be >= 0"),
        ({"weights": [0.5, 0.5]}, TypeError, "weights must be a mapping name -> number, or a"),
    ],
)
def test_from_dict_refuses_what_is_not_a_config(fields, error, match):
    if isinstance(fields, dict) and "sources" not in fields and "seq_len" not in fields:
        fields = {"sources": PATHS, "block": 8, "global_batch_size": 4, **fields}
    with pytest.raises(error, match=match):
        gp.PipelineConfig.from_dict(fields)


def test_to_dict_refuses_python_objects_it_cannot_write():
    cfg = gp.PipelineConfig(sources=PATHS, block=8, global_batch_size=4, sequence_selector=keep_all)
    with pytest.raises(ValueError, match=r"sequence_selector=<function keep_all at .*no JSON form"):
        cfg.to_dict()
    bandit = gp.curriculum.MixtureBandit(["en", "fr"], stage_steps=5)
    cfg = gp.PipelineConfig(sources=PATHS, block=8, global_batch_size=4, weights=bandit)
    with pytest.raises(ValueError, match=r"weights=MixtureBandit\(.*dataclasses.replace\(config, "):
        cfg.to_dict()
