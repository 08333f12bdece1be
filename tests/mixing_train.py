"""One process of an online-mixing run, launched by ``tests/curriculum/test_mixture.py``.

Every process builds the pipeline from ``--config`` (``PipelineConfig`` arguments without
``weights``) with ``weights=gp.curriculum.MixtureBandit(...)`` from ``--bandit`` (its keyword
arguments), trains a tiny linear LM with a jitted step on the global arrays, and feeds the
bandit the per-source mean loss of each stage. The per-row losses and sources are gathered
from every process (``process_allgather``: the same bits everywhere) and reduced in numpy in
a fixed order, so every process reports the same rewards. At ``--save-step`` (a stage
boundary, after that stage's update) it saves the train state, the data iterator and the
bandit's state with Orbax; with ``--restore-step`` it restores them (the bandit first) and
continues. It writes ``--out``/``process_{i}.json``: the bandit's decided weights, the
rewards reported and a digest of its local batch per step.

Usage (one line per process; ``--num-processes 1`` skips ``jax.distributed``)::

    JAX_PLATFORMS=cpu python tests/mixing_train.py --config cfg.json --bandit bandit.json \
        --checkpoints ckpt --out out --steps 15 --save-step 9 --process-id 0 \
        --num-processes 2 --port 12345
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
from grainpack.pipeline.dataset import batch_digest

VOCAB = 64
WIDTH = 8
LEARNING_RATE = 0.5
MODEL_KEYS = ("inputs", "targets", "loss_mask", "source")


def init_params() -> dict[str, Any]:
    k1, k2 = jax.random.split(jax.random.key(0))
    return {
        "embed": 0.1 * jax.random.normal(k1, (VOCAB, WIDTH)),
        "out": 0.1 * jax.random.normal(k2, (WIDTH, VOCAB)),
    }


def row_losses(params: dict[str, Any], batch: dict[str, Any]) -> Any:
    """Mean next-token cross-entropy of every row over its real targets."""
    logits = params["embed"][batch["inputs"]] @ params["out"]
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), batch["targets"][..., None], -1)[..., 0]
    mask = batch["loss_mask"].astype(jnp.float32)
    return jnp.sum(nll * mask, axis=1) / jnp.maximum(jnp.sum(mask, axis=1), 1.0)


def train_step(params: dict[str, Any], batch: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """One SGD step on the mean row loss; returns the new params and the per-row losses."""

    def loss_fn(p: dict[str, Any]) -> tuple[Any, Any]:
        rows = row_losses(p, batch)
        return jnp.mean(rows), rows

    (_, rows), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    return jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads), rows


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="JSON of PipelineConfig kwargs")
    parser.add_argument("--bandit", required=True, help="JSON of MixtureBandit kwargs")
    parser.add_argument("--checkpoints", required=True, help="Orbax CheckpointManager dir")
    parser.add_argument("--out", required=True, help="directory for process_{i}.json")
    parser.add_argument("--steps", type=int, required=True, help="train until this step")
    parser.add_argument("--save-step", type=int, default=None)
    parser.add_argument("--restore-step", type=int, default=None)
    parser.add_argument("--process-id", type=int, default=0)
    parser.add_argument("--num-processes", type=int, default=1)
    parser.add_argument("--port", type=int, default=None)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    flags.FLAGS.mark_as_parsed()  # grain 0.2.18 reads absl flags (google/grain#1355)
    args = parse_args(argv)
    if args.num_processes > 1:
        loopback.initialize(args.port, args.num_processes, args.process_id)

    kwargs = json.loads(pathlib.Path(args.config).read_text())
    bandit = gp.curriculum.MixtureBandit(
        list(kwargs["sources"]), **json.loads(pathlib.Path(args.bandit).read_text())
    )
    config = gp.PipelineConfig(**kwargs, weights=bandit, provenance=True)
    iterator = iter(gp.make_dataset(config))  # process index/count from jax
    mesh = Mesh(np.array(jax.devices()), ("data",))
    replicated = NamedSharding(mesh, PartitionSpec())
    params = jax.device_put(init_params(), replicated)
    step_fn = jax.jit(train_step)
    manager = ocp.CheckpointManager(
        pathlib.Path(args.checkpoints).absolute(),
        options=ocp.CheckpointManagerOptions(create=True),
    )

    start = 0
    if args.restore_step is not None:
        start = args.restore_step
        # The bandit first: the iterator's set_state recomputes the last batch, whose
        # stage weights it decided.
        saved = manager.restore(start, args=ocp.args.Composite(mix=ocp.args.JsonRestore()))
        bandit.load_state_dict(saved["mix"])
        abstract = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated), params
        )
        restored = manager.restore(
            start,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract), data=gp.CheckpointRestore(iterator)
            ),
        )
        params = restored["state"]

    n = len(config.sources)
    sums, counts = np.zeros(n), np.zeros(n)
    digests, rewards = [], []
    for step in range(start, args.steps):
        local = next(iterator)
        digests.append(batch_digest(local))
        global_batch = gp.make_global_batch({k: local[k] for k in MODEL_KEYS}, mesh)
        params, rows = step_fn(params, global_batch)
        # Every process gathers the same bits and reduces them in the same order.
        losses = np.asarray(multihost_utils.process_allgather(rows, tiled=True), np.float64)
        source = np.asarray(multihost_utils.process_allgather(global_batch["source"], tiled=True))
        sums += np.bincount(source, weights=losses, minlength=n)
        counts += np.bincount(source, minlength=n)
        if (step + 1) % bandit.stage_steps == 0:  # the stage is over: report it
            with np.errstate(invalid="ignore"):
                reward = (sums / counts).tolist()  # NaN: a source without rows
            bandit.update(bandit.stage_of(step), reward)
            rewards.append(reward)
            sums, counts = np.zeros(n), np.zeros(n)
        if step + 1 == args.save_step:
            manager.save(
                step + 1,
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave(params),
                    data=gp.CheckpointSave(iterator),
                    mix=ocp.args.JsonSave(bandit.state_dict()),
                ),
            )
    manager.wait_until_finished()
    manager.close()
    iterator.close()

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "process_index": jax.process_index(),
        "process_count": jax.process_count(),
        "steps": list(range(start, args.steps)),
        "digests": digests,
        "rewards": rewards,
        "history": [list(w) for w in bandit.history],
    }
    (out / f"process_{jax.process_index()}.json").write_text(json.dumps(record))
    if args.num_processes > 1:
        jax.distributed.shutdown()


if __name__ == "__main__":
    main()
