"""JAX glue: per-process batches -> global ``jax.Array``s on a mesh.

``jax.make_array_from_process_local_data`` lays process ``p``'s rows contiguously, so row
``p * (B // P) + k`` of a global array holds slot ``t*B + p + k*P``. The set of rows is
the global batch ``t``; :func:`grainpack.slot_order` restores slot order when it matters.
Imported lazily: ``import grainpack`` does not import JAX.
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


def process_index_and_count(
    process_index: int | None = None, process_count: int | None = None
) -> tuple[int, int]:
    """This process's place among all: ``jax.process_index()``/``jax.process_count()`` for
    what is not given, validated (the one place grainpack asks JAX).

    Example:
      >>> process_index_and_count(1, 4)
      (1, 4)
    """
    if process_index is None or process_count is None:
        process_index = jax.process_index() if process_index is None else process_index
        process_count = jax.process_count() if process_count is None else process_count
    for name, value in (("process_index", process_index), ("process_count", process_count)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int; got {value!r}")
    if not 0 <= process_index < process_count:
        raise ValueError(
            f"need 0 <= process_index < process_count; got {process_index=}, {process_count=}"
        )
    return process_index, process_count
