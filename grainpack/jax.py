"""JAX glue: per-process batches -> global ``jax.Array``s on a mesh, compact batches
expanded on the accelerator, and batches moved to the devices ahead of the training step.

``jax.make_array_from_process_local_data`` lays process ``p``'s rows contiguously, so row
``p * (B // P) + k`` of a global array holds slot ``t*B + p + k*P``. The set of rows is
the global batch ``t``; :func:`grainpack.index.slot_order` restores slot order when it matters.
Imported lazily: ``import grainpack`` does not import JAX.
"""

from __future__ import annotations

import functools
import json
import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding

from grainpack.index.checks import check_bool
from grainpack.pipeline.expand import COMPACT_KEYS


def make_global_batch(
    batch: Mapping[str, np.ndarray], sharding: Sharding | Mesh
) -> dict[str, jax.Array]:
    """Assembles this process's batch into global arrays sharded along the batch axis.

    Args:
      batch: this process's batch (for example from :func:`grainpack.make_dataset`).
      sharding: a ``jax.sharding.Sharding`` for the arrays (a ``NamedSharding`` whose spec
        names more axes than an array has is cut to that array's axes), or a ``Mesh``
        whose axes all shard the batch dimension.

    Returns:
      The same keys as ``jax.Array``s of shape ``(global_batch_size, ...)``.

    Example:
      >>> import jax, numpy as np
      >>> mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
      >>> out = make_global_batch({"inputs": np.zeros((2, 4), np.int32)}, mesh)
      >>> out["inputs"].shape == (2 * jax.process_count(), 4)
      True
    """
    if not isinstance(batch, Mapping):
        raise TypeError(
            f"batch must be a mapping of names to arrays (a grainpack batch); got "
            f"{type(batch).__name__}: pass the dict that next() on the iterator returns"
        )
    rows = {k: np.shape(v)[0] if np.ndim(v) else None for k, v in batch.items()}
    if not rows or None in rows.values() or len(set(rows.values())) > 1:
        raise ValueError(
            "a batch's arrays all hold this process's rows on their first axis (the same "
            f"number); got first-axis sizes {rows or 'of no array'}: pass the dict that next() "
            "on the iterator returns, or one whose arrays were sliced alike"
        )
    if isinstance(sharding, Mesh):
        sharding = NamedSharding(sharding, PartitionSpec(sharding.axis_names))
    elif not isinstance(sharding, Sharding):
        raise TypeError(
            f"sharding must be a jax.sharding.Sharding or Mesh; got {type(sharding).__name__}: "
            "build one with jax.sharding.Mesh(np.array(jax.devices()), ('data',))"
        )
    return {
        k: jax.make_array_from_process_local_data(_cut(sharding, np.ndim(v)), v)
        for k, v in batch.items()
    }


def _cut(sharding: Sharding, ndim: int) -> Sharding:
    """``sharding`` for an array of ``ndim`` axes: a named spec over more axes (rows of
    ``(batch, block)`` arrays) is cut to them, for the per-row ``filled``, ``source`` and
    ``epoch`` arrays of the same batch."""
    if isinstance(sharding, NamedSharding) and len(sharding.spec) > ndim:
        spec = PartitionSpec(*sharding.spec[:ndim])
        return NamedSharding(sharding.mesh, spec, memory_kind=sharding.memory_kind)
    return sharding


@functools.partial(jax.jit, static_argnames="maxtext_keys")
def expand(batch: Mapping[str, Any], *, maxtext_keys: bool = False) -> dict[str, jax.Array]:
    """A compact batch (``PipelineConfig(layout="compact")``) -> the full layout's arrays.

    Jitted: call it inside the training step, where XLA fuses it with the model's first
    operations. The result equals the full layout's ``inputs``, ``targets``,
    ``segment_ids``, ``positions`` and ``loss_mask`` (int32) bit for bit, for a process's
    numpy batch or for the global arrays of :func:`make_global_batch` (every row is
    described on its own). Other keys (provenance) are passed through.

    Args:
      batch: ``tokens``, ``segment_starts`` and ``filled`` (and any other keys).
      maxtext_keys: name the arrays as MaxText does: ``inputs``, ``targets``,
        ``inputs_segmentation``, ``inputs_position``, ``targets_segmentation``
        (``segment_ids * loss_mask``) and ``targets_position``.

    Example:
      >>> batch = {"tokens": np.array([[5, 6, 7, 8], [9, 0, 0, 0]], dtype=np.uint16),
      ...          "segment_starts": np.array([[160], [128]], dtype=np.uint8),
      ...          "filled": np.array([4, 1], dtype=np.int32)}
      >>> out = expand(batch)
      >>> out["inputs"].tolist(), out["segment_ids"].tolist(), out["positions"].tolist()
      ([[5, 6, 7], [9, 0, 0]], [[1, 1, 2], [1, 0, 0]], [[0, 1, 0], [0, 0, 0]])
      >>> out["loss_mask"].tolist(), sorted(expand(batch, maxtext_keys=True))[:2]
      ([[1, 1, 1], [0, 0, 0]], ['inputs', 'inputs_position'])
    """
    _check_compact(batch)  # at trace time: shapes and dtypes are static
    tokens, filled = batch["tokens"], batch["filled"][:, None]
    block = tokens.shape[1] - 1
    bits = jnp.unpackbits(batch["segment_starts"], axis=1, count=block)
    i = jnp.arange(block, dtype=jnp.int32)
    real = i < filled
    last_start = jax.lax.cummax(jnp.where(bits > 0, i, 0), axis=1)
    segment_ids = jnp.where(real, jnp.cumsum(bits, axis=1, dtype=jnp.int32), 0)
    positions = jnp.where(real, i - last_start, 0)
    loss_mask = (i + 1 < filled).astype(jnp.int32)
    out = {
        "inputs": tokens[:, :-1].astype(jnp.int32),
        "targets": tokens[:, 1:].astype(jnp.int32),
    }
    if check_bool("maxtext_keys", maxtext_keys):
        out.update(
            inputs_segmentation=segment_ids,
            inputs_position=positions,
            targets_segmentation=segment_ids * loss_mask,
            targets_position=positions,
        )
    else:
        out.update(segment_ids=segment_ids, positions=positions, loss_mask=loss_mask)
    return {**{k: v for k, v in batch.items() if k not in COMPACT_KEYS}, **out}


def _check_compact(batch: Any) -> None:
    """Raises unless ``batch`` is a compact batch: its keys, and shapes and dtypes that
    describe the same rows (the shapes are static, so this also runs under ``jit``)."""
    if not isinstance(batch, Mapping):
        raise TypeError(
            f"expand takes a compact batch (a mapping with keys {list(COMPACT_KEYS)}); got "
            f"{type(batch).__name__}"
        )
    missing = [k for k in COMPACT_KEYS if k not in batch]
    if missing:
        raise ValueError(
            f"expand takes a compact batch (keys {list(COMPACT_KEYS)}); {missing} missing from "
            f"{sorted(map(str, batch))}: build the pipeline with PipelineConfig(layout='compact')"
        )
    arrays = [k for k in COMPACT_KEYS if not hasattr(batch[k], "shape")]
    if arrays:
        raise TypeError(f"{arrays} of a compact batch must be arrays (numpy or jax)")
    shapes = {k: tuple(batch[k].shape) for k in COMPACT_KEYS}
    if len(shapes["tokens"]) != 2 or shapes["tokens"][1] < 2:
        raise ValueError(f"tokens must be (rows, block + 1) with block >= 1; got {shapes}")
    rows, width = shapes["tokens"]
    expected = {"segment_starts": (rows, -(-(width - 1) // 8)), "filled": (rows,)}
    if any(shapes[k] != v for k, v in expected.items()):
        raise ValueError(
            f"a compact batch of tokens {shapes['tokens']} has segment_starts of shape "
            f"{expected['segment_starts']} and filled of shape {expected['filled']}; got "
            f"{shapes}: pass the arrays of one compact batch together"
        )
    for key in COMPACT_KEYS:
        dtype = np.dtype(batch[key].dtype)
        if dtype.kind not in "iu" or (key == "segment_starts" and dtype != np.uint8):
            kind = "uint8" if key == "segment_starts" else "an integer dtype"
            raise TypeError(f"{key} must have {kind}; got {dtype}")


def prefetch_to_device(
    iterator: Iterator[Mapping[str, np.ndarray]], sharding: Sharding | Mesh, *, size: int = 2
) -> DevicePrefetch:
    """Keeps ``size`` batches of ``iterator`` already on the devices, as global arrays.

    A background thread calls ``next(iterator)`` and :func:`make_global_batch`, so the
    host-to-device transfer overlaps the training step (as MaxText and Flax do). The
    wrapper's ``get_state``/``set_state`` are the wrapped iterator's at the step the
    consumer is at, not at the step read ahead: a checkpoint taken while ``size`` batches
    are in flight resumes at the next batch the model has not seen. Save it with
    :class:`grainpack.CheckpointSave` like the iterator itself.

    Args:
      iterator: an iterator of per-process batches with ``get_state``/``set_state`` (from
        :func:`grainpack.make_dataset`, or any Grain ``DatasetIterator``).
      sharding: as in :func:`make_global_batch`.
      size: global batches built ahead and kept on the devices (>= 1).

    Returns:
      A Grain ``DatasetIterator`` of ``dict[str, jax.Array]``; call ``close()`` to stop its
      thread (and close ``iterator``).

    Example:
      >>> import tempfile, grainpack as gp
      >>> path = tempfile.mkdtemp() + "/c"
      >>> _ = gp.write_corpus(path, [np.arange(1, 50)] * 4)
      >>> cfg = gp.PipelineConfig(sources={"en": path}, block=8, global_batch_size=2)
      >>> mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
      >>> it = iter(gp.make_dataset(cfg, process_index=0, process_count=jax.process_count()))
      >>> device_batches = prefetch_to_device(it, mesh, size=2)
      >>> _ = next(device_batches)
      >>> device_batches.get_state()["step"]  # 1 consumed, up to 3 read
      1
      >>> device_batches.close()
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be an int >= 1 (batches in flight); got {size=}")
    for method in ("get_state", "set_state"):
        if not callable(getattr(iterator, method, None)):
            raise TypeError(
                f"prefetch_to_device needs an iterator with get_state/set_state (from "
                f"grainpack.make_dataset); got {type(iterator).__name__} without {method}"
            )
    return DevicePrefetch(iterator, sharding, size)


_END = object()  # the wrapped iterator is exhausted


class DevicePrefetch(grain.DatasetIterator):
    """The iterator of :func:`prefetch_to_device`."""

    def __init__(self, iterator: Any, sharding: Sharding | Mesh, size: int) -> None:
        # Grain's parent link: checkpoint code finds the pipeline iterator through it
        super().__init__(iterator if isinstance(iterator, grain.DatasetIterator) else ())
        self._iterator, self._sharding, self._size = iterator, sharding, size
        self._lock = threading.Lock()  # the thread's next() vs. get_state/set_state
        self._queue: queue.Queue | None = None
        self._slots = threading.Semaphore(size)  # batches built and not yet handed out
        self._stop = threading.Event()
        # a grain.DataLoader's state is JSON bytes: handed out as its JSON value, which
        # Grain's checkpoint handler writes for a DatasetIterator such as this one
        self._bytes_state = isinstance(iterator, grain.DataLoaderIterator)
        self._thread: threading.Thread | None = None
        # state of the wrapped iterator after the last batch handed out
        self._consumed: Callable[[], Any] | None = None

    def start_prefetch(self) -> None:
        """Starts the thread (if not running) that reads ``size`` batches ahead."""
        if self._thread is not None:
            return
        state = self._iterator.get_state()
        self._consumed = lambda: state
        self._queue, self._stop = queue.Queue(), threading.Event()
        self._slots = threading.Semaphore(self._size)
        self._thread = threading.Thread(
            target=self._fill,
            args=(self._queue, self._slots, self._stop),
            name="grainpack-prefetch",
            daemon=True,
        )
        self._thread.start()

    def _fill(self, out: queue.Queue, slots: threading.Semaphore, stop: threading.Event) -> None:
        iterator, exact = self._iterator, hasattr(self._iterator, "state_after")
        while True:
            while not slots.acquire(timeout=0.05):  # `size` batches are on the devices
                if stop.is_set():
                    return
            if stop.is_set():
                return
            try:
                with self._lock:
                    batch = next(iterator)
                    if exact:  # the state at this step, computed only if asked for
                        mark = functools.partial(iterator.state_after, iterator.step, batch)
                    else:
                        mark = (lambda state: lambda: state)(iterator.get_state())
                item: Any = (make_global_batch(batch, self._sharding), mark)
            except StopIteration:
                item = _END
            except BaseException as error:  # handed to the consumer, raised by next()
                item = error
            out.put(item)
            if not isinstance(item, tuple):
                return

    def __next__(self) -> dict[str, jax.Array]:
        self.start_prefetch()
        item = self._queue.get()
        self._slots.release()
        if item is _END or isinstance(item, BaseException):
            self._shutdown()
            if item is _END:
                raise StopIteration
            raise item
        arrays, self._consumed = item
        return arrays

    def get_state(self) -> Any:
        if self._thread is None:
            state = self._iterator.get_state()
        else:
            with self._lock:
                state = self._consumed()
        return json.loads(state) if self._bytes_state else state

    def set_state(self, state: Any) -> None:
        self._shutdown()  # at the consumed step, where a refused state leaves it
        if self._bytes_state and not isinstance(state, bytes):
            state = json.dumps(state).encode()
        self._iterator.set_state(state)

    def close(self) -> None:
        """Stops the thread, drops the batches in flight and closes the wrapped iterator."""
        self._shutdown()
        if hasattr(self._iterator, "close"):
            self._iterator.close()

    def __enter__(self) -> DevicePrefetch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _shutdown(self) -> None:
        """Stops the thread, drops the batches in flight and sets the wrapped iterator back
        to the step the consumer is at, where a restart continues."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        state = self._consumed()
        self._thread = self._queue = self._consumed = None
        self._iterator.set_state(state)
