"""``IteratorState``: the data state of a checkpoint (the global step plus identity checks).

On disk (Grain's JSON, Orbax) it is a plain dict of ints, in one of two versions:

* version 1: ``version``, ``step``, ``process_index``, ``process_count``, ``fingerprint``
  (of the config and corpora) and ``digest`` (of the last batch, 0 before the first);
* version 2 (an order whose ``counts_in_state``, the blocked order): the same and
  ``counts``, the rows each source gave before the step, so that a restore does not count
  every earlier slot.

:meth:`IteratorState.from_dict` reads both and refuses anything else with what it found.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from grainpack.index.checks import is_int
from grainpack.pipeline.batches import FORMAT_VERSION, MAX_SLOT

STATE_KEYS = ("version", "step", "process_index", "process_count", "fingerprint", "digest")
COUNTED_STATE_KEYS = (*STATE_KEYS, "counts")
COUNTED_STATE_VERSION = 2


@dataclasses.dataclass(frozen=True)
class IteratorState:
    """A :class:`~grainpack.pipeline.dataset.PipelineIterator`'s state, typed.

    Attributes:
      step: the global step of the next batch.
      process_index: the process that saved it.
      process_count: the processes of the run that saved it.
      fingerprint: 63-bit digest of the config and the corpora.
      digest: 63-bit digest of the batch before ``step`` (0 at step 0).
      counts: rows each source gave before ``step`` (version 2), or ``None`` (version 1).

    Example:
      >>> state = IteratorState(step=3, process_index=0, process_count=1, fingerprint=7,
      ...                       digest=9, counts=(2, 4))
      >>> state.to_dict()
      {'version': 2, 'step': 3, 'process_index': 0, 'process_count': 1, 'fingerprint': 7, \
'digest': 9, 'counts': [2, 4]}
      >>> IteratorState.from_dict(state.to_dict()) == state
      True
    """

    step: int
    process_index: int
    process_count: int
    fingerprint: int
    digest: int
    counts: tuple[int, ...] | None = None

    @property
    def version(self) -> int:
        """2 with ``counts``, else 1."""
        return FORMAT_VERSION if self.counts is None else COUNTED_STATE_VERSION

    def to_dict(self) -> dict[str, Any]:
        """The on-disk form: a JSON-able dict of plain ints (keys in the order written since
        version 1, ``counts`` last)."""
        state: dict[str, Any] = {"version": self.version}
        state.update((k, getattr(self, k)) for k in STATE_KEYS[1:])
        if self.counts is not None:
            state["counts"] = list(self.counts)
        return state

    @classmethod
    def from_dict(cls, state: Any) -> IteratorState:
        """Reads a state of either version, as :meth:`to_dict` (or an older release) wrote it.

        Raises:
          TypeError: ``state`` is a string (saved JSON not parsed).
          ValueError: ``state`` is not a grainpack state, is corrupt (wrong types, a step below
            0, a process outside the count, counts no run reaches, a version that disagrees
            with its keys) or is of a version this release does not read.
        """
        if isinstance(state, str | bytes):
            raise TypeError(
                f"set_state takes the dict get_state returned, got {type(state).__name__} "
                f"{state[:60]!r}; parse saved JSON first: set_state(json.loads(text))"
            )
        if not is_pipeline_state(state):
            raise ValueError(
                f"not a grainpack iterator state: expected keys {sorted(STATE_KEYS)} (and "
                f"'counts' from version {COUNTED_STATE_VERSION} on), got {state!r}"
            )
        counts = state.get("counts", [])
        bad = [k for k in STATE_KEYS if not is_int(state[k])]
        if not isinstance(counts, list) or not all(is_int(c) and c >= 0 for c in counts):
            bad.append("counts")
        if bad or state["step"] < 0 or not 0 <= state["process_index"] < state["process_count"]:
            raise ValueError(
                f"corrupt grainpack iterator state {dict(state)!r}: every value must be an int "
                "(counts: a list of ints >= 0), step >= 0 and 0 <= process_index < process_count"
            )
        expected = COUNTED_STATE_VERSION if "counts" in state else FORMAT_VERSION
        if state["version"] in {FORMAT_VERSION, COUNTED_STATE_VERSION} - {expected}:
            has = "has" if state["version"] == COUNTED_STATE_VERSION else "has no"
            raise ValueError(
                f"corrupt grainpack iterator state {dict(state)!r}: a version "
                f"{state['version']} state {has} 'counts' (the state was edited or cut); "
                "restore from the state get_state returned"
            )
        if state["version"] != expected:
            raise ValueError(
                f"iterator state version {state['version']} is not {expected}; it was "
                "written by another grainpack release"
            )
        if any(c > MAX_SLOT for c in counts):  # before any int64 math on them
            raise ValueError(
                f"corrupt grainpack iterator state: counts {counts} pass 2**62 slots, which no "
                "run reaches (the state was edited or damaged); restore the state the "
                "checkpoint saved"
            )
        return cls(
            **{k: int(state[k]) for k in STATE_KEYS[1:]},
            counts=tuple(int(c) for c in counts) if "counts" in state else None,
        )


def is_pipeline_state(state: Any) -> bool:
    """Whether ``state`` has the keys of a :func:`grainpack.make_dataset` iterator state (a
    global step, of either version; :meth:`IteratorState.from_dict` checks the values).

    Also true for iterators that only wrap one, such as ``make_dataset(...).map(f)``, whose
    state is their parent's.
    """
    return isinstance(state, Mapping) and set(state) in (set(STATE_KEYS), set(COUNTED_STATE_KEYS))
