"""Orbax checkpoints of grainpack iterators: round trips, DataLoader, elastic restore, fresh
processes, and the README training-loop example."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import grain
import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from etils import epath

import grainpack as gp
from grainpack import orbax as gp_orbax
from grainpack.orbax import DataCheckpointHandler

REPO = pathlib.Path(__file__).resolve().parents[1]
TIMEOUT = 120  # seconds for any subprocess of these tests


@pytest.fixture
def config(tmp_path) -> gp.PipelineConfig:
    rng = np.random.default_rng(3)
    docs = [rng.integers(1, 500, size=rng.integers(1, 25)) for _ in range(30)]
    gp.write_corpus(tmp_path / "en", docs, shard_tokens=100)
    gp.write_corpus(tmp_path / "fr", [rng.integers(1, 500, size=9) for _ in range(5)])
    return gp.PipelineConfig(
        sources={"en": str(tmp_path / "en"), "fr": str(tmp_path / "fr")},
        block=8,
        global_batch_size=4,
        seed=5,
        weights={"en": 0.75, "fr": 0.25},
        boundary_id=500,
    )


def take(iterator, n: int) -> list:
    return [next(iterator) for _ in range(n)]


def assert_batches_equal(got: list, expected: list) -> None:
    assert len(got) == len(expected)
    for t, (a, b) in enumerate(zip(got, expected)):
        assert sorted(a) == sorted(b)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"{key} of batch {t}")


def manager(directory: pathlib.Path) -> ocp.CheckpointManager:
    options = ocp.CheckpointManagerOptions(max_to_keep=3, create=True)
    return ocp.CheckpointManager(directory, options=options)


def save(directory: pathlib.Path, step: int, iterator, params=None, data_args=gp.CheckpointSave):
    mngr = manager(directory)
    params = {"w": np.arange(6, dtype=np.float32)} if params is None else params
    mngr.save(
        step,
        args=ocp.args.Composite(state=ocp.args.StandardSave(params), data=data_args(iterator)),
    )
    mngr.wait_until_finished()
    mngr.close()


def restore(directory: pathlib.Path, step: int, iterator) -> dict:
    mngr = manager(directory)
    restored = mngr.restore(
        step,
        args=ocp.args.Composite(
            state=ocp.args.StandardRestore({"w": np.zeros(6, np.float32)}),
            data=gp.CheckpointRestore(iterator),
        ),
    )
    mngr.close()
    return restored


def write_states(directory: pathlib.Path, states: list) -> None:
    """Writes per-process states as Grain's handler does: process_{i}-of-{n}.json."""
    directory.mkdir(parents=True, exist_ok=True)
    for p, state in enumerate(states):
        text = json.dumps(state, indent=4) if isinstance(state, dict) else state.decode()
        (directory / f"process_{p}-of-{len(states)}.json").write_text(text)


def test_orbax_round_trip_into_fresh_iterator_continues_identically(config, tmp_path):
    it = iter(gp.make_dataset(config, process_index=0, process_count=1))
    take(it, 3)
    save(tmp_path / "ckpt", 3, it, params={"w": np.arange(6, dtype=np.float32) * 2})
    expected = take(it, 5)

    fresh = iter(gp.make_dataset(config, process_index=0, process_count=1))
    restored = restore(tmp_path / "ckpt", 3, fresh)
    assert restored["data"] is fresh
    assert fresh.get_state()["step"] == 3
    np.testing.assert_array_equal(restored["state"]["w"], np.arange(6) * 2)
    assert_batches_equal(take(fresh, 5), expected)


def test_orbax_keeps_three_checkpoints_and_restores_an_older_step(config, tmp_path):
    it = iter(gp.make_dataset(config, process_index=1, process_count=2))
    reference = take(iter(gp.make_dataset(config, process_index=1, process_count=2)), 10)
    for step in (2, 4, 6, 8):
        take(it, 2)
        save(tmp_path / "ckpt", step, it)
    assert manager(tmp_path / "ckpt").all_steps() == [4, 6, 8]
    fresh = iter(gp.make_dataset(config, process_index=1, process_count=2))
    restore(tmp_path / "ckpt", 4, fresh)
    assert_batches_equal(take(fresh, 6), reference[4:])


@pytest.mark.slow
@pytest.mark.parametrize(("save_workers", "restore_workers"), [(2, 2), (2, 0)])
def test_orbax_round_trip_with_worker_processes(config, tmp_path, save_workers, restore_workers):
    reference = take(iter(gp.make_dataset(config, process_index=0, process_count=2)), 7)
    it = iter(gp.make_dataset(config, process_index=0, process_count=2, worker_count=save_workers))
    try:
        assert_batches_equal(take(it, 3), reference[:3])
        save(tmp_path / "ckpt", 3, it)
        assert_batches_equal(take(it, 2), reference[3:5])
    finally:
        it.close()
    fresh = iter(
        gp.make_dataset(config, process_index=0, process_count=2, worker_count=restore_workers)
    )
    try:
        restore(tmp_path / "ckpt", 3, fresh)
        assert_batches_equal(take(fresh, 4), reference[3:])
    finally:
        fresh.close()


def test_wrapped_dataset_iterator_round_trips(config, tmp_path):
    def rows_sum(batch):
        return batch["inputs"].sum(axis=1)

    it = iter(gp.make_dataset(config, process_index=0, process_count=1).map(rows_sum))
    take(it, 2)
    save(tmp_path / "ckpt", 2, it)
    expected = take(it, 3)
    fresh = iter(gp.make_dataset(config, process_index=0, process_count=1).map(rows_sum))
    restore(tmp_path / "ckpt", 2, fresh)
    for a, b in zip(take(fresh, 3), expected):
        np.testing.assert_array_equal(a, b)


def test_a_wrapped_iterator_saves_its_description_and_names_changes(config, tmp_path):
    # make_dataset(...).map(f), also under prefetch_to_device: the description is the
    # pipeline's, and a refused restore says what changed.
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
    for k, wrap in enumerate((lambda it: it, lambda it: gp.prefetch_to_device(it, mesh))):
        ds = gp.make_dataset(config, process_index=0, process_count=1)
        it = wrap(iter(ds.map(lambda b: {"inputs": b["inputs"]})))
        take(it, 2)
        save(tmp_path / f"ckpt{k}", 2, it)
        assert (tmp_path / f"ckpt{k}" / "2" / "data" / "pipeline_0-of-1.json").exists()
        other = dataclasses.replace(config, seed=config.seed + 1)
        ds = gp.make_dataset(other, process_index=0, process_count=1)
        fresh = wrap(iter(ds.map(lambda b: {"inputs": b["inputs"]})))
        with pytest.raises(ValueError, match="What changed: seed: 5 -> 6"):
            restore(tmp_path / f"ckpt{k}", 2, fresh)
        if k:
            it.close()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda f: f.write_text(f.read_text()[:20]), "state is damaged .JSONDecodeError"),
        (lambda f: f.write_bytes(b"\xff\xfe"), "state is damaged .UnicodeDecodeError"),
        (lambda f: f.write_text("[" * 100_000), "state is damaged .RecursionError"),
        (lambda f: (f.unlink(), f.mkdir()), "cannot read the data iterator's state"),
    ],
    ids=["truncated", "binary", "nested", "directory"],
)
def test_a_damaged_state_file_is_named(config, tmp_path, damage, message):
    it = iter(gp.make_dataset(config, process_index=0, process_count=1))
    take(it, 2)
    save(tmp_path / "ckpt", 2, it)
    damage(tmp_path / "ckpt" / "2" / "data" / "process_0-of-1.json")
    fresh = iter(gp.make_dataset(config, process_index=0, process_count=1))
    with pytest.raises(ValueError, match=f"process_0-of-1.json: .*{message}"):
        restore(tmp_path / "ckpt", 2, fresh)


@pytest.mark.parametrize(
    "data_args", [grain.checkpoint.CheckpointSave, gp.CheckpointSave], ids=["grain", "grainpack"]
)
def test_data_loader_round_trip_same_process_count(config, tmp_path, data_args):
    it = iter(gp.pipeline.make_data_loader(config, process_index=1, process_count=2))
    take(it, 3)
    save(tmp_path / "ckpt", 3, it, data_args=data_args)
    expected = take(it, 3)
    fresh = iter(gp.pipeline.make_data_loader(config, process_index=1, process_count=2))
    restore(tmp_path / "ckpt", 3, fresh)
    assert_batches_equal(take(fresh, 3), expected)


def test_handler_restores_two_process_states_on_one_process(config, tmp_path):
    iterators = [iter(gp.make_dataset(config, process_index=p, process_count=2)) for p in (0, 1)]
    for it in iterators:
        take(it, 3)
    write_states(tmp_path / "data", [it.get_state() for it in iterators])
    single = iter(gp.make_dataset(config, process_index=0, process_count=1))
    uninterrupted = take(single, 7)[3:]

    fresh = iter(gp.make_dataset(config, process_index=0, process_count=1))
    out = DataCheckpointHandler().restore(
        epath.Path(tmp_path / "data"), args=gp.CheckpointRestore(fresh)
    )
    assert out is fresh and fresh.get_state()["step"] == 3
    assert_batches_equal(take(fresh, 4), uninterrupted)


def test_handler_restores_two_process_states_on_four_processes(config, tmp_path, monkeypatch):
    iterators = [iter(gp.make_dataset(config, process_index=p, process_count=2)) for p in (0, 1)]
    for it in iterators:
        take(it, 5)
    write_states(tmp_path / "data", [it.get_state() for it in iterators])
    uninterrupted = take(iter(gp.make_dataset(config, process_index=0, process_count=1)), 7)[5:]

    restored = []
    for p in range(4):
        monkeypatch.setattr(gp_orbax, "process_index_and_count", lambda p=p: (p, 4))
        it = iter(gp.make_dataset(config, process_index=p, process_count=4))
        DataCheckpointHandler().restore(
            epath.Path(tmp_path / "data"), args=gp.CheckpointRestore(it)
        )
        restored.append(take(it, 2))
    for t, expected in enumerate(uninterrupted):
        for key, value in expected.items():
            interleaved = np.empty_like(value)
            for p in range(4):
                interleaved[p::4] = restored[p][t][key]
            np.testing.assert_array_equal(interleaved, value, err_msg=f"{key} of step {t}")


def test_handler_refuses_data_loader_state_from_another_process_count(config, tmp_path):
    states = []
    for p in (0, 1):
        it = iter(gp.pipeline.make_data_loader(config, process_index=p, process_count=2))
        take(it, 2)
        states.append(it.get_state())
    write_states(tmp_path / "data", states)
    fresh = iter(gp.pipeline.make_data_loader(config, process_index=0, process_count=1))
    with pytest.raises(ValueError, match=r"only grainpack\.make_dataset iterators restore"):
        DataCheckpointHandler().restore(
            epath.Path(tmp_path / "data"), args=gp.CheckpointRestore(fresh)
        )


def test_handler_without_a_single_saved_layout_is_a_clear_error(config, tmp_path):
    fresh = iter(gp.make_dataset(config, process_index=0, process_count=1))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"no single set of process_\*-of-\*.json"):
        DataCheckpointHandler().restore(
            epath.Path(tmp_path / "empty"), args=gp.CheckpointRestore(fresh)
        )
    state = iter(gp.make_dataset(config, process_index=0, process_count=2)).get_state()
    write_states(tmp_path / "mixed", [state, state])
    write_states(tmp_path / "mixed", [state, state, state])
    with pytest.raises(ValueError, match=r"process counts found: \[2, 3\]"):
        DataCheckpointHandler().restore(
            epath.Path(tmp_path / "mixed"), args=gp.CheckpointRestore(fresh)
        )


def test_saved_state_file_picks_own_file_else_modulo_of_saved_layout(tmp_path):
    write_states(tmp_path, [{"a": 0}, {"a": 1}, {"a": 2}])
    names = [
        gp_orbax.saved_state_file(tmp_path, p, n).name
        for p, n in [(1, 3), (0, 1), (3, 4), (4, 5), (1, 2)]
    ]
    assert names == [
        "process_1-of-3.json",
        "process_0-of-3.json",
        "process_0-of-3.json",
        "process_1-of-3.json",
        "process_1-of-3.json",
    ]


@pytest.mark.slow
def test_restore_in_a_fresh_process_continues_identically(config, tmp_path):
    it = iter(gp.make_dataset(config, process_index=0, process_count=1))
    take(it, 4)
    save(tmp_path / "ckpt", 4, it)
    expected = take(it, 3)
    (tmp_path / "config.json").write_text(json.dumps(config.to_dict()))
    script = textwrap.dedent(
        """
        import json, sys
        from absl import flags
        import numpy as np
        import orbax.checkpoint as ocp
        import grainpack as gp

        if __name__ == "__main__":
            flags.FLAGS.mark_as_parsed()
            config_path, ckpt, out = sys.argv[1:]
            config = gp.PipelineConfig.from_dict(json.load(open(config_path)))
            it = iter(gp.make_dataset(config))
            mngr = ocp.CheckpointManager(ckpt)
            mngr.restore(mngr.latest_step(), args=ocp.args.Composite(
                data=gp.CheckpointRestore(it)))
            batches = [next(it) for _ in range(3)]
            np.savez(out, **{f"{t}_{k}": v for t, b in enumerate(batches) for k, v in b.items()})
        """
    )
    (tmp_path / "resume.py").write_text(script)
    result = subprocess.run(
        [
            sys.executable,
            str(tmp_path / "resume.py"),
            str(tmp_path / "config.json"),
            str(tmp_path / "ckpt"),
            str(tmp_path / "out.npz"),
        ],
        cwd=tmp_path,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    with np.load(tmp_path / "out.npz") as out:
        got = [{k: out[f"{t}_{k}"] for k in expected[t]} for t in range(3)]
    assert_batches_equal(got, expected)


@pytest.mark.slow
def test_train_loop_example_resumes_identically():
    result = subprocess.run(
        [sys.executable, str(REPO / "examples" / "train_loop.py")],
        cwd=REPO,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resumed from step 3, identical: True" in result.stdout, result.stdout


def test_checkpoint_args_refuse_what_is_not_an_iterator():
    # None reached Orbax's save thread as an AttributeError
    for args, method in ((gp.CheckpointSave, "get_state"), (gp.CheckpointRestore, "set_state")):
        for item in (None, [], {"step": 1}):
            with pytest.raises(TypeError, match=f"takes the data iterator .*with {method}"):
                args(item)
