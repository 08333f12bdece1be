# Over 400 lines, one module: the iterator and its restore checks are one contract (state, digest,
# describe).
"""Grain entry points: ``make_dataset``, ``make_data_loader``, ``make_eval_dataset``.

``make_dataset``'s Grain elements are plans of many steps (with Grain workers, and their
tokens), read and expanded into batches by the iterator (:mod:`grainpack.pipeline.elements`).
The iterator's state is the global step plus identity checks, so a checkpoint is an index:
it restores exactly, with any worker count and on any process count (the global batches do
not depend on either).
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import hashlib
import logging
import sys
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import grain
import jax
import numpy as np
from absl import flags

from grainpack.index import mixing
from grainpack.index.checks import check_bool, check_int
from grainpack.index.mixing import SlotMixer
from grainpack.index.slots import first_slot, rows_per_process
from grainpack.pipeline.agreement import ProcessesDisagreeError, exchange, gather_fingerprints
from grainpack.pipeline.batches import PipelineBatches
from grainpack.pipeline.config import PipelineConfig
from grainpack.pipeline.elements import (
    WORKER_OPTIONS,
    ExpandedBatches,
    PlannedSteps,
    reads_in_workers,
)
from grainpack.pipeline.expand import FULL_KEYS, expand_compact
from grainpack.pipeline.state import IteratorState, check_damage
from grainpack.processes import (
    exit_with_parent,
    importing_main_in_a_child,
    interrupts_deferred,
    starting_children,
)

logger = logging.getLogger(__name__)

READ_OPTIONS = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)


DIGEST_KEYS = FULL_KEYS  # the digest is over the full layout's arrays


def process_index_and_count(
    process_index: int | None = None, process_count: int | None = None
) -> tuple[int, int]:
    """This process's place among all: ``jax.process_index()``/``jax.process_count()`` for
    what is not given, validated (the one place grainpack asks JAX).

    Example:
      >>> process_index_and_count(1, 4)
      (1, 4)
    """
    if (process_index is None) != (process_count is None):  # one given, one from JAX
        given, value, ours = (
            ("process_count", process_count, jax.process_count())
            if process_index is None
            else ("process_index", process_index, jax.process_index())
        )
        if value != ours:
            raise ValueError(
                f"{given}={value!r} was given alone, but JAX says this is process "
                f"{jax.process_index()} of {jax.process_count()}: pass both process_index and "
                "process_count, or neither"
            )
    if process_index is None or process_count is None:
        process_index = jax.process_index() if process_index is None else process_index
        process_count = jax.process_count() if process_count is None else process_count
    process_index = check_int("process_index", process_index)
    process_count = check_int("process_count", process_count, minimum=1)
    if not 0 <= process_index < process_count:
        raise ValueError(
            f"need 0 <= process_index < process_count; got {process_index=}, {process_count=}"
        )
    return process_index, process_count


def exit_with_the_consumer(worker_index: int, worker_count: int) -> None:
    """Grain worker init: the worker exits once the process that started it is gone
    (:func:`~grainpack.processes.exit_with_parent`)."""
    exit_with_parent()


def _start_workers(iterator: grain.DatasetIterator) -> None:
    """Starts the worker processes of a new ``mp_prefetch`` iterator with SIGINT blocked
    (:func:`~grainpack.processes.starting_children`), so that a terminal's Ctrl-C during
    their start-up interrupts this process only. Grain 0.2.18 starts each worker from the
    prefetch thread of its per-worker iterator, and a thread takes the signal mask of the
    one that starts it: left to the first ``next``, Grain makes those iterators, and so
    those threads, in a pool of its own whose threads start with SIGINT open. Asking for
    the state first makes the iterators here, and ``start_prefetch`` starts their threads
    here, in the block."""
    with starting_children():
        iterator.get_state()
        iterator.start_prefetch()


def _absl_flags_parsed() -> None:
    """Grain 0.2.18 workers read absl flags and crash when jax is importable and the flags
    are unparsed (google/grain#1355); programs under ``absl.app.run`` have parsed them."""
    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


class ConfigMismatchError(ValueError):
    """A state saved with another pipeline config or corpus (its fingerprint differs)."""


# The end of a ConfigMismatchError's message; grainpack.orbax replaces it with what changed.
CHANGES_NAMED = "(A checkpoint saved with gp.CheckpointSave also names what changed.)"


def batch_digest(batch: Mapping[str, np.ndarray]) -> int:
    """63-bit digest of a batch's model arrays (provenance is not part of it). A compact
    batch is expanded first: digests, and so checkpoints, do not depend on the layout."""
    if "tokens" in batch:
        batch = expand_compact(batch)
    h = hashlib.blake2b(digest_size=8)
    for key in DIGEST_KEYS:
        h.update(key.encode())
        h.update(np.ascontiguousarray(batch[key]).tobytes())
    return int.from_bytes(h.digest(), "little") >> 1


@dataclasses.dataclass(frozen=True)
class _Options:
    process_index: int
    worker_count: int
    worker_buffer_size: int
    ignore_fingerprint_mismatch: bool


class PipelineDataset(grain.IterDataset):
    """This process's batches as a Grain ``IterDataset`` (see :func:`make_dataset`)."""

    def __init__(self, batches: PipelineBatches, options: _Options) -> None:
        super().__init__()
        self.batches = batches
        self.options = options

    def __iter__(self) -> PipelineIterator:
        return PipelineIterator(self)

    def __str__(self) -> str:
        return f"PipelineDataset({self.batches!r}, process_index={self.options.process_index})"


# Open iterators (with or without worker processes): closed at exit, before the interpreter
# tears down the modules that Grain's finalizers and their close() need (an iterator left to
# the teardown prints "Exception ignored" tracebacks).
_OPEN: weakref.WeakSet[PipelineIterator | LoaderIterator] = weakref.WeakSet()


@atexit.register
def _close_open() -> None:
    for iterator in list(_OPEN):
        iterator.close()


class PipelineIterator(grain.DatasetIterator):
    """Iterator whose state is ``{"step": t, ...}`` (JSON of plain ints).

    ``get_state`` also records the process layout, the pipeline fingerprint and a digest of
    the last batch; ``set_state`` refuses a state from another config or corpus (unless
    ``ignore_fingerprint_mismatch``) and recomputes the last batch to check the digest, so
    a silently different resume is detected instead of trained on.

    Args:
      dataset: the :func:`make_dataset` dataset it iterates (``iter(dataset)`` makes one).

    Example:
      >>> import tempfile, numpy as np, grainpack as gp
      >>> path = tempfile.mkdtemp() + "/c"
      >>> _ = gp.write_corpus(path, [np.arange(1, 40)] * 4)
      >>> cfg = gp.PipelineConfig(sources={"c": path}, block=8, global_batch_size=2)
      >>> it = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
      >>> first = [next(it) for _ in range(3)]
      >>> state = it.get_state()
      >>> state["step"], next(it)["inputs"].shape
      (3, (2, 8))
      >>> again = iter(gp.make_dataset(cfg, process_index=0, process_count=1))
      >>> again.set_state(state)  # checks the config, the corpus and batch 2's digest
      >>> again.step
      3
    """

    def __init__(self, dataset: PipelineDataset) -> None:
        super().__init__()
        self._batches = dataset.batches
        self._options = dataset.options
        self._step = 0
        self._inner: Any = None
        self._last: dict[str, np.ndarray] | None = None
        self._registry = _OPEN  # outlives the module global at interpreter exit

    @property
    def step(self) -> int:
        """Global step of the next batch."""
        return self._step

    def _open(self) -> Any:
        if self._inner is None:
            workers = self._options.worker_count
            if workers and self._step and self._batches.config.order.counts_in_state:
                # the workers start from the counts before this step, counted here once
                # (and incrementally: get_state counts them too), not each from slot 0
                slot = first_slot(self._step, self._batches.config.global_batch_size)
                self._batches.anchor_at(slot, self._batches.mixer.counts_before(slot))
                anchors = self._batches.window_anchors_at(self._step)  # best_fit: windows
                if anchors is not None:
                    self._batches.anchor_windows(anchors)
            elements = PlannedSteps(
                self._batches,
                self._step,
                self._options.process_index,
                as_bytes=workers > 0,
                with_tokens=workers > 0
                and reads_in_workers(
                    self._batches, workers=workers, buffer=self._options.worker_buffer_size
                ),
                short_head=any(getattr(s, "remote", False) for s in self._batches.sources),
            )
            ds = grain.MapDataset.source(elements).to_iter_dataset(READ_OPTIONS)
            if workers:
                logger.info(
                    "starting %d Grain worker processes at step %d (%d steps per element)",
                    workers,
                    self._step,
                    self._batches.steps_per_element,
                )
                _absl_flags_parsed()
                ds = grain.experimental.WithOptionsIterDataset(ds, WORKER_OPTIONS)
                ds = ds.mp_prefetch(
                    grain.multiprocessing.MultiprocessingOptions(
                        num_workers=workers,
                        per_worker_buffer_size=self._options.worker_buffer_size,
                    ),
                    worker_init_fn=exit_with_the_consumer,
                )
            grain_iterator = iter(ds)
            if workers:
                _start_workers(grain_iterator)
            self._inner = ExpandedBatches(grain_iterator, self._batches)
            self._registry.add(self)
        return self._inner

    def __next__(self) -> dict[str, np.ndarray]:
        step, last = self._step, self._last
        try:
            batch = next(self._open())
            self._step, self._last = step + 1, batch
        except BaseException:
            # An error or an interrupt (a dead worker, Ctrl-C) may leave the readers and
            # workers past this step: start them again here, so nothing is skipped.
            self._step, self._last = step, last
            self.close()
            raise
        return batch

    def start_prefetch(self) -> None:
        """Starts the worker processes (if any) now, so that they plan while, for example,
        the train state is restored; Grain's ``DatasetIterator.start_prefetch``."""
        self._open().start_prefetch()

    def remote_stats(self) -> dict[str, dict[str, float]]:
        """What this process fetched for each source read from object storage, by source
        name (:attr:`grainpack.corpus.remote.RemoteShardSource.stats`: bytes and requests,
        cache hits, ``wait_seconds``, the time ``next()`` waited for the network, requests
        in flight); empty without such sources. Grain workers only plan: their metadata
        reads are theirs, not counted here.

        Example:
          >>> import tempfile, numpy as np, grainpack as gp
          >>> path = tempfile.mkdtemp() + "/c"
          >>> _ = gp.write_corpus(path, [np.arange(1, 40)] * 4)
          >>> cfg = gp.PipelineConfig(sources={"c": path}, block=8, global_batch_size=2)
          >>> iter(gp.make_dataset(cfg)).remote_stats()  # a local corpus
          {}
        """
        names, sources = self._batches.config.sources, self._batches.sources
        return {
            name: source.stats
            for name, source in zip(names, sources)
            if getattr(source, "remote", False)
        }

    def close(self) -> None:
        """Stops the worker processes, if any (the next batch starts them again at the same
        step). Called at interpreter exit for iterators still open. A Ctrl-C meanwhile is
        raised once they have stopped (a second one at once)."""
        self._registry.discard(self)
        inner, self._inner = self._inner, None  # detached first: a Ctrl-C inside close()
        if inner is not None:  # leaves no half-closed iterator to read from
            if isinstance(sys.exc_info()[1], KeyboardInterrupt):
                inner.close()  # closing for a Ctrl-C: another one stops the wait
                return
            # A Ctrl-C waits for the workers to stop, then raises: Grain stops them one
            # by one, and one left running would be stopped in a finalizer, where a
            # Ctrl-C is lost. A second Ctrl-C raises at once.
            with interrupts_deferred(once=True):
                inner.close()

    def __enter__(self) -> PipelineIterator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __reduce__(self) -> Any:
        raise TypeError(
            "a grainpack iterator does not pickle (it holds memory maps and worker "
            "processes); save it.get_state() (JSON) and continue with set_state on a new "
            "iterator, or pickle the dataset (gp.make_dataset(...)) and iterate it again"
        )

    def describe(self) -> dict[str, Any]:
        """What the fingerprint covers, readable (JSON): the config's description and each
        source's corpus fingerprint by name. Saved beside the state by
        :class:`grainpack.CheckpointSave`, so a refused restore says what changed."""
        return self._batches.describe()

    def get_state(self) -> dict[str, Any]:
        """The data state: the global step of the next batch, plus identity checks.

        Unlike most Grain states it restores on any process count and any worker count
        (the global batches do not depend on either), and it is JSON of plain ints:
        ``version``, ``step``, ``process_index``, ``process_count``, ``fingerprint`` (of
        the config and corpora) and ``digest`` (of the last batch, checked on restore).
        With a blocked order it also holds ``counts``, the rows each source gave before the
        step (version 2), and with ``packing="best_fit"`` the anchor of a window per source
        (version 3), so a restore counts one window, not every earlier one. Last comes
        ``check``, a digest of all the other fields, so that a damaged field is refused.
        """
        return self.state_after(self._step, self._last)

    def state_after(
        self, step: int, last: Mapping[str, np.ndarray] | None = None
    ) -> dict[str, Any]:
        """The state :meth:`get_state` returns once batch ``step - 1`` was consumed; ``last``
        is that batch (recomputed from the corpus when not given). Lets a wrapper that reads
        ahead (:func:`grainpack.prefetch_to_device`) checkpoint the step its consumer is at."""
        if last is None and step > 0:
            last = self._batches.batch(step - 1, self._options.process_index)
        batches, counts = self._batches, None
        if batches.config.order.counts_in_state:
            slot = first_slot(step, batches.config.global_batch_size)
            counts = tuple(int(c) for c in batches.mixer.counts_before(slot))
        return IteratorState(
            step=step,
            process_index=self._options.process_index,
            process_count=batches.process_count,
            fingerprint=batches.fingerprint,
            digest=0 if last is None else batch_digest(last),
            counts=counts,
            anchors=batches.window_anchors_at(step),
        ).to_dict()

    def set_state(self, state: dict[str, Any]) -> None:
        """Continues at ``state["step"]``, as saved by :meth:`get_state` on any number of
        processes and workers.

        Raises:
          ValueError: the state is malformed, from another grainpack format version, from
            another config or corpus (unless ``ignore_fingerprint_mismatch``), its step is
            beyond any run, its ``counts`` are not what the slot hash gives (counted from
            slot 0 up to ``RECOUNT_SLOTS``), the last batch before it, recomputed, differs
            from the one trained on, or its check value is not that of its fields (a field
            damaged or edited: named where one bit or digit of it changed). A state written
            before the check value (no ``check``) has every check but that one.
        """
        batches = self._batches
        names = list(batches.config.sources)
        try:
            saved = IteratorState.from_dict(state)  # keys, types and version
        except ValueError as err:
            try:  # which field, where the check value can say it
                damage = check_damage(state, names)
            except (TypeError, ValueError, AttributeError, KeyError):  # not ints: said already
                damage = None
            if damage is None:
                raise
            raise ValueError(
                f"{err} (Its check value does not match either: {damage.message}.)"
            ) from None
        damage = check_damage(state, names)
        if damage is not None and damage.field in {"fingerprint", "process_count", "anchors"}:
            # a damaged field, not another config or layout (or an anchor, whose restore
            # may count far from it): say so (and never accept it)
            raise ValueError(f"corrupt grainpack iterator state: {damage.message}{_RESTORE}")
        try:
            undo = self._check(saved)
        except ValueError as err:
            if damage is None or type(err) not in (ValueError, ConfigMismatchError):
                raise
            raise type(err)(
                f"{err} (Its check value does not match either: {damage.message}.)"
            ) from None
        if damage is not None:  # every field looks right, yet the check value disagrees
            for restore in reversed(undo):
                restore()
            raise ValueError(f"corrupt grainpack iterator state: {damage.message}{_RESTORE}")
        self.close()
        self._step = saved.step
        self._last = None

    def _check(self, saved: IteratorState) -> list[Callable[[], None]]:
        """Checks ``saved`` against this pipeline (raising ``ValueError`` naming the field
        that is wrong) and anchors the mixer at its counts; returns the functions that undo
        that (a refused state leaves the iterator as it was)."""
        batches = self._batches
        same = saved.fingerprint == batches.fingerprint
        if not same and not self._options.ignore_fingerprint_mismatch:
            raise ConfigMismatchError(
                "the checkpoint was made with another pipeline config or corpus (fingerprint "
                f"{saved.fingerprint} in the checkpoint, {batches.fingerprint} now); "
                "resuming would train on different data. Restore with the original config, or "
                "pass ignore_fingerprint_mismatch=True to make_dataset to accept the change. "
                f"{CHANGES_NAMED}"
            )
        size, count = batches.config.global_batch_size, saved.process_count
        if same:
            try:
                rows_per_process(size, count)
            except ValueError:
                raise ValueError(
                    f"corrupt grainpack iterator state: process_count={count} does not divide "
                    f"global_batch_size={size}, so no process of this config saved it (the "
                    "state was edited); restore each process from the state it saved"
                ) from None
        undo = []  # a refused state leaves the iterator as it was
        if batches.adapts_online:  # decided rounds may have been rolled back
            undo.append(batches.forget_plans())
        try:
            if saved.counts is not None and same:  # counted up to the step: no count from 0
                slot = first_slot(saved.step, size)
                try:
                    undo.append(batches.anchor_at(slot, saved.counts))
                except ValueError as err:
                    raise ValueError(f"corrupt grainpack iterator state: {err}") from None
                self._recount(saved.counts, slot)
            if saved.anchors is not None and same:  # best_fit: located from these windows
                try:
                    undo.append(batches.anchor_windows(saved.anchors))
                except ValueError as err:
                    raise ValueError(f"corrupt grainpack iterator state: {err}") from None
            batches.check_step(saved.step)  # a step beyond any run is refused before any work
            if saved.step == 0 and saved.digest:  # get_state gives 0 before the first batch
                raise ValueError(
                    f"corrupt grainpack iterator state: step 0 with digest {saved.digest}, "
                    "which only a state after a batch has: the state was edited or damaged; "
                    "restore the state the checkpoint saved"
                )
            if saved.step and same:
                self._verify(saved)
        except BaseException:
            for restore in reversed(undo):
                restore()
            raise
        return undo

    def _recount(self, counts: tuple[int, ...], slot: int) -> None:
        """Compares a state's per-source ``counts`` at ``slot`` with the slot hash's, counted
        from slot 0 when ``slot <= RECOUNT_SLOTS`` (about a second) and within the bound of
        counting from scratch (``MAX_SLOTS``; beyond either the mixer's anchor has checked each
        count against the slots since the start of its 2**16-slot block only). Runs on every
        process, for every source, whatever the last batch holds.
        """
        if slot > min(RECOUNT_SLOTS, mixing.MAX_SLOTS) or len(counts) < 2:
            return
        cfg = self._batches.config
        constant = cfg.constant_probabilities
        if constant is not None:
            mixer = SlotMixer(cfg.seed, constant)
        else:
            mixer = SlotMixer(cfg.seed, cfg.schedule, slots_per_step=cfg.global_batch_size)
        counted = mixer.counts_before(slot).tolist()
        if counted == list(counts):
            return
        names = list(cfg.sources)
        wrong = "; ".join(
            f"source {names[j]!r}: {c} in the state, {k} by the slot hash"
            for j, (c, k) in enumerate(zip(counts, counted))
            if c != k
        )
        raise ValueError(
            f"corrupt grainpack iterator state: field 'counts' disagrees with the slot hash "
            f"before slot {slot:,} (step {slot // cfg.global_batch_size:,}): {wrong}; the "
            f"state was edited or damaged{_RESTORE}"
        )

    def _verify(self, saved: IteratorState) -> None:
        """Recomputes the batch before ``saved.step`` and compares its digest (a zero
        digest, which only a state before the first batch has, is refused first)."""
        step, p, count = saved.step, saved.process_index, saved.process_count
        if saved.digest == 0:  # get_state gives 0 only before the first batch
            raise ValueError(
                f"resume verification failed: the state's digest is 0, which only a state "
                f"before the first batch has, but its step is {step}: the state was edited or "
                "damaged; restore the state the checkpoint saved"
            )
        logger.info("resume at step %d: recomputing batch %d to verify its digest", step, step - 1)
        if batch_digest(self._batches.batch(step - 1, p, count)) == saved.digest:
            return
        # On failure only: is it another process's batch (of the state's process count, of
        # this run's, or the whole)? Process q of P holds the rows q::P of the global batch.
        whole = self._batches.batch(step - 1, 0, 1)
        if "tokens" in whole:  # compact: rows of the full layout (expansion is per row)
            whole = expand_compact(whole)
        for other in sorted({count, self._batches.process_count, 1}):
            for q in range(other):
                rows = {k: whole[k][q::other] for k in DIGEST_KEYS}
                if (q, other) != (p, count) and batch_digest(rows) == saved.digest:
                    raise _verification_failed(step, (q, other))
        raise _verification_failed(step, None)


_RESTORE = "; restore the state the checkpoint saved (or an earlier checkpoint)"
# A state's counts are compared with a count from slot 0 up to this slot (about a second on
# two cores); beyond it, each against the slots since the start of its 2**16-slot block.
RECOUNT_SLOTS = 1 << 30

# Parts of the fingerprint that a user sets under another name, or leaves out at a default
_FIELD_NAMES = {"probabilities": "weights", "schedule": "weights (a schedule)"}
_DEFAULTS = {"order": "exact"}


def describe_changes(saved: Mapping[str, Any], current: Mapping[str, Any]) -> str:
    """What differs between two :meth:`PipelineIterator.describe` outputs, in words.

    Example:
      >>> a = {"block": 8, "sources": ["en", "fr"], "corpora": {"en": "1", "fr": "2"}}
      >>> describe_changes(a, {**a, "block": 16, "corpora": {"en": "1", "fr": "3"}})
      "block: 8 -> 16; the corpus of source 'fr' changed (its content)"
    """
    words = []
    for key in sorted(set(saved) | set(current)):
        old, new = saved.get(key), current.get(key)
        if old == new:
            continue
        if key == "corpora" and isinstance(old, Mapping) and isinstance(new, Mapping):
            for name in sorted(set(old) | set(new)):
                if name not in old:
                    words.append(f"source {name!r} was added")
                elif name not in new:
                    words.append(f"source {name!r} was removed")
                elif old[name] != new[name]:
                    words.append(f"the corpus of source {name!r} changed (its content)")
        elif key == "sources" and sorted(old or []) == sorted(new or []):
            words.append(
                f"the order of the sources: {old} -> {new} (the order matters: source j is "
                "seeded seed + j and takes slots by the cumulative weights)"
            )
        elif key == "probabilities":  # by source name, each side with its own sources
            old, new = (_named(v, d.get("sources")) for v, d in ((old, saved), (new, current)))
            if old != new:  # else the same weights in another order of the sources
                words.append(f"weights: {old} -> {new}")
        elif key == "packing":  # the default concat is described by no entry
            words.append(f"packing: {_packing(saved)} -> {_packing(current)}")
        elif key == "max_segments":
            if saved.get("packing") == current.get("packing"):  # else said with the packing
                old, new = ("no limit" if v is None else v for v in (old, new))
                words.append(f"max_segments (documents a row): {old} -> {new}")
        elif key != "sources":
            old, new = (_DEFAULTS.get(key) if v is None else v for v in (old, new))
            words.append(f"{_FIELD_NAMES.get(key, key)}: {old} -> {new}")
    return "; ".join(words) or "nothing that is described"


def _packing(described: Mapping[str, Any]) -> str:
    """``concat``, ``best_fit`` or ``best_fit with max_segments=S``, of a description."""
    packing, limit = described.get("packing") or "concat", described.get("max_segments")
    return packing if limit is None else f"{packing} with max_segments={limit}"


def _named(weights: Any, sources: Any) -> Any:
    """``[0.7, 0.3]`` as ``{'en': 0.7, 'fr': 0.3}`` when ``sources`` names each weight."""
    if isinstance(weights, list) and isinstance(sources, list) and len(weights) == len(sources):
        return dict(zip(sources, weights))
    return weights


def _verification_failed(step: int, found: tuple[int, int] | None) -> ValueError:
    if found is not None:
        return ValueError(
            f"resume verification failed: the digest of batch {step - 1} is that of process "
            f"{found[0]} of {found[1]}, not of the process_index/process_count the state names: "
            "its process fields were edited (or it is another process's state); restore each "
            "process from the state it saved"
        )
    return ValueError(
        f"resume verification failed: batch {step - 1} recomputed from the corpus differs from "
        "the batch that was trained on before the checkpoint (same config fingerprint). The "
        "corpus files or grainpack's code changed in a way the fingerprint does not see (do "
        "not continue this run with them), or the state's step or digest was edited"
    )


def _built_alike(
    build: Callable[[], PipelineBatches], process_index: int | None, process_count: int | None
) -> PipelineBatches:
    """``build()``, compared across the processes of a multi-process JAX job when the
    process layout is JAX's (neither ``process_index`` nor ``process_count`` given): every
    process publishes its pipeline's fingerprint and description (or its error) and reads
    the others'; if they differ, every process raises :class:`ProcessesDisagreeError`
    naming the processes that differ from the most common pipeline and what differs."""
    if process_index is not None or process_count is not None or jax.process_count() == 1:
        return build()
    topic = "pipeline"
    try:
        batches = build()
    except Exception as err:
        exchange(topic, {"error": f"{type(err).__name__}: {err}"})
        raise
    values = exchange(topic, {"fingerprint": batches.fingerprint, "describe": batches.describe()})
    if values is None:  # no key-value store: the fingerprints alone, by a collective
        values = [{"fingerprint": f} for f in gather_fingerprints(batches.fingerprint)]
    failed = [(q, v["error"]) for q, v in enumerate(values) if "error" in v]
    if failed:
        q, words = failed[0]
        raise ProcessesDisagreeError(
            f"process {q} of {len(values)} could not build its pipeline ({words}), so this "
            f"process ({jax.process_index()}) stops too, rather than waiting for it"
        )
    prints = [v["fingerprint"] for v in values]
    common = collections.Counter(prints).most_common(1)[0][0]  # ties: the lowest process's
    if all(f == common for f in prints):
        return batches
    ref = prints.index(common)
    differ = []
    for q, v in enumerate(values):
        if v["fingerprint"] != common:
            what = "what is not known (no key-value store)"
            if "describe" in v and "describe" in values[ref]:
                what = describe_changes(values[ref]["describe"], v["describe"])
            differ.append(f"process {q} differs from process {ref} in: {what}")
    raise ProcessesDisagreeError(
        f"the {len(values)} processes of this JAX job built different pipelines, so their "
        f"global batches would not fit together: {'; '.join(differ)}. Every process must "
        "build the same config from the same corpora (fingerprints: "
        f"{', '.join(f'{f:016x}' for f in prints)})"
    )


def make_dataset(
    config: PipelineConfig,
    *,
    process_index: int | None = None,
    process_count: int | None = None,
    worker_count: int = 0,
    worker_buffer_size: int = 2,
    ignore_fingerprint_mismatch: bool = False,
    evaluation: bool | str = False,
    max_index_bytes: int | None = None,
) -> grain.IterDataset:
    """This process's unbounded stream of batches as a ``grain.IterDataset``.

    Batch ``t`` holds slots ``t*B + p + k*P`` of global batch ``t`` (round-robin), as a dict
    of numpy arrays ``inputs``, ``targets``, ``segment_ids``, ``positions`` and
    ``loss_mask`` (int32, shape ``(B // P, block)``), or with ``layout="compact"``
    ``tokens``, ``segment_starts`` and ``filled`` (expanded by :func:`grainpack.expand`).

    Args:
      config: the pipeline.
      process_index: this process (default ``jax.process_index()``); any value lets one
        process produce any other process's batches.
      process_count: processes sharing each global batch (default ``jax.process_count()``).
      worker_count: Grain worker processes producing batches (0: in this process). The
        batches and the checkpoint state do not depend on it.
      worker_buffer_size: Grain elements (plans of about 8M tokens, and those tokens) each
        worker prepares ahead. A worker's elements travel through ``/dev/shm``: a ring of
        up to 12 files of about 16 MiB (uint16 tokens) per worker, and a segment per element
        beyond them; where that would not fit, workers plan only and this process reads.
      ignore_fingerprint_mismatch: accept restoring a state saved with another config.
      evaluation: instead of the training stream, the finite evaluation pass of
        :func:`make_eval_dataset` over the source of that name (``True``: the only source).
      max_index_bytes: ``order="exact"`` only: refuse (``ValueError``, before anything is
        planned) a config whose index would need more bytes per process, counting one copy
        per worker; default a quarter of physical memory.

    Example:
      >>> import tempfile, numpy as np, grainpack as gp
      >>> path = tempfile.mkdtemp() + "/c"
      >>> _ = gp.write_corpus(path, [np.arange(1, 50)] * 4)
      >>> cfg = gp.PipelineConfig(sources={"en": path}, block=8, global_batch_size=4)
      >>> it = iter(gp.make_dataset(cfg, process_index=0, process_count=2))
      >>> next(it)["inputs"].shape, it.get_state()["step"]
      ((2, 8), 1)
    """
    if evaluation is not False:
        source = None if evaluation is True else evaluation
        return make_eval_dataset(
            config,
            source=source,
            process_index=process_index,
            process_count=process_count,
            max_index_bytes=max_index_bytes,
        )
    p, count = process_index_and_count(process_index, process_count)
    if check_int("worker_count", worker_count) and importing_main_in_a_child():
        raise RuntimeError(
            "make_dataset(worker_count>0) ran while a worker process was importing the main "
            "script: workers are spawned, so the script's top level runs again in each of "
            "them. Put the code that builds and iterates datasets under "
            '`if __name__ == "__main__":`'
        )
    check_int("worker_buffer_size", worker_buffer_size, minimum=1)

    def build() -> PipelineBatches:
        batches = PipelineBatches(config, process_count=count)
        batches.sources  # noqa: B018 -- open the corpora now: bad paths fail here, not at next()
        batches.warn_about_sources()
        batches.check_index_memory(max_index_bytes, copies=max(1, worker_count))
        return batches

    batches = _built_alike(build, process_index, process_count)
    ignore = check_bool("ignore_fingerprint_mismatch", ignore_fingerprint_mismatch)
    options = _Options(p, worker_count, worker_buffer_size, ignore)
    return PipelineDataset(batches, options)


def make_eval_dataset(
    config: PipelineConfig,
    *,
    source: str | None = None,
    process_index: int | None = None,
    process_count: int | None = None,
    max_index_bytes: int | None = None,
) -> grain.IterDataset:
    """A finite pass over epoch 0 of one source: every row exactly once, in order.

    Global batch ``t`` holds rows ``[t*B, (t+1)*B)`` of the source's epoch 0 (same plan as
    training: the documents order of ``seed + j``, or the window permutation); the last
    batch is completed with padding rows whose ``loss_mask`` is 0. The rows a process sees
    are the same for any process count, interleaved by slot.

    Args:
      config: the pipeline; ``source`` names the source to evaluate (default: the only one).
      source: a key of ``config.sources``.
      process_index: as in :func:`make_dataset`.
      process_count: as in :func:`make_dataset`.
      max_index_bytes: as in :func:`make_dataset` (for the evaluated source's index).

    Example:
      >>> import tempfile, numpy as np, grainpack as gp
      >>> path = tempfile.mkdtemp() + "/c"
      >>> _ = gp.write_corpus(path, [np.arange(1, 12)] * 3)
      >>> cfg = gp.PipelineConfig(sources={"en": path}, block=4, global_batch_size=4)
      >>> [int(b["loss_mask"].sum()) for b in gp.make_eval_dataset(cfg, process_count=1,
      ...                                                            process_index=0)]
      [16, 10]
    """
    if source is None:
        if len(config.sources) != 1:
            raise ValueError(
                f"config has sources {list(config.sources)}: name the one to evaluate with "
                "source=..."
            )
        source = next(iter(config.sources))
    p, count = process_index_and_count(process_index, process_count)

    def build() -> PipelineBatches:
        batches = PipelineBatches(config, process_count=count, evaluation=source)
        batches.check_index_memory(max_index_bytes)
        return batches

    batches = _built_alike(build, process_index, process_count)
    return grain.MapDataset.source(batches)[p::count].to_iter_dataset(READ_OPTIONS)


@dataclasses.dataclass(frozen=True)
class StepSampler:
    """Grain ``Sampler`` over per-process batch records: index ``g`` -> record ``g``.

    With Grain's process sharding (``ShardOptions(p, P)``) the DataLoader asks process
    ``p`` for indices ``j*P + p``, i.e. batch ``j`` of process ``p`` of a
    :class:`PipelineBatches` built for ``P`` processes.
    """

    num_records: int

    def __len__(self) -> int:
        return self.num_records

    def __getitem__(self, index: int) -> grain.RecordMetadata:
        if not 0 <= index < self.num_records:
            raise IndexError(f"index {index} outside [0, {self.num_records})")
        return grain.RecordMetadata(index=index, record_key=index)


class PipelineLoader(grain.DataLoader):
    """``grain.DataLoader`` whose iterators (:class:`LoaderIterator`) start their worker
    processes with SIGINT blocked and can be closed (see :func:`make_data_loader`)."""

    def __iter__(self) -> LoaderIterator:
        return LoaderIterator(self)


class LoaderIterator(grain.DataLoaderIterator):
    """A :class:`PipelineLoader`'s iterator: Grain's, with its worker processes started
    inside :func:`~grainpack.processes.starting_children` (as :func:`make_dataset`'s are,
    :func:`_start_workers`: a Ctrl-C while they start interrupts this process only, and
    they keep SIGINT blocked, so none prints a traceback), and a :meth:`close` that stops
    them (called at interpreter exit for iterators still open: Grain's iterators left to
    the interpreter's teardown print tracebacks)."""

    def __init__(self, loader: PipelineLoader) -> None:
        # a loader without FlatMap operations validates restored states
        super().__init__(loader, state=None, validate_state=True)
        self._dataset = loader._dataset  # Grain 0.2.18: the pipeline its iterators run
        self._workers = loader.multiprocessing_options.num_workers > 0
        self._closed_at: Any = None  # Grain's state when closed
        self._registry = _OPEN  # outlives the module global at interpreter exit
        self._start()

    def _start(self) -> None:
        if self._workers:
            _start_workers(self._iterator)
        self._registry.add(self)

    def _reopen(self) -> None:
        """After :meth:`close`: Grain's iterator again, where it was closed."""
        if self._iterator is None:
            self._iterator = self._dataset.__iter__()
            self._iterator.set_state(self._closed_at)
            self._start()

    def __next__(self) -> Any:
        self._reopen()
        return super().__next__()

    def get_state(self) -> bytes:
        self._reopen()
        return super().get_state()

    def set_state(self, state: bytes) -> None:
        self._reopen()
        super().set_state(state)

    def close(self) -> None:
        """Stops the worker processes, if any (the next batch starts them again, where
        they were). A Ctrl-C meanwhile is raised once they have stopped (a second one at
        once), as :meth:`PipelineIterator.close` does."""
        self._registry.discard(self)
        inner, self._iterator = self._iterator, None  # dropped here, not at teardown
        if inner is None:
            return
        self._closed_at = inner.get_state()
        if isinstance(sys.exc_info()[1], KeyboardInterrupt):
            inner.close()
            return
        with interrupts_deferred(once=True):
            inner.close()


def make_data_loader(
    config: PipelineConfig,
    *,
    process_index: int | None = None,
    process_count: int | None = None,
    worker_count: int = 0,
    max_index_bytes: int | None = None,
) -> grain.DataLoader:
    """The same batches as :func:`make_dataset`, through ``grain.DataLoader``.

    The data source is a :class:`PipelineBatches` (record ``t*P + p`` = process ``p``'s
    batch ``t``), the sampler a :class:`StepSampler`, and the process split is Grain's own
    ``ShardOptions(process_index, process_count)``. DataLoader checkpoints keep Grain's
    rules: restore with the same worker and process counts (use :func:`make_dataset` for
    elastic restores).

    Args:
      config: The pipeline.
      process_index, process_count: This process and the number of processes (default:
        JAX's, as in :func:`make_dataset`).
      worker_count: Grain worker processes (0: read in this process; a schedule that
        adapts online needs 0).
      max_index_bytes: As in :func:`make_dataset`.

    Returns:
      A ``grain.DataLoader`` yielding this process's batches, step by step. Its iterators
      start their workers with SIGINT blocked (a Ctrl-C interrupts this process only) and
      have a ``close()`` that stops them (:class:`LoaderIterator`).

    Example:
      >>> import tempfile, numpy as np, grainpack as gp
      >>> path = tempfile.mkdtemp() + "/c"
      >>> _ = gp.write_corpus(path, [np.arange(1, 50)] * 4)
      >>> cfg = gp.PipelineConfig(sources={"en": path}, block=8, global_batch_size=4)
      >>> loader = gp.pipeline.make_data_loader(cfg, process_index=1, process_count=2)
      >>> next(iter(loader))["targets"].shape
      (2, 8)
    """
    worker_count = check_int("worker_count", worker_count)
    p, count = process_index_and_count(process_index, process_count)

    def build() -> PipelineBatches:
        batches = PipelineBatches(config, process_count=count)
        batches.check_index_memory(max_index_bytes, copies=max(1, worker_count))
        return batches

    batches = _built_alike(build, process_index, process_count)
    if worker_count and batches.adapts_online:
        raise ValueError(
            "a selector or weights that adapt online (a bandit) need workers that restart "
            "with its new decisions, which grain.DataLoader's cannot: use make_dataset (its "
            "iterator's close() restarts them) or worker_count=0"
        )
    if worker_count:
        _absl_flags_parsed()
    return PipelineLoader(
        data_source=batches,
        sampler=StepSampler(len(batches)),
        shard_options=grain.sharding.ShardOptions(shard_index=p, shard_count=count),
        worker_count=worker_count,
        read_options=READ_OPTIONS,
    )
