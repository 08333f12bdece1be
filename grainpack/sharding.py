"""Per-process batches -> global ``jax.Array``s, and the slot order of their rows.

``jax.make_array_from_process_local_data`` lays process ``p``'s rows contiguously, so row
``p * (B // P) + k`` of a global array holds slot ``t*B + p + k*P``. The set of rows is
the global batch ``t``; :func:`slot_order` restores slot order when it matters.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding


def make_global_batch(
    batch: Mapping[str, np.ndarray], sharding: Sharding | Mesh
) -> dict[str, jax.Array]:
    """Assembles this process's batch into global arrays sharded along the batch axis.

    Args:
      batch: this process's batch (for example from :func:`grainpack.make_dataset`).
      sharding: a ``jax.sharding.Sharding`` for the arrays, or a ``Mesh`` whose axes all
        shard the batch dimension.

    Returns:
      The same keys as ``jax.Array``s of shape ``(global_batch_size, block)``.

    Example:
      >>> import jax, numpy as np
      >>> mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
      >>> out = make_global_batch({"inputs": np.zeros((2, 4), np.int32)}, mesh)
      >>> out["inputs"].shape == (2 * jax.process_count(), 4)
      True
    """
    if isinstance(sharding, Mesh):
        sharding = NamedSharding(sharding, PartitionSpec(sharding.axis_names))
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}


def slot_order(global_batch_size: int, process_count: int) -> np.ndarray:
    """Permutation taking global-array rows (process-major) to slot order.

    Example:
      >>> slot_order(4, 2).tolist()  # rows [p0k0, p0k1, p1k0, p1k1] -> slots 0, 1, 2, 3
      [0, 2, 1, 3]
    """
    per = global_batch_size // process_count
    return np.arange(global_batch_size).reshape(process_count, per).T.reshape(-1)
