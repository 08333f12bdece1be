"""Acceptance: 2 real JAX processes train, checkpoint with Orbax, resume on 2 and on 1.

``multihost_train.py`` (beside this file) is launched as subprocesses on 127.0.0.1 with two
CPU devices each. Launch A trains steps 0-2 on 2 processes and saves at step 3; launch B
restores on 2 processes and trains steps 3-5; launch C restores the same checkpoint on ONE
process (elastic) and trains steps 3-5. Every process dumps its local batches, the global
batches gathered from the global arrays, the loss and an exact token checksum; all must equal
a single-process run computed here.
"""

from __future__ import annotations

import functools
import json
import pathlib
import sys

import jax
import loopback
import numpy as np
import pytest

import grainpack as gp

WORKER = pathlib.Path(__file__).parents[1] / "multihost_train.py"
LAUNCH_TIMEOUT = 60  # seconds per launch (all its processes)
launch = functools.partial(loopback.launch, WORKER, timeout=LAUNCH_TIMEOUT)
SAVE_STEP, STEPS, BATCH = 3, 6, 8

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def rows_checksum(batch: dict[str, np.ndarray]) -> int:
    """The worker's jitted checksum, in numpy: sum(inputs * loss_mask + segment_ids)."""
    total = batch["inputs"].astype(np.int64) * batch["loss_mask"] + batch["segment_ids"]
    return int(total.sum())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Corpus + config, the three launches, and the single-process reference."""
    root = tmp_path_factory.mktemp("multihost")
    rng = np.random.default_rng(11)
    en = [rng.integers(1, 63, size=rng.integers(2, 40)) for _ in range(30)]
    fr = [rng.integers(1, 63, size=rng.integers(2, 15)) for _ in range(7)]
    gp.write_corpus(root / "en", en, shard_tokens=128)
    gp.write_corpus(root / "fr", fr)
    kwargs = {
        "sources": {"en": str(root / "en"), "fr": str(root / "fr")},
        "block": 8,
        "global_batch_size": BATCH,
        "seed": 3,
        "weights": {"en": 0.7, "fr": 0.3},
        "boundary_id": 63,
    }
    (root / "config.json").write_text(json.dumps(kwargs))
    common = ["--config", str(root / "config.json"), "--checkpoints", str(root / "ckpt")]
    first = ["--steps", str(SAVE_STEP), "--save-step", str(SAVE_STEP)]
    resume = ["--steps", str(STEPS), "--restore-step", str(SAVE_STEP)]
    launch(2, [*common, "--out", str(root / "A"), *first], root / "logs_A")
    launch(2, [*common, "--out", str(root / "B"), *resume], root / "logs_B")
    launch(1, [*common, "--out", str(root / "C"), *resume], root / "logs_C")

    it = iter(gp.make_dataset(gp.PipelineConfig(**kwargs), process_index=0, process_count=1))
    reference = [next(it) for _ in range(STEPS)]
    sys.path.insert(0, str(WORKER.parent))
    try:
        import multihost_train as worker
    finally:
        sys.path.remove(str(WORKER.parent))
    params, losses, step = worker.init_params(), [], jax.jit(worker.train_step)
    for batch in reference:
        params, loss, _ = step(params, batch)
        losses.append(float(loss))
    return {"root": root, "reference": reference, "losses": losses}


def load(directory: pathlib.Path, process: int) -> dict[str, np.ndarray]:
    with np.load(directory / f"process_{process}.npz") as data:
        return dict(data)


def check_launch(runs, name: str, process_count: int, steps: range, *, local=True) -> None:
    reference = runs["reference"]
    for p in range(process_count):
        out = load(runs["root"] / name, p)
        assert int(out["process_index"]) == p
        assert int(out["process_count"]) == process_count
        assert int(out["device_count"]) == 2 * process_count
        assert out["steps"].tolist() == list(steps)
        for i, t in enumerate(steps):
            expected = reference[t]
            for key, value in expected.items():
                if local:
                    np.testing.assert_array_equal(
                        out[f"local_{key}"][i],
                        value[p::process_count],
                        err_msg=f"{name} p{p} local {key} step {t}",
                    )
                gathered = out[f"global_{key}"][i]
                np.testing.assert_array_equal(
                    gathered[gp.index.slot_order(BATCH, process_count)],
                    value,
                    err_msg=f"{name} p{p} global {key} step {t}",
                )
            assert int(out["checksums"][i]) == rows_checksum(expected), f"{name} step {t}"
        np.testing.assert_allclose(
            out["losses"], [runs["losses"][t] for t in steps], rtol=1e-5, err_msg=name
        )


def test_two_processes_train_save_and_resume_like_one_process(runs):
    check_launch(runs, "A", 2, range(0, SAVE_STEP))
    check_launch(runs, "B", 2, range(SAVE_STEP, STEPS))
    data = runs["root"] / "ckpt" / str(SAVE_STEP) / "data"
    assert sorted(f.name for f in data.glob("process_*.json")) == [
        "process_0-of-2.json",
        "process_1-of-2.json",
    ]
    states = [json.loads((data / f"process_{p}-of-2.json").read_text()) for p in (0, 1)]
    assert [s["step"] for s in states] == [SAVE_STEP, SAVE_STEP]
    assert [(s["process_index"], s["process_count"]) for s in states] == [(0, 2), (1, 2)]


def test_two_process_checkpoint_resumes_elastically_on_one_process(runs):
    check_launch(runs, "C", 1, range(SAVE_STEP, STEPS))


@pytest.fixture(scope="module")
def compact_runs(runs):
    """The same run in the compact layout through ``prefetch_to_device`` (2 batches in
    flight when the checkpoint is taken): launch D trains steps 0-2 on 2 processes and saves
    at step 3, launch E restores on 2 processes and trains steps 3-5."""
    root = runs["root"]
    kwargs = json.loads((root / "config.json").read_text())
    (root / "compact.json").write_text(json.dumps({**kwargs, "layout": "compact"}))
    common = ["--config", str(root / "compact.json"), "--checkpoints", str(root / "ckpt_c")]
    common += ["--prefetch", "2"]
    first = ["--steps", str(SAVE_STEP), "--save-step", str(SAVE_STEP)]
    resume = ["--steps", str(STEPS), "--restore-step", str(SAVE_STEP)]
    launch(2, [*common, "--out", str(root / "D"), *first], root / "logs_D")
    launch(2, [*common, "--out", str(root / "E"), *resume], root / "logs_E")
    return runs


def test_compact_batches_expanded_on_two_processes_with_device_prefetch(compact_runs):
    # gp.expand inside the jitted step: the expanded global arrays, losses and checksums are
    # those of the full layout on one process; the checkpoint holds the consumed step
    check_launch(compact_runs, "D", 2, range(0, SAVE_STEP), local=False)
    check_launch(compact_runs, "E", 2, range(SAVE_STEP, STEPS), local=False)
    data = compact_runs["root"] / "ckpt_c" / str(SAVE_STEP) / "data"
    states = [json.loads((data / f"process_{p}-of-2.json").read_text()) for p in (0, 1)]
    assert [s["step"] for s in states] == [SAVE_STEP, SAVE_STEP]
