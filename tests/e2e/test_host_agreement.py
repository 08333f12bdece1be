"""Hosts agree or stop together (issue 37, point 3), with two real JAX processes on loopback.

``host_agreement_worker.py`` (in ``tests/``) is launched as two processes of one
``jax.distributed`` job on 127.0.0.1: with different configs both raise at ``make_dataset``,
naming process 1 and the weights, within 30 s; a restore whose state is corrupt on one
process is refused on both, and neither waits in Orbax's barrier.
"""

from __future__ import annotations

import functools
import json
import pathlib

import loopback
import numpy as np
import pytest

import grainpack as gp

WORKER = pathlib.Path(__file__).parents[1] / "host_agreement_worker.py"
launch = functools.partial(loopback.launch, WORKER)

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("agreement")
    rng = np.random.default_rng(3)
    for name in ("en", "fr"):
        gp.write_corpus(
            root / name, [rng.integers(1, 60, size=rng.integers(2, 30)) for _ in range(20)]
        )
    kwargs = {
        "sources": {"en": str(root / "en"), "fr": str(root / "fr")},
        "block": 8,
        "global_batch_size": 8,
        "weights": {"en": 0.5, "fr": 0.5},
    }
    (root / "config.json").write_text(json.dumps(kwargs))
    other = {**kwargs, "weights": {"en": 0.7, "fr": 0.3}}
    (root / "other.json").write_text(json.dumps(other))
    return root


def outcomes(directory: pathlib.Path) -> list[dict]:
    return [json.loads((directory / f"process_{p}.json").read_text()) for p in (0, 1)]


def test_processes_with_different_configs_both_raise_naming_the_difference(root):
    args = ["--mode", "build", "--config", str(root / "config.json")]
    args += ["--config-1", str(root / "other.json"), "--out", str(root / "differ")]
    launch(2, args, root / "logs_differ", timeout=30)
    for outcome in outcomes(root / "differ"):
        assert outcome["raised"] == "ProcessesDisagreeError"
        assert outcome["seconds"] < 30
        assert (
            "the 2 processes of this JAX job built different pipelines, so their global "
            "batches would not fit together: process 1 differs from process 0 in: weights: "
            "{'en': 0.5, 'fr': 0.5} -> {'en': 0.7, 'fr': 0.3}. Every process must build the "
            "same config from the same corpora"
        ) in outcome["message"]


def test_processes_with_the_same_config_agree(root):
    args = ["--mode", "build", "--config", str(root / "config.json"), "--out", str(root / "same")]
    launch(2, args, root / "logs_same", timeout=30)
    assert [o["raised"] for o in outcomes(root / "same")] == [None, None]


def test_a_restore_refused_on_one_process_is_refused_on_both_without_a_hang(root):
    common = ["--config", str(root / "config.json"), "--checkpoints", str(root / "ckpt")]
    launch(
        2, ["--mode", "save", *common, "--out", str(root / "save")], root / "logs_save", timeout=60
    )
    assert [o["raised"] for o in outcomes(root / "save")] == [None, None]
    data = root / "ckpt" / "2" / "data"
    launch(
        2, ["--mode", "restore", *common, "--out", str(root / "ok")], root / "logs_ok", timeout=60
    )
    assert [(o["raised"], o["step"]) for o in outcomes(root / "ok")] == [(None, 2), (None, 2)]

    state_file = data / "process_1-of-2.json"
    state = json.loads(state_file.read_text())
    state_file.write_text(json.dumps({**state, "digest": state["digest"] ^ 1 << 5}))  # one bit
    launch(
        2, ["--mode", "restore", *common, "--out", str(root / "bad")], root / "logs_bad", timeout=60
    )
    first, second = outcomes(root / "bad")
    assert second["raised"] == "ValueError"
    assert second["message"].startswith("resume verification failed: batch 1 recomputed")
    assert (
        f"field 'digest' is {state['digest'] ^ 1 << 5}, but the check value was computed "
        f"with {state['digest']}" in second["message"]
    )
    assert first["raised"] == "ProcessesDisagreeError"
    assert first["message"].startswith(
        "restore was refused on process 1 of 2, so it is refused on this process (0) too, "
        "rather than waiting for it: process 1 said: ValueError: resume verification failed"
    )
    assert max(first["seconds"], second["seconds"]) < 30
