"""Per-process batches -> global jax.Arrays, and the slot order of their rows."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import grainpack as gp


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
    order = gp.slot_order(global_batch_size, process_count)
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
            np.testing.assert_array_equal(process_major[gp.slot_order(6, count)], value)
