"""``IteratorState``: the data state of a checkpoint (the global step plus identity checks).

On disk (Grain's JSON, Orbax) it is a plain dict of ints (and lists of them), in one of
three versions:

* version 1: ``version``, ``step``, ``process_index``, ``process_count``, ``fingerprint``
  (of the config and corpora) and ``digest`` (of the last batch, 0 before the first);
* version 2 (an order whose ``counts_in_state``, the blocked order): the same and
  ``counts``, the rows each source gave before the step, so that a restore does not count
  every earlier slot;
* version 3 (``packing="best_fit"`` in such an order): the same and ``anchors``, per source
  the five ints of a :class:`~grainpack.index.anchors.Anchor` (epoch, window, occurrence,
  row in the epoch, real tokens before) of the window holding its first row of the batch
  before the step, so that a restore counts one window, not every earlier one.

Every version ends with ``check``, a 63-bit digest of every other key and value
(:func:`state_check`), written since grainpack checks states; a state without it (written
before) is still read. :meth:`IteratorState.from_dict` reads all of them and refuses
anything else with what it found; :func:`check_damage` names the field whose value is not
the one the check value was computed over.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from grainpack.index.checks import is_int
from grainpack.pipeline.batches import FORMAT_VERSION, MAX_SLOT

STATE_KEYS = ("version", "step", "process_index", "process_count", "fingerprint", "digest")
COUNTED_STATE_KEYS = (*STATE_KEYS, "counts")
COUNTED_STATE_VERSION = 2
ANCHORED_STATE_KEYS = (*COUNTED_STATE_KEYS, "anchors")
ANCHORED_STATE_VERSION = 3
ANCHOR_FIELDS = 5  # grainpack.index.anchors.Anchor: epoch, window, occurrence, row, tokens
CHECK_KEY = "check"  # optional in both versions: states written before it are still read


@dataclasses.dataclass(frozen=True)
class IteratorState:
    """A :class:`~grainpack.pipeline.dataset.PipelineIterator`'s state, typed.

    Attributes:
      step: the global step of the next batch.
      process_index: the process that saved it.
      process_count: the processes of the run that saved it.
      fingerprint: 63-bit digest of the config and the corpora.
      digest: 63-bit digest of the batch before ``step`` (0 at step 0).
      counts: rows each source gave before ``step`` (versions 2 and 3), or ``None``.
      anchors: per source, the anchor of a window (version 3), or ``None``.

    Example:
      >>> state = IteratorState(step=3, process_index=0, process_count=1, fingerprint=7,
      ...                       digest=9, counts=(2, 4))
      >>> state.to_dict()
      {'version': 2, 'step': 3, 'process_index': 0, 'process_count': 1, 'fingerprint': 7, \
'digest': 9, 'counts': [2, 4], 'check': 7793399207393886477}
      >>> IteratorState.from_dict(state.to_dict()) == state
      True
    """

    step: int
    process_index: int
    process_count: int
    fingerprint: int
    digest: int
    counts: tuple[int, ...] | None = None
    anchors: tuple[tuple[int, ...], ...] | None = None

    @property
    def version(self) -> int:
        """3 with ``anchors``, 2 with ``counts`` only, else 1."""
        if self.anchors is not None:
            return ANCHORED_STATE_VERSION
        return FORMAT_VERSION if self.counts is None else COUNTED_STATE_VERSION

    def to_dict(self) -> dict[str, Any]:
        """The on-disk form: a JSON-able dict of plain ints (keys in the order written since
        version 1, then ``counts``, ``anchors``, then ``check`` over all of them)."""
        state: dict[str, Any] = {"version": self.version}
        state.update((k, getattr(self, k)) for k in STATE_KEYS[1:])
        if self.counts is not None:
            state["counts"] = list(self.counts)
        if self.anchors is not None:
            state["anchors"] = [list(a) for a in self.anchors]
        state[CHECK_KEY] = state_check(state)
        return state

    @classmethod
    def from_dict(cls, state: Any) -> IteratorState:
        """Reads a state of any version, as :meth:`to_dict` (or an older release) wrote it.

        The check value is not compared here (:func:`check_damage` does): a restore first
        runs the checks that say what a wrong field means (another config, another batch).

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
                f"'counts' from version {COUNTED_STATE_VERSION} on, 'anchors' in version "
                f"{ANCHORED_STATE_VERSION}, and '{CHECK_KEY}'), got {state!r}"
            )
        counts = state.get("counts", [])
        bad = [k for k in (*STATE_KEYS, CHECK_KEY) if k in state and not is_int(state[k])]
        if not isinstance(counts, list) or not all(is_int(c) and c >= 0 for c in counts):
            bad.append("counts")
        anchors = state.get("anchors", [])
        if "anchors" in state and "counts" not in bad and not _anchors_fit(anchors, counts):
            bad.append("anchors")
        if bad or state["step"] < 0 or not 0 <= state["process_index"] < state["process_count"]:
            raise ValueError(
                f"corrupt grainpack iterator state {dict(state)!r}: every value must be an int "
                "(counts: a list of ints >= 0; anchors: one list of "
                f"{ANCHOR_FIELDS} ints >= 0 per count, its row <= its occurrence <= the "
                "count), step >= 0 and 0 <= process_index < process_count"
                f" (wrong: {', '.join(bad) or 'step or process_index'})"
            )
        expected = FORMAT_VERSION
        if "counts" in state:
            expected = ANCHORED_STATE_VERSION if "anchors" in state else COUNTED_STATE_VERSION
        known = {FORMAT_VERSION, COUNTED_STATE_VERSION, ANCHORED_STATE_VERSION}
        if state["version"] in known - {expected}:
            keys = {
                FORMAT_VERSION: "no 'counts'",
                COUNTED_STATE_VERSION: "'counts' and no 'anchors'",
                ANCHORED_STATE_VERSION: "'counts' and 'anchors'",
            }
            raise ValueError(
                f"corrupt grainpack iterator state {dict(state)!r}: a version "
                f"{state['version']} state has {keys[state['version']]}, this one "
                f"{keys[expected]} (the state was edited or cut); restore from the state "
                "get_state returned"
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
            anchors=tuple(tuple(int(v) for v in a) for a in anchors)
            if "anchors" in state
            else None,
        )


def _anchors_fit(anchors: Any, counts: list[int]) -> bool:
    """Whether ``anchors`` is one list of ``ANCHOR_FIELDS`` ints >= 0 per count, its row
    at most its occurrence, its occurrence at most the count (the rows the source gave)."""
    return (
        isinstance(anchors, list)
        and len(anchors) == len(counts)
        and all(
            isinstance(a, list)
            and len(a) == ANCHOR_FIELDS
            and all(is_int(v) and v >= 0 for v in a)
            and a[3] <= a[2] <= c
            for a, c in zip(anchors, counts)
        )
    )


def is_pipeline_state(state: Any) -> bool:
    """Whether ``state`` has the keys of a :func:`grainpack.make_dataset` iterator state (a
    global step, of either version, with or without its check value;
    :meth:`IteratorState.from_dict` checks the values).

    Also true for iterators that only wrap one, such as ``make_dataset(...).map(f)``, whose
    state is their parent's.
    """
    if not isinstance(state, Mapping):
        return False
    keys = set(state) - {CHECK_KEY}
    return keys in (set(STATE_KEYS), set(COUNTED_STATE_KEYS), set(ANCHORED_STATE_KEYS))


def state_check(state: Mapping[str, Any]) -> int:
    """63-bit check value of a state: a BLAKE2b digest (personalised for grainpack states)
    of every key and value but ``check`` itself (sorted by key, as compact JSON), so that
    any change of any field, or a key added or removed, changes it.

    Example:
      >>> state_check({"version": 1, "step": 0})
      1043778985396766300
    """
    fields = sorted((k, v) for k, v in state.items() if k != CHECK_KEY)
    text = json.dumps(fields, separators=(",", ":"))
    h = hashlib.blake2b(text.encode(), digest_size=8, person=b"grainpack.state")
    return int.from_bytes(h.digest(), "little") >> 1


class Damage(NamedTuple):
    """What :func:`check_damage` found: the field (``None``: not known) and in words."""

    field: str | None
    message: str


def check_damage(state: Mapping[str, Any], names: Sequence[str] = ()) -> Damage | None:
    """``None`` when ``state`` has no check value (written before it) or its check value is
    that of its fields; else what is wrong, naming the field where one bit or one decimal
    digit of one value (or of the check value) explains the difference, and the value it
    had when it was saved. ``names`` names the sources of ``counts`` and ``anchors``.

    Example:
      >>> saved = IteratorState(3, 0, 1, 7, 9).to_dict()
      >>> check_damage(saved) is None
      True
      >>> check_damage({**saved, "step": 2}).message
      "field 'step' is 2, but the check value was computed with 3 (one bit or digit changed)"
    """
    expected = state.get(CHECK_KEY)
    if expected is None or state_check(state) == expected:
        return None
    for field, index, value in _values(state):
        for candidate in _near(value):
            edited = dict(state)
            if index is None:
                edited[field] = candidate
            elif field == "counts":
                edited[field] = [*state[field][:index], candidate, *state[field][index + 1 :]]
            else:  # anchors[source][k]
                anchors = [list(a) for a in state[field]]
                anchors[index // ANCHOR_FIELDS][index % ANCHOR_FIELDS] = candidate
                edited[field] = anchors
            if state_check(edited) != expected:
                continue
            where = repr(field)
            if field == "counts":
                name = names[index] if index < len(names) else index
                where = f"{field}[{index}] (source {name!r})"
            elif index is not None:
                j, k = divmod(index, ANCHOR_FIELDS)
                name = names[j] if j < len(names) else j
                where = f"{field}[{j}][{k}] ({_ANCHOR_NAMES[k]} of source {name!r})"
            return Damage(
                field,
                f"field {where} is {value}, but the check value was computed with {candidate} "
                "(one bit or digit changed)",
            )
    if state_check(state) in set(_near(expected)):
        return Damage(
            CHECK_KEY, f"field {CHECK_KEY!r} itself changed (one bit or digit); the others agree"
        )
    return Damage(
        None,
        f"the check value {expected} is not that of the other fields: more than one bit or "
        "digit of them (or of the check value) changed, so which field is not known",
    )


_ANCHOR_NAMES = ("epoch", "window", "occurrence", "row", "tokens")


def _values(state: Mapping[str, Any]) -> Iterator[tuple[str, int | None, int]]:
    """``(field, index in counts, in the flattened anchors or None, value)`` for every int
    of ``state`` but the check."""
    for key in (*STATE_KEYS, "counts", "anchors"):
        if key == "counts":
            for i, c in enumerate(state.get("counts", [])):
                yield key, i, c
        elif key == "anchors":
            for j, anchor in enumerate(state.get("anchors", [])):
                for k, v in enumerate(anchor):
                    yield key, j * ANCHOR_FIELDS + k, v
        else:
            yield key, None, state[key]


def _near(value: int) -> Iterator[int]:
    """Every int one bit (of 64) or one decimal digit away from ``value`` (>= 0)."""
    for bit in range(64):
        yield value ^ (1 << bit)
    text = str(value)
    for i, old in enumerate(text):
        for digit in "0123456789":
            if digit != old:
                yield int(text[:i] + digit + text[i + 1 :])
