"""A training loop that can be killed anywhere, launched by ``tests/e2e/test_crash.py``.

Every process of a launch runs this script. It restores the latest Orbax checkpoint if there
is one (train state and data iterator, through ``grainpack.CheckpointRestore``), then for each
step: takes this process's batch from ``grainpack.make_dataset``, runs a jitted step on the
global batch (``acc = acc * 1000003 + sum(inputs * loss_mask)`` in uint32, an order-sensitive
checksum of everything trained on), appends ``"<step> <digest>"`` of its local batch to its log
file (fsync'd), and every ``--save-every`` steps saves ``{"step", "acc"}`` and the iterator.

Each launch first appends ``"start <step>"`` (the step it resumed from) to the log and ends
with ``"done <acc>"``. ``--kill STEP:PHASE`` makes the process SIGKILL itself during step
``STEP`` at ``PHASE``: ``before_log`` (batch taken, not logged), ``after_log`` (logged, not
saved) or ``after_save`` (``manager.save`` returned; the async commit may be in flight).
External kills (by the test) need no option: the process prints ``step <t>`` after logging.

Usage::

    JAX_PLATFORMS=cpu python tests/fault_train.py --config cfg.json --checkpoints ckpt \
        --log log --steps 30 --save-every 3 [--process-id 0 --num-processes 2 --port 1234]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import sys
from collections.abc import Sequence
from typing import Any

from absl import flags

flags.FLAGS.mark_as_parsed()  # grain 0.2.18 reads absl flags (google/grain#1355)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import loopback  # noqa: E402  (tests/ is sys.path[0])
import numpy as np  # noqa: E402
import orbax.checkpoint as ocp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

import grainpack as gp  # noqa: E402
from grainpack.pipeline.dataset import batch_digest  # noqa: E402

MULTIPLIER = 1000003
PHASES = ("before_log", "after_log", "after_save")


def train_step(state: dict[str, Any], batch: dict[str, Any]) -> dict[str, Any]:
    """``acc * MULTIPLIER + sum(inputs * loss_mask)`` modulo 2**32 (exact, order-sensitive)."""
    total = jnp.sum(batch["inputs"] * batch["loss_mask"]).astype(jnp.uint32)
    return {"step": state["step"] + 1, "acc": state["acc"] * jnp.uint32(MULTIPLIER) + total}


class Log:
    """Append-only text log; every line is flushed and fsync'd before the call returns."""

    def __init__(self, path: pathlib.Path) -> None:
        self._file = open(path, "a")  # noqa: SIM115

    def write(self, line: str) -> None:
        self._file.write(line + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())


def die() -> None:
    """SIGKILL this process: no cleanup, no atexit, no flush of anything not yet written."""
    os.kill(os.getpid(), signal.SIGKILL)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="JSON file of PipelineConfig kwargs")
    parser.add_argument("--checkpoints", required=True, help="Orbax CheckpointManager dir")
    parser.add_argument("--log", required=True, help="log file prefix (+ .<process>)")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--save-every", type=int, required=True)
    parser.add_argument("--kill", default=None, help="STEP:PHASE to SIGKILL itself at")
    parser.add_argument("--process-id", type=int, default=0)
    parser.add_argument("--num-processes", type=int, default=1)
    parser.add_argument("--port", type=int, default=None)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    kill_step, kill_phase = -1, ""
    if args.kill:
        step, kill_phase = args.kill.split(":")
        kill_step = int(step)
        if kill_phase not in PHASES:
            raise SystemExit(f"--kill phase must be one of {PHASES}; got {kill_phase!r}")
    if args.num_processes > 1:
        loopback.initialize(args.port, args.num_processes, args.process_id)

    config = gp.PipelineConfig(**json.loads(pathlib.Path(args.config).read_text()))
    iterator = iter(gp.make_dataset(config))  # process index and count from jax
    mesh = Mesh(np.array(jax.devices()), ("data",))
    replicated = NamedSharding(mesh, PartitionSpec())
    state = jax.device_put({"step": np.int32(0), "acc": np.uint32(0)}, replicated)
    step_fn = jax.jit(train_step, out_shardings=replicated)
    manager = ocp.CheckpointManager(
        pathlib.Path(args.checkpoints).absolute(),
        options=ocp.CheckpointManagerOptions(max_to_keep=2, create=True),
    )
    log = Log(pathlib.Path(f"{args.log}.{jax.process_index()}"))

    start = manager.latest_step()
    if start is None:
        start = 0
    else:
        abstract = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated), state
        )
        restored = manager.restore(
            start,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract), data=gp.CheckpointRestore(iterator)
            ),
        )
        state = restored["state"]
        if int(state["step"]) != start or iterator.get_state()["step"] != start:
            raise RuntimeError(
                f"checkpoint {start}: train step {int(state['step'])}, data state "
                f"{iterator.get_state()}"
            )
    log.write(f"start {start}")
    print("ready", flush=True)

    for t in range(start, args.steps):
        batch = next(iterator)
        if t == kill_step and kill_phase == "before_log":
            die()
        global_batch = gp.make_global_batch(batch, mesh)
        state = step_fn(state, global_batch)
        log.write(f"{t} {batch_digest(batch)}")
        print(f"step {t}", flush=True)
        if t == kill_step and kill_phase == "after_log":
            die()
        if (t + 1) % args.save_every == 0:
            manager.save(
                t + 1,
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave(state), data=gp.CheckpointSave(iterator)
                ),
            )
            if t == kill_step and kill_phase == "after_save":
                die()
    manager.wait_until_finished()
    manager.close()
    log.write(f"done {int(state['acc'])}")
    if args.num_processes > 1:
        jax.distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
