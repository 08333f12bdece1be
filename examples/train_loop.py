"""Train a tiny LM on grainpack batches, save model + data state with Orbax, resume exactly."""

import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

import grainpack as gp
from grainpack.demo import BOUNDARY_ID, VOCAB_SIZE, write_demo_corpus


def loss_fn(params, batch):
    logits = params["embed"][batch["inputs"]] @ params["out"]
    logp = jax.nn.log_softmax(logits)
    nll = -jnp.take_along_axis(logp, batch["targets"][..., None], axis=-1)[..., 0]
    return jnp.sum(nll * batch["loss_mask"]) / jnp.maximum(jnp.sum(batch["loss_mask"]), 1)


@jax.jit
def train_step(params, batch):
    batch = gp.expand(batch)  # compact layout -> inputs, targets, ..., fused into the step
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    return jax.tree.map(lambda p, g: p - 5.0 * g, params, grads), loss  # plain SGD


def train(params, batches, steps):
    losses = []
    for _ in range(steps):
        params, loss = train_step(params, next(batches))  # global jax.Arrays on the mesh
        losses.append(float(loss))
    return params, losses


def main(workdir):
    config = gp.PipelineConfig(
        sources=write_demo_corpus(workdir),  # {"en": path, "el": path}, byte-level tokens
        block=128,
        global_batch_size=8,
        boundary_id=BOUNDARY_ID,
        layout="compact",  # tokens + segment starts: a tenth of the bytes to the devices
    )
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
    k1, k2 = jax.random.split(jax.random.key(0))
    params = {
        "embed": 0.1 * jax.random.normal(k1, (VOCAB_SIZE, 32)),
        "out": 0.1 * jax.random.normal(k2, (32, VOCAB_SIZE)),
    }
    options = ocp.CheckpointManagerOptions(max_to_keep=3, create=True)
    # Orbax takes absolute paths only ("Checkpoint path should be absolute"): workdir may not be
    manager = ocp.CheckpointManager(os.path.abspath(f"{workdir}/checkpoints"), options=options)

    # This process's share of every global batch, 2 batches ahead on the devices.
    batches = gp.prefetch_to_device(iter(gp.make_dataset(config)), mesh, size=2)
    params, losses = train(params, batches, steps=3)
    manager.save(  # the data state is the step trained on, not the steps prefetched
        3,
        args=ocp.args.Composite(
            state=ocp.args.StandardSave(params), data=gp.CheckpointSave(batches)
        ),
    )
    manager.wait_until_finished()
    _, uninterrupted = train(params, batches, steps=3)
    batches.close()  # stops the prefetch thread

    # As after a restart (on any number of processes):
    fresh = gp.prefetch_to_device(iter(gp.make_dataset(config)), mesh, size=2)
    restored = manager.restore(
        3,
        args=ocp.args.Composite(
            state=ocp.args.StandardRestore(params), data=gp.CheckpointRestore(fresh)
        ),
    )
    _, resumed = train(restored["state"], fresh, steps=3)
    fresh.close()
    print(f"loss: steps 1-3 {np.round(losses, 4)}, steps 4-6 {np.round(uninterrupted, 4)}")
    print(f"resumed from step 3, identical: {resumed == uninterrupted}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as workdir:
        main(workdir)
