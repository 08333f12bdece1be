"""One process of a multi-host training run, launched by ``tests/e2e/test_multihost.py``.

Every process of a launch runs this script with its own ``--process-id``. It builds the
grainpack pipeline from ``--config`` (a JSON dict of ``PipelineConfig`` arguments), turns its
per-process batches into global arrays with ``make_global_batch``, runs a jitted SGD step of a
tiny linear LM on them, and saves the train state and the data iterator with Orbax at
``--save-step``. With ``--restore-step`` it first restores both (on any process count) and
continues. It writes what it consumed to ``--out``/``process_{i}.npz``: its local batches, the
global batches gathered from every process, the loss and an exact token checksum per step.
With ``--prefetch N`` it reads through ``grainpack.prefetch_to_device`` (N batches in flight,
checkpointed at the consumed step) and records global batches only; a compact-layout config
is expanded by ``grainpack.expand`` inside the jitted step (and for the record).

Usage (one line per process; ``--num-processes 1`` skips ``jax.distributed``)::

    JAX_PLATFORMS=cpu python tests/multihost_train.py --config cfg.json --checkpoints ckpt \
        --out out --steps 3 --save-step 3 --process-id 0 --num-processes 2 --port 12345
"""

from __future__ import annotations

import argparse
import json
import pathlib
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import loopback  # tests/ is sys.path[0]
import numpy as np
import orbax.checkpoint as ocp
from absl import flags
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import grainpack as gp

VOCAB = 64
WIDTH = 8
LEARNING_RATE = 0.5


def init_params() -> dict[str, Any]:
    """Deterministic initial parameters of the tiny LM (embedding + linear softmax)."""
    k1, k2 = jax.random.split(jax.random.key(0))
    return {
        "embed": 0.1 * jax.random.normal(k1, (VOCAB, WIDTH)),
        "out": 0.1 * jax.random.normal(k2, (WIDTH, VOCAB)),
    }


def loss_fn(params: dict[str, Any], batch: dict[str, Any]) -> Any:
    """Mean next-token cross-entropy over the positions whose ``loss_mask`` is 1."""
    logits = params["embed"][batch["inputs"]] @ params["out"]
    logp = jax.nn.log_softmax(logits)
    nll = -jnp.take_along_axis(logp, batch["targets"][..., None], axis=-1)[..., 0]
    mask = batch["loss_mask"].astype(jnp.float32)
    return jnp.sum(nll * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def train_step(params: dict[str, Any], batch: dict[str, Any]) -> tuple[dict[str, Any], Any, Any]:
    """One SGD step; returns the new params, the loss and an exact int checksum of the batch."""
    if "tokens" in batch:  # compact layout: expanded on the device, inside the step
        batch = gp.expand(batch)
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    params = jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads)
    checksum = jnp.sum(batch["inputs"] * batch["loss_mask"] + batch["segment_ids"])
    return params, loss, checksum


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="JSON file of PipelineConfig kwargs")
    parser.add_argument("--checkpoints", required=True, help="Orbax CheckpointManager dir")
    parser.add_argument("--out", required=True, help="directory for process_{i}.npz")
    parser.add_argument("--steps", type=int, required=True, help="train until this step")
    parser.add_argument("--save-step", type=int, default=None)
    parser.add_argument("--restore-step", type=int, default=None)
    parser.add_argument("--process-id", type=int, default=0)
    parser.add_argument("--num-processes", type=int, default=1)
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--prefetch", type=int, default=0, help="batches kept on the devices")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    flags.FLAGS.mark_as_parsed()  # grain 0.2.18 reads absl flags (google/grain#1355)
    args = parse_args(argv)

    if args.num_processes > 1:
        loopback.initialize(args.port, args.num_processes, args.process_id)

    config = gp.PipelineConfig(**json.loads(pathlib.Path(args.config).read_text()))
    iterator = iter(gp.make_dataset(config))  # process index/count from jax
    mesh = Mesh(np.array(jax.devices()), ("data",))
    if args.prefetch:
        iterator = gp.prefetch_to_device(iterator, mesh, size=args.prefetch)
    replicated = NamedSharding(mesh, PartitionSpec())
    params = jax.device_put(init_params(), replicated)
    step_fn = jax.jit(train_step)
    manager = ocp.CheckpointManager(
        pathlib.Path(args.checkpoints).absolute(),
        options=ocp.CheckpointManagerOptions(max_to_keep=3, create=True),
    )

    start = 0
    if args.restore_step is not None:
        abstract = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated), params
        )
        restored = manager.restore(
            args.restore_step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract), data=gp.CheckpointRestore(iterator)
            ),
        )
        params, start = restored["state"], args.restore_step
        if iterator.get_state()["step"] != start:
            raise RuntimeError(f"restored data step {iterator.get_state()} != {start}")

    steps, local, gathered, losses, checksums = [], [], [], [], []
    for step in range(start, args.steps):
        if args.prefetch:
            global_batch = next(iterator)
        else:
            local.append(next(iterator))
            global_batch = gp.make_global_batch(local[-1], mesh)
        params, loss, checksum = step_fn(params, global_batch)
        if "tokens" in global_batch:
            global_batch = gp.expand(global_batch)
        steps.append(step)
        gathered.append(multihost_utils.process_allgather(global_batch, tiled=True))
        losses.append(float(loss))
        checksums.append(int(checksum))
        if step + 1 == args.save_step:
            manager.save(
                step + 1,
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave(params), data=gp.CheckpointSave(iterator)
                ),
            )
    manager.wait_until_finished()
    manager.close()
    iterator.close()

    arrays = {
        "steps": np.array(steps, dtype=np.int64),
        "losses": np.array(losses, dtype=np.float64),
        "checksums": np.array(checksums, dtype=np.int64),
        "process_index": np.array(jax.process_index()),
        "process_count": np.array(jax.process_count()),
        "device_count": np.array(jax.device_count()),
    }
    for key in local[0] if local else ():
        arrays[f"local_{key}"] = np.stack([b[key] for b in local])
    for key in gathered[0] if gathered else ():
        arrays[f"global_{key}"] = np.stack([np.asarray(g[key]) for g in gathered])
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / f"process_{jax.process_index()}.npz", **arrays)
    if args.num_processes > 1:
        jax.distributed.shutdown()


if __name__ == "__main__":
    main()
