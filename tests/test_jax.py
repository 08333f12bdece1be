"""Per-process batches -> global jax.Arrays, and the slot order of their rows."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import grain
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import grainpack as gp
from grainpack.pipeline.dataset import DIGEST_KEYS


def single_device_mesh() -> Mesh:
    return Mesh(np.array(jax.devices()[:1]), ("data",))


def test_make_global_batch_on_one_device_keeps_shape_values_and_dtype():
    batch = {
        "inputs": np.arange(12, dtype=np.int32).reshape(4, 3),
        "loss_mask": np.array([[1, 1, 0]] * 4, dtype=np.int32),
    }
    out = gp.make_global_batch(batch, single_device_mesh())
    assert sorted(out) == ["inputs", "loss_mask"]
    for key, value in out.items():
        assert isinstance(value, jax.Array)
        assert value.shape == (4, 3) and value.dtype == np.int32
        assert value.sharding.spec == PartitionSpec(("data",))
        np.testing.assert_array_equal(np.asarray(value), batch[key])
    assert np.asarray(out["inputs"])[3].tolist() == [9, 10, 11]


def test_make_global_batch_accepts_a_sharding():
    sharding = NamedSharding(single_device_mesh(), PartitionSpec("data"))
    out = gp.make_global_batch({"targets": np.ones((2, 5), np.int32)}, sharding)
    assert out["targets"].sharding == sharding
    assert int(out["targets"].sum()) == 10


def test_make_global_batch_cuts_a_two_axis_spec_for_per_row_arrays(tmp_path):
    compact, _ = compact_and_full(tmp_path, provenance=True)
    batch = next(iter(gp.make_dataset(compact, process_index=0, process_count=1)))
    sharding = NamedSharding(single_device_mesh(), PartitionSpec("data", None))
    out = gp.make_global_batch(batch, sharding)  # 1-D filled, source, epoch: a JAX error
    assert out["filled"].sharding.spec == PartitionSpec("data")
    assert out["tokens"].sharding.spec == PartitionSpec("data", None)
    for key, value in batch.items():
        np.testing.assert_array_equal(np.asarray(out[key]), value)
    pinned = NamedSharding(
        single_device_mesh(), PartitionSpec("data", None), memory_kind="pinned_host"
    )
    assert gp.make_global_batch(batch, pinned)["filled"].sharding.memory_kind == "pinned_host"


def test_make_global_batch_of_a_pipeline_batch(tmp_path):
    gp.write_corpus(tmp_path / "c", [np.arange(1, 30)] * 3)
    cfg = gp.PipelineConfig(sources={"c": str(tmp_path / "c")}, block=4, global_batch_size=2)
    batch = next(iter(gp.make_dataset(cfg, process_index=0, process_count=1)))
    out = gp.make_global_batch(batch, single_device_mesh())
    assert sorted(out) == sorted(batch)
    # documents 1..29 concatenated without boundaries: rows of block + 1 = 5 tokens
    assert np.asarray(out["inputs"]).tolist() == [[1, 2, 3, 4], [6, 7, 8, 9]]
    assert np.asarray(out["targets"]).tolist() == [[2, 3, 4, 5], [7, 8, 9, 10]]


def test_make_global_batch_rejects_other_sharding_types():
    with pytest.raises(TypeError, match="Sharding or Mesh; got list"):
        gp.make_global_batch({"inputs": np.zeros((2, 2), np.int32)}, ["data"])


@pytest.mark.slow
def test_make_global_batch_splits_rows_over_the_cpu_devices_of_one_process():
    script = textwrap.dedent(
        """
        import jax, numpy as np
        import grainpack as gp

        mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
        batch = {"inputs": np.arange(16, dtype=np.int32).reshape(8, 2)}
        out = gp.make_global_batch(batch, mesh)["inputs"]
        assert len(jax.devices()) == 4 and out.shape == (8, 2), (jax.devices(), out.shape)
        assert (np.asarray(out) == batch["inputs"]).all()
        for shard in sorted(out.addressable_shards, key=lambda s: s.device.id):
            print(shard.device.id, np.asarray(shard.data)[:, 0].tolist())
        """
    )
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
    }
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # device d holds rows 2d, 2d + 1 (inputs[:, 0] of row r is 2r)
    assert result.stdout.splitlines() == ["0 [0, 2]", "1 [4, 6]", "2 [8, 10]", "3 [12, 14]"]


@pytest.mark.parametrize(
    ("global_batch_size", "process_count", "expected"),
    [
        (4, 2, [0, 2, 1, 3]),
        (6, 2, [0, 3, 1, 4, 2, 5]),
        (6, 3, [0, 2, 4, 1, 3, 5]),
        (8, 4, [0, 2, 4, 6, 1, 3, 5, 7]),
        (5, 1, [0, 1, 2, 3, 4]),
        (3, 3, [0, 1, 2]),
    ],
)
def test_slot_order_golden(global_batch_size, process_count, expected):
    # global rows are process-major: row p * (B // P) + k holds slot p + k * P
    order = gp.index.slot_order(global_batch_size, process_count)
    assert order.tolist() == expected
    assert order.dtype == np.int64


def test_slot_order_reorders_process_major_rows_into_the_single_process_batch(tmp_path):
    gp.write_corpus(tmp_path / "c", [np.arange(1, 40) + 100 * i for i in range(6)])
    cfg = gp.PipelineConfig(sources={"c": str(tmp_path / "c")}, block=5, global_batch_size=6)
    single = next(iter(gp.make_dataset(cfg, process_index=0, process_count=1)))
    for count in (2, 3, 6):
        parts = [
            next(iter(gp.make_dataset(cfg, process_index=p, process_count=count)))
            for p in range(count)
        ]
        for key, value in single.items():
            process_major = np.concatenate([part[key] for part in parts])
            np.testing.assert_array_equal(process_major[gp.index.slot_order(6, count)], value)


# -- gp.expand: compact batches expanded on the device -------------------------------------


def compact_and_full(tmp_path, *, boundary_id=1000, unit="documents", **extra):
    rng = np.random.default_rng(8)
    docs = [rng.integers(1, 1000, size=rng.integers(1, 7)) for _ in range(300)]
    docs += [rng.integers(1, 1000, size=rng.integers(20, 90)) for _ in range(30)]
    gp.write_corpus(tmp_path / "c", docs, vocab_size=1001)
    if unit == "windows":
        boundary_id = None
    full = gp.PipelineConfig(
        sources={"c": str(tmp_path / "c")},
        block=29,
        global_batch_size=4,
        boundary_id=boundary_id,
        unit=unit,
        **extra,
    )
    return dataclasses.replace(full, layout="compact"), full


def assert_same_arrays(got, want, context=""):
    assert sorted(got) == sorted(want), context
    for key, value in want.items():
        array = np.asarray(got[key])
        assert array.dtype == value.dtype, f"{context} {key}"
        np.testing.assert_array_equal(array, value, err_msg=f"{context} {key}")


def test_expand_golden():
    batch = {
        "tokens": np.array([[34, 7, 10, 11], [0, 0, 0, 0], [12, 7, 20, 0]], np.uint16),
        "segment_starts": np.array([[0b10100000], [0], [0b10100000]], np.uint8),
        "filled": np.array([4, 0, 3], np.int32),
    }
    out = gp.expand(batch)
    assert sorted(out) == ["inputs", "loss_mask", "positions", "segment_ids", "targets"]
    assert all(v.dtype == np.int32 for v in out.values())
    assert np.asarray(out["inputs"]).tolist() == [[34, 7, 10], [0, 0, 0], [12, 7, 20]]
    assert np.asarray(out["targets"]).tolist() == [[7, 10, 11], [0, 0, 0], [7, 20, 0]]
    assert np.asarray(out["segment_ids"]).tolist() == [[1, 1, 2], [0, 0, 0], [1, 1, 2]]
    assert np.asarray(out["positions"]).tolist() == [[0, 1, 0], [0, 0, 0], [0, 1, 0]]
    assert np.asarray(out["loss_mask"]).tolist() == [[1, 1, 1], [0, 0, 0], [1, 1, 0]]
    maxtext = gp.expand(batch, maxtext_keys=True)
    with pytest.raises(TypeError, match="maxtext_keys must be True or False; got 'no'"):
        gp.expand(batch, maxtext_keys="no")  # was read as true
    assert sorted(maxtext) == [
        "inputs",
        "inputs_position",
        "inputs_segmentation",
        "targets",
        "targets_position",
        "targets_segmentation",
    ]
    assert np.asarray(maxtext["inputs_segmentation"]).tolist() == [[1, 1, 2], [0, 0, 0], [1, 1, 2]]
    assert np.asarray(maxtext["targets_segmentation"]).tolist() == [[1, 1, 2], [0, 0, 0], [1, 1, 0]]
    assert np.asarray(maxtext["targets_position"]).tolist() == [[0, 1, 0], [0, 0, 0], [0, 1, 0]]


@pytest.mark.parametrize(
    ("unit", "boundary_id"), [("documents", 1000), ("documents", None), ("windows", None)]
)
@pytest.mark.parametrize("process_count", [1, 2])
def test_expand_equals_the_full_layout_bit_for_bit(tmp_path, unit, boundary_id, process_count):
    compact, full = compact_and_full(tmp_path, unit=unit, boundary_id=boundary_id)
    compiled = gp.expand._cache_size()
    for p in range(process_count):
        got = iter(gp.make_dataset(compact, process_index=p, process_count=process_count))
        want = iter(gp.make_dataset(full, process_index=p, process_count=process_count))
        for step in range(40):
            assert_same_arrays(gp.expand(next(got)), next(want), f"p{p} step {step}")
    assert gp.expand._cache_size() <= compiled + 1  # fixed shapes: compiled once


def test_expand_of_global_arrays_of_two_processes(tmp_path):
    # The global arrays of 2 processes hold process 0's rows, then process 1's
    # (make_array_from_process_local_data); on one device they are the concatenation.
    compact, full = compact_and_full(tmp_path)
    mesh = single_device_mesh()
    parts = [iter(gp.make_dataset(compact, process_index=p, process_count=2)) for p in (0, 1)]
    want = [iter(gp.make_dataset(full, process_index=p, process_count=2)) for p in (0, 1)]
    for _ in range(20):
        local = [next(it) for it in parts]
        joined = {k: np.concatenate([b[k] for b in local]) for k in local[0]}
        out = gp.expand(gp.make_global_batch(joined, mesh))
        expected = [next(it) for it in want]
        assert_same_arrays(out, {k: np.concatenate([b[k] for b in expected]) for k in expected[0]})


def test_expand_inside_a_jitted_step_and_with_provenance(tmp_path):
    compact, full = compact_and_full(tmp_path, provenance=True)
    batch = next(iter(gp.make_dataset(compact, process_index=0, process_count=1)))
    want = next(iter(gp.make_dataset(full, process_index=0, process_count=1)))
    out = gp.expand(batch)
    np.testing.assert_array_equal(np.asarray(out["segment_document"]), want["segment_document"])

    @jax.jit
    def step(batch):
        arrays = gp.expand(batch)
        return jnp.sum(arrays["inputs"] * arrays["loss_mask"] + arrays["segment_ids"])

    total = want["inputs"].astype(np.int64) * want["loss_mask"] + want["segment_ids"]
    assert int(step(gp.make_global_batch(batch, single_device_mesh()))) == int(total.sum())


def test_expand_refuses_a_full_batch():
    with pytest.raises(ValueError, match=r"layout='compact'"):
        gp.expand({"inputs": np.zeros((2, 4), np.int32)})


def test_expand_and_make_global_batch_refuse_what_is_not_a_batch():
    tokens = np.zeros((3, 17), np.uint16)
    good = {"tokens": tokens, "segment_starts": np.zeros((3, 2), np.uint8), "filled": np.ones(3)}
    good["filled"] = good["filled"].astype(np.int32)
    bad = [
        ([1, 2], TypeError, "a mapping with keys"),
        (None, TypeError, "a mapping with keys"),
        (good | {"tokens": tokens[0]}, ValueError, r"tokens must be \(rows, block \+ 1\)"),
        # one byte too narrow: the missing starts were read as zeros
        (good | {"segment_starts": np.zeros((3, 1), np.uint8)}, ValueError, r"of shape \(3, 2\)"),
        (good | {"filled": np.ones((3, 1), np.int32)}, ValueError, r"filled of shape \(3,\)"),
        (good | {"filled": np.ones(2, np.int32)}, ValueError, "pass the arrays of one compact"),
        (good | {"segment_starts": np.zeros((3, 2))}, TypeError, "segment_starts must have uint8"),
        (good | {"filled": np.ones(3)}, TypeError, "filled must have an integer dtype"),
    ]
    for batch, error, match in bad:
        with pytest.raises(error, match=match):
            gp.expand(batch)
    assert gp.expand(good)["segment_ids"].shape == (3, 16)
    with pytest.raises(TypeError, match="batch must be a mapping of names to arrays"):
        gp.make_global_batch([tokens], single_device_mesh())
    for batch, sizes in [
        ({}, "of no array"),
        (good | {"filled": np.ones(2, np.int32)}, "'filled': 2"),  # ragged
        (good | {"filled": np.int32(3)}, "'filled': None"),  # a scalar
    ]:
        with pytest.raises(ValueError, match=f"first-axis sizes .*{sizes}"):
            gp.make_global_batch(batch, single_device_mesh())
    assert gp.make_global_batch(good, single_device_mesh())["filled"].shape == (3,)


@pytest.mark.slow
def test_expand_on_the_cpu_devices_of_one_process(tmp_path):
    compact, full = compact_and_full(tmp_path)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(compact.to_dict()))
    script = textwrap.dedent(
        f"""
        import json, jax, numpy as np
        import grainpack as gp

        config = gp.PipelineConfig.from_dict(json.load(open({str(config)!r})))
        mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
        it = iter(gp.make_dataset(config, process_index=0, process_count=1))
        out = [gp.expand(gp.make_global_batch(next(it), mesh)) for _ in range(5)]
        assert len(jax.devices()) == 4 and len(out[0]["inputs"].addressable_shards) == 4
        np.savez({str(tmp_path / "out.npz")!r}, **{{
            f"{{k}}_{{i}}": np.asarray(v) for i, b in enumerate(out) for k, v in b.items()
        }})
        """
    )
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
    }
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    want = iter(gp.make_dataset(full, process_index=0, process_count=1))
    with np.load(tmp_path / "out.npz") as got:
        for i in range(5):
            assert_same_arrays({k: got[f"{k}_{i}"] for k in DIGEST_KEYS}, next(want), f"{i}")


# -- gp.prefetch_to_device ----------------------------------------------------------------


def prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "grainpack-prefetch"]


def wait_until(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.mark.parametrize("layout", ["full", "compact"])
def test_prefetch_checkpoint_with_batches_in_flight_resumes_at_the_consumed_step(tmp_path, layout):
    compact, full = compact_and_full(tmp_path)
    config = compact if layout == "compact" else full
    reference = iter(gp.make_dataset(config, process_index=0, process_count=1))
    expected = [next(reference) for _ in range(9)]
    mesh = single_device_mesh()
    inner = iter(gp.make_dataset(config, process_index=0, process_count=1))
    batches = gp.prefetch_to_device(inner, mesh, size=3)
    for step in range(4):
        assert_same_arrays(batches.__next__(), expected[step], f"step {step}")
    wait_until(lambda: inner.step == 4 + 3)  # 3 on the devices
    time.sleep(0.2)
    assert inner.step == 4 + 3  # and no more
    state = batches.get_state()
    assert state == reference.state_after(4)  # the consumed step, with its digest
    assert json.loads(json.dumps(state)) == state
    for step in range(4, 6):  # the uninterrupted run goes on
        assert_same_arrays(next(batches), expected[step], f"step {step}")

    fresh = gp.prefetch_to_device(
        iter(gp.make_dataset(config, process_index=0, process_count=1)), mesh, size=2
    )
    fresh.set_state(state)
    for step in range(4, 9):
        assert_same_arrays(next(fresh), expected[step], f"resumed step {step}")
    batches.close()
    fresh.close()
    assert prefetch_threads() == []


def test_prefetch_keeps_the_consumed_step_when_a_state_is_refused(tmp_path):
    _, full = compact_and_full(tmp_path)
    expected = list(itertools.islice(gp.make_dataset(full, process_index=0, process_count=1), 5))
    other = dataclasses.replace(full, seed=full.seed + 1)
    foreign = iter(gp.make_dataset(other, process_index=0, process_count=1)).state_after(2)
    inner = iter(gp.make_dataset(full, process_index=0, process_count=1))
    with gp.prefetch_to_device(inner, single_device_mesh(), size=2) as batches:
        for step in range(3):
            assert_same_arrays(next(batches), expected[step], f"step {step}")
        wait_until(lambda: inner.step == 3 + 2)
        with pytest.raises(ValueError, match="another pipeline config"):
            batches.set_state(foreign)
        assert batches.get_state()["step"] == 3  # the batches in flight are not skipped
        for step in range(3, 5):
            assert_same_arrays(next(batches), expected[step], f"step {step}")


def test_prefetch_close_stops_the_thread_and_rewinds_to_the_consumed_step(tmp_path):
    _, full = compact_and_full(tmp_path)
    expected = list(itertools.islice(gp.make_dataset(full, process_index=0, process_count=1), 6))
    inner = iter(gp.make_dataset(full, process_index=0, process_count=1))
    batches = gp.prefetch_to_device(inner, single_device_mesh(), size=2)
    assert batches.get_state()["step"] == 0 and prefetch_threads() == []  # lazily started
    next(batches)
    wait_until(lambda: inner.step == 3)
    assert len(prefetch_threads()) == 1
    batches.close()
    assert prefetch_threads() == [] and inner.step == 1
    assert batches.get_state() == inner.get_state()
    for step in range(1, 4):  # iterating again restarts the thread where the consumer was
        assert_same_arrays(next(batches), expected[step], f"step {step}")
    with batches:  # as a context manager: closed on exit
        assert_same_arrays(next(batches), expected[4], "step 4")
    assert prefetch_threads() == [] and inner.step == 5


def test_prefetch_of_a_finite_grain_iterator_and_its_errors(tmp_path):
    _, full = compact_and_full(tmp_path)
    evaluation = gp.make_eval_dataset(full, process_index=0, process_count=1)
    expected = list(evaluation)
    batches = gp.prefetch_to_device(iter(evaluation), single_device_mesh())
    got = list(batches)
    assert len(got) == len(expected)
    for out, want in zip(got, expected):
        assert_same_arrays(out, want)
    assert batches.get_state() == {"next_index": len(expected)}  # Grain's own state
    with pytest.raises(StopIteration):
        next(batches)

    failing = grain.MapDataset.range(5).map(lambda i: {"x": np.full(2, 10 // (3 - i))})
    batches = gp.prefetch_to_device(iter(failing.to_iter_dataset()), single_device_mesh())
    assert [int(next(batches)["x"][0]) for _ in range(3)] == [3, 5, 10]
    with pytest.raises(ZeroDivisionError):
        next(batches)
    assert batches.get_state() == {"next_index": 3} and prefetch_threads() == []


@pytest.mark.parametrize("error", [SystemExit, KeyboardInterrupt, GeneratorExit, RuntimeError])
def test_prefetch_hands_any_exception_of_the_iterator_to_the_consumer(error):
    def fail(i):
        if i == 2:
            raise error("stop")
        return {"x": np.full(2, i)}

    failing = grain.MapDataset.range(5).map(fail).to_iter_dataset()
    batches = gp.prefetch_to_device(iter(failing), single_device_mesh())
    assert [int(next(batches)["x"][0]) for _ in range(2)] == [0, 1]
    with pytest.raises(error, match="stop"):  # it hung: the thread died and next() waited
        next(batches)
    assert batches.get_state() == {"next_index": 2} and prefetch_threads() == []


def test_prefetch_of_a_data_loader_checkpoints_with_orbax(tmp_path):
    import orbax.checkpoint as ocp

    _, full = compact_and_full(tmp_path)
    expected = list(itertools.islice(gp.make_dataset(full, process_index=0, process_count=1), 6))
    mesh = single_device_mesh()

    def loader_batches():
        loader = gp.pipeline.make_data_loader(full, process_index=0, process_count=1)
        return gp.prefetch_to_device(iter(loader), mesh, size=2)

    batches = loader_batches()
    for step in range(3):
        assert_same_arrays(next(batches), expected[step], f"step {step}")
    with ocp.CheckpointManager(tmp_path / "ckpt") as manager:
        # the loader's state is JSON bytes; Grain's handler writes a DatasetIterator's as JSON
        manager.save(3, args=ocp.args.Composite(data=gp.CheckpointSave(batches)))
        manager.wait_until_finished()
        batches.close()
        fresh = loader_batches()
        manager.restore(3, args=ocp.args.Composite(data=gp.CheckpointRestore(fresh)))
    for step in range(3, 6):
        assert_same_arrays(next(fresh), expected[step], f"resumed step {step}")
    fresh.close()


def test_prefetch_reads_no_state_until_asked(tmp_path):
    # a restored pipeline recomputes its last batch for get_state: not at construction
    _, full = compact_and_full(tmp_path)
    inner = iter(gp.make_dataset(full, process_index=0, process_count=1))
    asked = []
    get_state = inner.get_state
    inner.get_state = lambda: asked.append(1) or get_state()
    batches = gp.prefetch_to_device(inner, single_device_mesh())
    assert asked == []
    batches.close()


def test_prefetch_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="size must be an int >= 1"):
        gp.prefetch_to_device(iter([]), single_device_mesh(), size=0)
    with pytest.raises(TypeError, match="get_state/set_state"):
        gp.prefetch_to_device(iter([]), single_device_mesh())


def test_prefetch_state_of_a_blocked_order_counts_the_consumed_step(tmp_path):
    # A blocked-order state carries per-source counts: they must be those of the consumed
    # step, not of the step read ahead.
    rng = np.random.default_rng(3)
    paths = {}
    for name, n in (("a", 40), ("b", 25)):
        paths[name] = str(tmp_path / name)
        gp.write_corpus(paths[name], [rng.integers(1, 99, rng.integers(2, 30)) for _ in range(n)])
    config = gp.PipelineConfig(
        sources=paths, block=8, global_batch_size=4, order=gp.BlockedOrder(4, 2), seed=1
    )
    plain = iter(gp.make_dataset(config, process_index=0, process_count=1))
    for _ in range(4):
        next(plain)
    inner = iter(gp.make_dataset(config, process_index=0, process_count=1))
    batches = gp.prefetch_to_device(inner, single_device_mesh(), size=3)
    for _ in range(4):
        next(batches)
    wait_until(lambda: inner.step == 4 + 3)
    state = batches.get_state()
    assert state == plain.get_state() and "counts" in state and sum(state["counts"]) == 16
    batches.close()
