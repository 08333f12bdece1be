"""One process of the two-process demo in ``notebooks/multihost.ipynb``.

The notebook starts this script once per process. Each process joins a JAX cluster on
127.0.0.1 (CPU), builds the grainpack pipeline from ``--config`` (a JSON file of
``PipelineConfig`` keyword arguments), reads its own share of the first ``--steps`` global
batches, turns them into global ``jax.Array``s with ``make_global_batch``, runs one jitted
reduction over each global batch, and saves the data iterator with Orbax after
``--save-step`` batches. It writes what it saw to ``--out``/``process_{i}.json``.

Usage (one line per process, the same port for both)::

    JAX_PLATFORMS=cpu python multihost_worker.py --config cfg.json --out out \
        --checkpoints ckpt --process-id 0 --num-processes 2 --port 12345
"""

from __future__ import annotations

import argparse
import json
import pathlib
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from jax.sharding import Mesh

import grainpack as gp


@jax.jit
def checksum(global_batch: dict[str, jax.Array]) -> jax.Array:
    """Sum of the real input tokens: one computation over every process's rows."""
    return jnp.sum(global_batch["inputs"] * global_batch["loss_mask"])


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="JSON file of PipelineConfig kwargs")
    parser.add_argument("--out", required=True, help="directory for process_{i}.json")
    parser.add_argument("--checkpoints", required=True, help="Orbax CheckpointManager dir")
    parser.add_argument("--steps", type=int, default=3, help="global batches to read")
    parser.add_argument("--save-step", type=int, default=2, help="save after this many")
    parser.add_argument("--process-id", type=int, required=True)
    parser.add_argument("--num-processes", type=int, required=True)
    parser.add_argument("--port", type=int, required=True, help="coordinator port")
    return parser.parse_args(argv)


def describe(batch: dict[str, Any], global_batch: dict[str, jax.Array]) -> dict[str, Any]:
    """What this process holds of one global batch, as JSON-able data."""
    inputs = global_batch["inputs"]
    return {
        "local": {key: np.asarray(value).tolist() for key, value in batch.items()},
        "global_shape": list(inputs.shape),
        "sharding": str(inputs.sharding.spec),
        # Which rows of the global array live on this process's devices.
        "addressable_rows": sorted(
            [s.index[0].start or 0, s.index[0].stop or inputs.shape[0]]
            for s in inputs.addressable_shards
        ),
        "global_checksum": int(checksum(global_batch)),
    }


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{args.port}",
        num_processes=args.num_processes,
        process_id=args.process_id,
        initialization_timeout=30,
    )
    config = gp.PipelineConfig(**json.loads(pathlib.Path(args.config).read_text()))
    iterator = iter(gp.make_dataset(config))  # process index and count come from jax
    mesh = Mesh(np.array(jax.devices()), ("data",))
    manager = ocp.CheckpointManager(pathlib.Path(args.checkpoints).absolute())

    steps = []
    for step in range(args.steps):
        batch = next(iterator)
        steps.append(describe(batch, gp.make_global_batch(batch, mesh)))
        if step + 1 == args.save_step:
            manager.save(step + 1, args=ocp.args.Composite(data=gp.CheckpointSave(iterator)))
    manager.wait_until_finished()
    manager.close()

    report = {
        "process_index": jax.process_index(),
        "process_count": jax.process_count(),
        "local_devices": [str(d) for d in jax.local_devices()],
        "global_devices": [str(d) for d in jax.devices()],
        "steps": steps,
    }
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"process_{jax.process_index()}.json").write_text(json.dumps(report))
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
