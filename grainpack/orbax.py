"""Orbax glue: save the data iterator next to the train state, restore on any process count.

``CheckpointSave``/``CheckpointRestore`` are Grain's Orbax arguments with one change on
restore: when the checkpoint was written by another number of processes (no
``process_{i}-of-{n}.json`` for this layout), process ``i`` reads the state of process
``i % n_saved``. A :func:`grainpack.make_dataset` state is the global step, identical on
every process, so the run continues with the same global batches (elastic restore); so
does an iterator that only wraps one (``make_dataset(...).map(f)``). Other states
(``grain.DataLoader``, ``mp_prefetch`` over other datasets) still need the same process
count, and get a clear ``ValueError`` otherwise.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import grain
import orbax.checkpoint as ocp
from etils import epath

from grainpack.pipeline.agreement import agree_on_outcome
from grainpack.pipeline.dataset import (
    CHANGES_NAMED,
    ConfigMismatchError,
    describe_changes,
    process_index_and_count,
)
from grainpack.pipeline.state import is_pipeline_state

_STATE_FILE = re.compile(r"process_(\d+)-of-(\d+)\.json")


def saved_state_file(
    directory: epath.PathLike, process_index: int, process_count: int
) -> epath.Path:
    """The state file process ``process_index`` of ``process_count`` should restore from.

    Its own ``process_{i}-of-{n}.json`` when the checkpoint was written by ``process_count``
    processes, else ``process_{i % n_saved}-of-{n_saved}.json`` of the saved layout.
    """
    directory = epath.Path(directory)
    own = directory / f"process_{process_index}-of-{process_count}.json"
    if own.exists():
        return own
    counts = {int(m.group(2)) for f in directory.iterdir() if (m := _STATE_FILE.fullmatch(f.name))}
    if len(counts) != 1:
        raise ValueError(
            f"{directory} holds no single set of process_*-of-*.json iterator states "
            f"(process counts found: {sorted(counts)}); expected the data item of a checkpoint "
            "saved with grainpack.CheckpointSave or grain.checkpoint.CheckpointSave"
        )
    saved = counts.pop()
    return directory / f"process_{process_index % saved}-of-{saved}.json"


def _saved_description(directory: epath.Path, state_file: str) -> dict[str, Any] | None:
    """The description saved beside ``state_file`` (``process_i-of-n.json``), if any."""
    path = directory / state_file.replace("process_", "pipeline_", 1)
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return saved if isinstance(saved, dict) else None


def _described(item: Any) -> Any:
    """``item``, or the iterator it wraps (Grain's parent, as in ``make_dataset(...).map(f)``
    or :func:`grainpack.prefetch_to_device`), that has a ``describe`` method; None if none."""
    while item is not None and not hasattr(item, "describe"):
        parents = getattr(item, "_parents", ())
        item = parents[0] if len(parents) == 1 else None
    return item


class DataCheckpointHandler(grain.checkpoint.CheckpointHandler):
    """Grain's Orbax handler whose restore also accepts another process count.

    Saving is Grain's (one ``process_{i}-of-{n}.json`` per process). On restore, a state
    that is a grainpack global step is read from ``process_{i % n}-of-{n}.json`` when this
    run has another process count; any other state (``grain.DataLoader``, ``mp_prefetch``
    or other nested Grain states) must be restored on the process count that saved it.
    """

    def save(self, directory: epath.Path, item: Any = None, args: Any = None) -> None:
        """Grain's save, plus ``pipeline_{i}-of-{n}.json``: what the fingerprint covers
        (:meth:`~grainpack.PipelineIterator.describe`), for iterators that describe it."""
        item = item if item is not None else args.item
        super().save(directory, item=item)
        described = _described(item)
        if described is not None:
            index, count = process_index_and_count()
            text = json.dumps(described.describe(), indent=1, sort_keys=True)
            (epath.Path(directory) / f"pipeline_{index}-of-{count}.json").write_text(text)

    def restore(self, directory: epath.Path, item: Any = None, args: Any = None) -> Any:
        """Sets ``item`` to the state saved for this process (see the class). With several
        JAX processes, every process then tells the others whether its restore succeeded,
        before Orbax's barrier: a restore refused on one process is refused on all of them
        (:class:`~grainpack.pipeline.agreement.ProcessesDisagreeError` on the others), and
        none waits for a process that stopped."""
        item = item if item is not None else args.item
        index, count = process_index_and_count()
        if count == 1:
            self._restore(epath.Path(directory), item, index, count)
        else:
            try:
                self._restore(epath.Path(directory), item, index, count)
            except Exception as err:
                agree_on_outcome("restore", err)
                raise
            agree_on_outcome("restore", None)
        if hasattr(item, "start_prefetch"):
            item.start_prefetch()
        return item

    def _restore(self, directory: epath.Path, item: Any, index: int, count: int) -> None:
        path = saved_state_file(directory, index, count)
        try:
            text = path.read_text()
            state = json.loads(text) if isinstance(item, grain.DatasetIterator) else text.encode()
        except OSError as err:
            raise ValueError(
                f"{path}: cannot read the data iterator's state ({err}); expected a readable "
                "file written by grainpack.CheckpointSave: check the path and its permissions"
            ) from err
        except (ValueError, RecursionError) as err:  # JSON and UTF-8 decoding, deep nesting
            raise ValueError(
                f"{path}: the data iterator's state is damaged ({type(err).__name__}: {err}); "
                "expected the JSON written by grainpack.CheckpointSave: restore an earlier "
                "checkpoint step"
            ) from err
        if path.name != f"process_{index}-of-{count}.json" and not is_pipeline_state(state):
            raise ValueError(
                f"{directory} was saved by another number of processes than {count} (found "
                f"{path.name}); only grainpack.make_dataset iterators restore elastically. A "
                "grain.DataLoader or multi-worker Grain state is tied to its process count: "
                "restore it with the original number of processes"
            )
        try:
            item.set_state(state)
        except ConfigMismatchError as err:
            saved = _saved_description(epath.Path(directory), path.name)
            described = _described(item)
            if saved is None or described is None:
                raise
            try:
                changes = describe_changes(saved, described.describe())
            except (TypeError, AttributeError):  # a damaged description: the mismatch alone
                raise err from None
            said = str(err).removesuffix(CHANGES_NAMED).rstrip()  # said once: what changed
            raise ConfigMismatchError(f"{said} What changed: {changes}.") from None


@ocp.args.register_with_handler(DataCheckpointHandler, for_save=True)
@dataclasses.dataclass
class CheckpointSave(ocp.args.CheckpointArgs):
    """Orbax argument saving a Grain/grainpack iterator: ``process_{i}-of-{n}.json`` per
    process, and beside it what a grainpack iterator's fingerprint covers, so that a refused
    restore names what changed. Save it next to the train state
    (``ocp.args.Composite(state=ocp.args.StandardSave(params), data=CheckpointSave(it))``).

    Args:
      item: the iterator (``make_dataset``'s, one wrapping it, or any Grain iterator).

    Example:
      >>> import tempfile, numpy as np, orbax.checkpoint as ocp, grainpack as gp
      >>> d = tempfile.mkdtemp()
      >>> _ = gp.write_corpus(f"{d}/c", [np.arange(1, 40)] * 4)
      >>> cfg = gp.PipelineConfig(sources={"c": f"{d}/c"}, block=8, global_batch_size=2)
      >>> it = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
      >>> _ = next(it)
      >>> with ocp.CheckpointManager(f"{d}/ckpt") as mngr:
      ...     _ = mngr.save(1, args=ocp.args.Composite(data=gp.CheckpointSave(it)))
      >>> sorted(p.name for p in epath.Path(f"{d}/ckpt/1/data").glob("*.json"))
      ['pipeline_0-of-1.json', 'process_0-of-1.json']
    """

    item: Any

    def __post_init__(self) -> None:
        _check_item(self, "get_state")


@ocp.args.register_with_handler(DataCheckpointHandler, for_restore=True)
@dataclasses.dataclass
class CheckpointRestore(ocp.args.CheckpointArgs):
    """Orbax argument restoring an iterator in place: a ``make_dataset`` iterator on any
    process and worker count (elastic), other Grain iterators on the counts that saved them.
    A state from another config or corpus is refused, naming what changed.

    Args:
      item: the iterator to set (a fresh one of the same config).

    Example:
      >>> import tempfile, numpy as np, orbax.checkpoint as ocp, grainpack as gp
      >>> d = tempfile.mkdtemp()
      >>> _ = gp.write_corpus(f"{d}/c", [np.arange(1, 40)] * 4)
      >>> cfg = gp.PipelineConfig(sources={"c": f"{d}/c"}, block=8, global_batch_size=2)
      >>> it = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
      >>> _ = next(it)
      >>> with ocp.CheckpointManager(f"{d}/ckpt") as mngr:
      ...     _ = mngr.save(1, args=ocp.args.Composite(data=gp.CheckpointSave(it)))
      ...     mngr.wait_until_finished()
      ...     fresh = iter(gp.make_dataset(cfg, process_index=1, process_count=2))
      ...     _ = mngr.restore(1, args=ocp.args.Composite(data=gp.CheckpointRestore(fresh)))
      >>> fresh.get_state()["step"], fresh.get_state()["process_index"]
      (1, 1)
    """

    item: Any

    def __post_init__(self) -> None:
        _check_item(self, "set_state")


def _check_item(args: Any, method: str) -> None:
    if not callable(getattr(args.item, method, None)):
        raise TypeError(
            f"{type(args).__name__} takes the data iterator (from grainpack.make_dataset or "
            f"a Grain iterator, with {method}); got {type(args.item).__name__}"
        )
