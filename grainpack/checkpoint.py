"""Orbax glue: save the data iterator next to the train state, restore on any process count.

``CheckpointSave``/``CheckpointRestore`` are Grain's Orbax arguments with one change on
restore: when the checkpoint was written by another number of processes (no
``process_{i}-of-{n}.json`` for this layout), process ``i`` reads the state of process
``i % n_saved``. A :func:`grainpack.make_dataset` state is the global step, identical on
every process, so the run continues with the same global batches (elastic restore).
Other iterators (``grain.DataLoader``) still need the same process count.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import orbax.checkpoint as ocp
from etils import epath
from grain._src.core import sharding as grain_sharding
from grain._src.python.checkpoint.handler import CheckpointHandler as _GrainHandler

from grainpack.pipeline import PipelineIterator

_STATE_FILE = re.compile(r"process_(\d+)-of-(\d+)\.json")


def saved_state_file(directory: epath.PathLike, process_index: int, process_count: int):
    """The state file process ``process_index`` of ``process_count`` should restore from."""
    directory = epath.Path(directory)
    own = directory / f"process_{process_index}-of-{process_count}.json"
    if own.exists():
        return own
    counts = {int(m.group(2)) for f in directory.iterdir() if (m := _STATE_FILE.fullmatch(f.name))}
    if len(counts) != 1:
        raise ValueError(
            f"{directory} holds no single set of process_*-of-*.json iterator states "
            f"(process counts found: {sorted(counts)})"
        )
    saved = counts.pop()
    return directory / f"process_{process_index % saved}-of-{saved}.json"


class DataCheckpointHandler(_GrainHandler):
    """Grain's Orbax handler whose restore also accepts another process count."""

    def restore(self, directory: epath.Path, item: Any = None, args: Any = None) -> Any:
        item = item or args.item
        index, count = grain_sharding.get_process_index_and_count()
        path = saved_state_file(directory, index, count)
        if path.name != f"process_{index}-of-{count}.json" and not isinstance(
            item, PipelineIterator
        ):
            raise ValueError(
                f"{directory} was saved by another number of processes than {count}; only "
                "grainpack.make_dataset iterators restore elastically (a grain.DataLoader "
                "state is tied to its process count)"
            )
        text = path.read_text()
        item.set_state(json.loads(text) if isinstance(item, PipelineIterator) else text.encode())
        return item


@ocp.args.register_with_handler(DataCheckpointHandler, for_save=True)
@dataclasses.dataclass
class CheckpointSave(ocp.args.CheckpointArgs):
    """Orbax argument saving a Grain/grainpack iterator (one JSON file per process).

    Example:
      ``mngr.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(params),
      data=grainpack.CheckpointSave(iterator)))``
    """

    item: Any


@ocp.args.register_with_handler(DataCheckpointHandler, for_restore=True)
@dataclasses.dataclass
class CheckpointRestore(ocp.args.CheckpointArgs):
    """Orbax argument restoring an iterator in place, elastically for ``make_dataset``."""

    item: Any
