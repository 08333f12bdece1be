"""Checkpoints on a newcomer's first hour (issue 38): a refused restore says what changed
once, by source name; a relative checkpoint path works in the README's training loop."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest
from etils import epath

import grainpack as gp
from grainpack.orbax import DataCheckpointHandler

REPO = Path(__file__).resolve().parents[1]


def test_a_refused_restore_says_what_changed_once_with_source_names(tmp_path):
    # Before: "... (A checkpoint saved with gp.CheckpointSave also names what changed.) What
    # changed: weights: [0.5, 0.5] -> [0.7, 0.3]."
    for name in ("en", "fr"):
        gp.write_corpus(tmp_path / name, [np.arange(1, 40)] * 4)
    sources = {name: str(tmp_path / name) for name in ("en", "fr")}
    base = dict(sources=sources, block=8, global_batch_size=4)
    it = iter(gp.make_dataset(gp.PipelineConfig(**base, weights={"en": 0.5, "fr": 0.5})))
    next(it)
    (tmp_path / "data").mkdir()
    DataCheckpointHandler().save(epath.Path(tmp_path / "data"), args=gp.CheckpointSave(it))
    fresh = iter(gp.make_dataset(gp.PipelineConfig(**base, weights={"en": 0.7, "fr": 0.3})))
    with pytest.raises(gp.ConfigMismatchError) as refused:
        DataCheckpointHandler().restore(
            epath.Path(tmp_path / "data"), args=gp.CheckpointRestore(fresh)
        )
    message = str(refused.value)
    assert "names what changed" not in message and message.count("changed") == 1
    assert message.endswith(
        "to accept the change. What changed: weights: {'en': 0.5, 'fr': 0.5} -> "
        "{'en': 0.7, 'fr': 0.3}."
    )
    with pytest.raises(gp.ConfigMismatchError, match=r"also names what changed\.\)$"):
        fresh.set_state(it.get_state())  # without the saved description: where to find it


@pytest.mark.slow
def test_the_readme_training_loop_takes_a_relative_workdir(tmp_path, monkeypatch, capsys):
    # Before: Orbax refused the relative checkpoint path in its save thread ("Checkpoint path
    # should be absolute. Got run/checkpoints/3.orbax-checkpoint-tmp/...").
    spec = importlib.util.spec_from_file_location("train_loop", REPO / "examples" / "train_loop.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    monkeypatch.chdir(tmp_path)
    os.mkdir("run")
    example.main("run")
    assert "resumed from step 3, identical: True" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["3"]
