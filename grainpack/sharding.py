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
      The same keys as ``jax.Array``s of shape ``(global_batch_size, ...)``.

    Example:
      >>> import jax, numpy as np
      >>> mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
      >>> out = make_global_batch({"inputs": np.zeros((2, 4), np.int32)}, mesh)
      >>> out["inputs"].shape == (2 * jax.process_count(), 4)
      True
    """
    if isinstance(sharding, Mesh):
        sharding = NamedSharding(sharding, PartitionSpec(sharding.axis_names))
    elif not isinstance(sharding, Sharding):
        raise TypeError(
            f"sharding must be a jax.sharding.Sharding or Mesh; got {type(sharding).__name__}: "
            "build one with jax.sharding.Mesh(np.array(jax.devices()), ('data',))"
        )
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}


def slot_order(global_batch_size: int, process_count: int) -> np.ndarray:
    """Permutation taking global-array rows (process-major) to slot order.

    ``global_rows[slot_order(B, P)]`` lists the rows of a global batch in slot order. It
    assumes the batch axis of the global array lists processes in order, as a mesh over
    ``jax.devices()`` does (devices sorted by process).

    Args:
      global_batch_size: rows per global batch, ``B``.
      process_count: processes sharing it, ``P`` (``B % P == 0``).

    Returns:
      int64 array of length ``B``.

    Example:
      >>> slot_order(4, 2).tolist()  # rows [p0k0, p0k1, p1k0, p1k1] -> slots 0, 1, 2, 3
      [0, 2, 1, 3]
    """
    for name, value in (("global_batch_size", global_batch_size), ("process_count", process_count)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise TypeError(f"{name} must be an int; got {type(value).__name__}: {value!r}")
        if value < 1:
            raise ValueError(f"{name} must be >= 1; got {name}={value!r}")
    if global_batch_size % process_count:
        raise ValueError(
            f"global_batch_size={global_batch_size} is not divisible by "
            f"{process_count=}: every process holds global_batch_size // process_count rows"
        )
    per = global_batch_size // process_count
    return np.arange(global_batch_size, dtype=np.int64).reshape(process_count, per).T.reshape(-1)
