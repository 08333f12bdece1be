# Over 400 lines, one module: one class, the slot model; its parts (rows, mixer, plans, identity)
# share its caches.
"""The slot model: per-process batch ``t`` as a pure function of (config, t, process).

Global batch ``t`` is slots ``[t*B, (t+1)*B)``. Slot ``s`` picks a source exactly like the
window loader's ``MixedStream`` (``splitmix64(seed * 0x100000001 + s)`` against the
cumulative weights) and takes that source's next row (its *occurrence*); process ``p`` of
``P`` holds slots ``t*B + p + k*P``. :class:`PipelineBatches` is the Grain
``RandomAccessDataSource`` whose record ``t*P + p`` is process ``p``'s batch ``t``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from grainpack.corpus.formats import open_corpus
from grainpack.corpus.native import MAX_TOKEN_ID
from grainpack.corpus.pool import ArrayPool
from grainpack.corpus.source import TokenShardSource
from grainpack.corpus.staging import StagedReader, stage_pieces
from grainpack.corpus.summary import block_tokens
from grainpack.curriculum.protocols import (
    adapts_online,
    bind_selector,
    online_revision,
)
from grainpack.index.bestfit import BestFitRows
from grainpack.index.checks import check_int
from grainpack.index.mixing import SlotMixer
from grainpack.index.packed import PackedRows, Part, pack_rows
from grainpack.index.schedule import mean_probabilities
from grainpack.index.slots import first_slot, process_slots, rows_per_process
from grainpack.index.stream import MIN_EPOCH_COST, EpochRows
from grainpack.pipeline import fast
from grainpack.pipeline.config import PipelineConfig
from grainpack.pipeline.expand import compact_rows, expand_rows
from grainpack.pipeline.gather import RowReader
from grainpack.pipeline.packing import best_fit_stream

FORMAT_VERSION = 1
# One Grain element plans about ELEMENT_TOKENS tokens in whole steps, at most ELEMENT_STEPS:
# amortises Grain's per-element cost and the index math's per-call cost over many batches.
ELEMENT_TOKENS, ELEMENT_STEPS = 1 << 23, 512
# Slots are int64: a step whose slots pass this is no step of any run (a corrupt state).
MAX_SLOT = 1 << 62
# With a sequence_selector, reaching epoch e plans epochs 0..e (each shuffles every document):
# refused beyond this many document shuffles (minutes of work) instead of running for hours.
MAX_REPLAY_DOCUMENTS = 1 << 32
# A reader re-checks its element's files before a read when this long passed since the last
# check (a training step may take seconds; an element spans many of them).
CHECK_SECONDS = 0.1


def _check_ids_fit(name: str, path: str, source: TokenShardSource) -> None:
    """Refuses a source whose ids may not fit the int32 batch arrays (they would wrap)."""
    bound = source.id_bound
    if bound <= MAX_TOKEN_ID:
        return
    if source.vocab_size is not None:
        why = f"vocab_size={source.vocab_size:,}"
    else:
        why = f"dtype {source.dtype.name} and no recorded vocab_size or max_token_id"
    raise ValueError(
        f"source {name!r} ({path}) may hold token ids up to {bound:,} ({why}), beyond the int32 "
        "batch arrays (max 2**31 - 1), where they would wrap. Rewrite it with its ids checked: "
        f"grainpack build {path} -o NEW --dtype uint32 [--vocab-size N] (refuses ids >= 2**31)"
    )


def _digest(value: Any) -> int:
    text = json.dumps(value, sort_keys=True)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


class PipelineBatches:
    """Per-process batches of a pipeline, addressable by ``step * process_count + process``.

    Args:
      config: the pipeline.
      process_count: how many processes share each global batch.
      evaluation: if set, the name of one source whose epoch 0 is read exactly once, in
        order, without mixing; batches past the end are padding rows (``loss_mask`` 0).

    Example:
      >>> import tempfile, numpy as np, grainpack as gp
      >>> path = tempfile.mkdtemp() + "/c"
      >>> _ = gp.write_corpus(path, [np.arange(1, 9)] * 3)
      >>> cfg = gp.PipelineConfig(sources={"en": path}, block=4, global_batch_size=2)
      >>> PipelineBatches(cfg, process_count=1)[0]["inputs"].shape
      (2, 4)
    """

    def __init__(
        self, config: PipelineConfig, *, process_count: int = 1, evaluation: str | None = None
    ) -> None:
        if not isinstance(config, PipelineConfig):
            raise TypeError(
                f"expected a gp.PipelineConfig, got {config!r} of type {type(config).__name__}; "
                "build one: gp.PipelineConfig(sources={name: path}, block=..., "
                "global_batch_size=...)"
            )
        config.check_unchanged()
        if not isinstance(process_count, int) or process_count < 1:
            raise ValueError(f"process_count must be a positive int; got {process_count=}")
        self.rows_per_batch = rows_per_process(config.global_batch_size, process_count)
        if evaluation is not None and evaluation not in config.sources:
            raise ValueError(
                f"evaluation source {evaluation!r} is not one of {list(config.sources)}"
            )
        self.config = config
        self.process_count = process_count
        self.evaluation = evaluation
        self._sources: list[TokenShardSource] | None = None
        self._rows: dict[int, EpochRows] = {}
        # Sources on object storage: no window is planned (and read) ahead before the first
        # batch is made, whose own reads come first (see first_batch_served); None: not
        # decided (the sources are opened on first use)
        self._ahead_held: bool | None = None
        self._mixer: SlotMixer | None = None
        self._revision = online_revision(config.sequence_selector, config.weights)
        # (slot, per-source counts before it), known from a restored state: the mixer's count
        # cache starts there, in this process and in every worker it is pickled to.
        self.anchor: tuple[int, tuple[int, ...]] | None = None
        # best_fit in the blocked order: per source, the anchor (grainpack.index.anchors.Anchor
        # fields) of a window a restored state gave, where locating its rows starts (in this
        # process and in every worker it is pickled to).
        self.window_anchors: tuple[tuple[int, ...], ...] | None = None

    def warn_about_sources(self) -> None:
        """Warns (``UserWarning``) of sources recorded as tokenized by different tokenizers
        (their ids mean different things), of a ``boundary_id`` equal to the ``eos_id`` a
        source's build already appended to every document (each would end with two), and of
        documents built from text without an eos and packed without a boundary (nothing
        between them)."""
        cfg, seen = self.config, {}
        for name, src in zip(cfg.sources, self.sources):
            identity = src.tokenizer
            if identity is None:
                continue
            seen[name] = {k: v for k, v in identity.items() if k not in ("file", "eos_appended")}
            appended = identity.get("eos_appended")
            if not appended and cfg.boundary_id is None and cfg.unit == "documents":
                warnings.warn(
                    f"source {name!r} was built without an end-of-document token (no --eos) "
                    "and boundary_id is None: its documents are packed back to back with "
                    "nothing between them. Set boundary_id (e.g. the tokenizer's eos id) or "
                    "rebuild with --eos",
                    UserWarning,
                    stacklevel=3,
                )
            if appended and cfg.boundary_id == src.eos_id:
                warnings.warn(
                    f"source {name!r} was built with eos {src.eos_id} appended to every "
                    f"document, and boundary_id={cfg.boundary_id} adds another after each: "
                    "documents end with two. Drop boundary_id (the corpus has its boundaries)",
                    UserWarning,
                    stacklevel=3,
                )
        identities = list(seen.values())
        if any(other != identities[0] for other in identities[1:]):
            kinds = ", ".join(
                f"{k!r}: {v.get('kind')} {v.get('sha256', '')[:12]}" for k, v in seen.items()
            )
            warnings.warn(
                f"the sources were tokenized by different tokenizers ({kinds}): the same id "
                "means different tokens in different rows. Build every source with one tokenizer",
                UserWarning,
                stacklevel=3,
            )

    # -- lazily built state (dropped when pickled for Grain workers) --------------------

    @property
    def sources(self) -> list[TokenShardSource]:
        """The opened corpora, in source order."""
        if self._sources is None:
            self._sources = [open_corpus(p) for p in self.config.sources.values()]
            for (name, path), src in zip(self.config.sources.items(), self._sources):
                _check_ids_fit(name, path, src)
                hint = {"boundary_id": " (for example the tokenizer's end-of-text id)"}
                for token in ("boundary_id", "pad_id"):
                    value = getattr(self.config, token)
                    if (
                        src.vocab_size is not None
                        and value is not None
                        and (value >= src.vocab_size)
                    ):
                        raise ValueError(
                            f"{token}={value} is outside the vocabulary of source {name!r} "
                            f"(vocab_size={src.vocab_size}); use an id < {src.vocab_size}"
                            f"{hint.get(token, '')}"
                        )
                if src.num_tokens < self.config.block + 1:
                    raise ValueError(
                        f"source {name!r} holds {src.num_tokens} tokens, fewer than one row of "
                        f"block + 1 = {self.config.block + 1}; use a smaller block or a larger "
                        "corpus"
                    )
        return self._sources

    def rows(self, j: int) -> EpochRows:
        """The row stream of source ``j`` (seeded ``seed + j``, as in ``MixedStream``)."""
        self._check_online()
        rows = self._rows.get(j)
        if rows is None:
            cfg, source = self.config, self.sources[j]
            name = list(cfg.sources)[j]
            selector = bind_selector(cfg.sequence_selector, name, source)
            rows = cfg.order.row_stream(
                source,
                unit=cfg.unit,
                block=cfg.block,
                seed=cfg.seed + j,
                boundary=cfg.boundary_id is not None,
                selector=selector,
                block_tokens=functools.partial(block_tokens, source),
                name=name,
            )
            if cfg.packing == "best_fit":  # the order's documents, packed whole
                rows = best_fit_stream(rows, max_segments=cfg.max_segments)
                if self.window_anchors is not None:
                    rows.add_anchor(tuple(self.window_anchors[j]))
            rows.replay_limit = MAX_REPLAY_DOCUMENTS  # what one plan may replay
            self._rows[j] = rows
            if self._ahead_held is None:
                self._ahead_held = any(getattr(s, "remote", False) for s in self.sources)
            _planning_ahead(rows, not self._ahead_held)
        return rows

    def first_batch_served(self) -> None:
        """Lets the blocked order plan (and read) windows ahead in the background from now
        on: held until a first batch (of a run, or a restore and its check) was made when a
        source is on object storage, so that the requests of the next window do not delay
        those of the first batch."""
        if self._ahead_held is not False:
            self._ahead_held = False
            for rows in self._rows.values():
                _planning_ahead(rows, True)

    @property
    def mixer(self) -> SlotMixer:
        """Slot -> (source, occurrence) for the configured weights (or schedule)."""
        self._check_online()
        if self._mixer is None:
            cfg = self.config
            constant = cfg.constant_probabilities
            if constant is not None:
                mixer = SlotMixer(cfg.seed, constant)
            else:
                mixer = SlotMixer(cfg.seed, cfg.schedule, slots_per_step=cfg.global_batch_size)
            if self.anchor is not None:
                mixer.anchor(*self.anchor)
            self._mixer = mixer
        return self._mixer

    def anchor_at(self, slot: int, counts: Sequence[int]) -> Callable[[], None]:
        """Anchors a fresh :attr:`mixer` at ``slot``, whose per-source ``counts`` a restored
        state gives (trusted: the restore then verifies a batch that depends on them).
        Returns a function that brings back the previous mixer and anchor.

        Raises:
            ValueError: ``counts`` has the wrong length or does not sum to ``slot``.
        """
        previous = self.anchor, self._mixer

        def undo() -> None:
            self.anchor, self._mixer = previous

        self.anchor, self._mixer = (slot, tuple(counts)), None
        try:
            self.mixer  # noqa: B018 (built now, so that bad counts raise here)
        except BaseException:
            undo()
            raise
        return undo

    @property
    def anchors_in_state(self) -> bool:
        """Whether states carry window anchors: best-fit packing in an order whose states
        carry counts (the blocked order), where a window's rows are known by packing it."""
        cfg = self.config
        return cfg.packing == "best_fit" and cfg.order.counts_in_state and self.evaluation is None

    def window_anchors_at(self, step: int) -> tuple[tuple[int, ...], ...] | None:
        """Per source, the anchor of the window holding its first row of batch
        ``step - 1`` (of batch 0 at step 0): what a state of ``step`` carries, so that its
        restore, which recomputes that batch, counts no earlier window. ``None`` unless
        :attr:`anchors_in_state`."""
        if not self.anchors_in_state:
            return None
        counts = self.mixer.counts_before(
            first_slot(max(step - 1, 0), self.config.global_batch_size)
        )
        anchors = []
        for j, count in enumerate(counts.tolist()):
            rows = self.rows(j)
            assert isinstance(rows, BestFitRows)  # anchors_in_state: packing="best_fit"
            anchors.append(tuple(rows.anchor_of(count)))
        return tuple(anchors)

    def anchor_windows(self, anchors: Sequence[Sequence[int]]) -> Callable[[], None]:
        """Starts locating each source's rows from its anchor in ``anchors`` (a restored
        state's, trusted as counts are: the restore then verifies a batch located from
        them); the row streams are built again. Returns a function that brings back the
        previous streams and anchors.

        Raises:
            ValueError: not one anchor per source, or an anchor that is not one of a window.
        """
        names = list(self.config.sources)
        if len(anchors) != len(names):
            raise ValueError(
                f"the state has {len(anchors)} window anchors for the {len(names)} sources "
                f"{names}; one per source is expected"
            )
        previous = self.window_anchors, self._rows

        def undo() -> None:
            self.window_anchors, self._rows = previous

        self.window_anchors, self._rows = tuple(tuple(a) for a in anchors), {}
        try:
            for j in range(len(names)):
                self.rows(j)  # built now, so that a bad anchor raises here
        except BaseException:
            undo()
            raise
        return undo

    def index_bytes(self, copies: int = 1) -> int:
        """Estimated peak bytes of the exact order's index in one process (0 for the
        blocked order, whose memory does not grow with the corpus beyond ``O(N / C)``),
        times ``copies`` (processes planning with their own copy, e.g. Grain workers)."""
        cfg = self.config
        total = sum(
            cfg.order.index_bytes(
                source, unit=cfg.unit, block=cfg.block, selector=cfg.sequence_selector is not None
            )
            for source in self._planned_sources()
        )
        return total * copies

    def _planned_sources(self) -> list[TokenShardSource]:
        """The sources this pipeline plans: all, or the evaluated one."""
        names = list(self.config.sources)
        return [s for n, s in zip(names, self.sources) if self.evaluation in (None, n)]

    def check_index_memory(self, limit: int | None, *, copies: int = 1) -> None:
        """Refuses, before anything is allocated, an exact order that would not fit.

        Args:
          limit: bytes allowed for the index (``None``: a quarter of physical memory).
          copies: processes on this host planning with their own copy (Grain workers).

        Raises:
          ValueError: the estimate exceeds ``limit``; the message names the estimate and
            ``order=gp.BlockedOrder(...)``.
        """
        if limit is not None:
            limit = check_int("max_index_bytes", limit, minimum=0)
        estimate = self.index_bytes(copies)
        if limit is None:
            limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
        if estimate > limit:
            documents = sum(len(s) for s in self._planned_sources())
            raise ValueError(
                f"order='exact' would hold about {_size(estimate)} of index for {documents:,} "
                f"documents ({copies} planning process(es); O(documents) per process), more "
                f"than the limit of {_size(limit)} (a quarter of this "
                "machine's memory unless max_index_bytes is given). Use "
                "order=gp.BlockedOrder(block_docs=4096, window_blocks=256) in PipelineConfig: "
                "its memory is O(documents / block_docs) per process (docs/scale.md)"
            )

    def __getstate__(self) -> dict:
        # The opened sources travel (their shard records are small): a worker reads the
        # files this process opened, and detects if they changed since, rather than opening
        # whatever the paths hold now.
        state = self.__dict__.copy()
        state.update(_rows={}, _mixer=None, _ahead_held=False)  # a worker plans ahead at once
        return state

    # -- identity ---------------------------------------------------------------------

    def _description(self) -> dict[str, Any]:
        description = self.config.description()
        description["corpora"] = [s.fingerprint for s in self.sources]
        description["evaluation"] = self.evaluation
        description["format_version"] = FORMAT_VERSION
        return description

    @functools.cached_property
    def fingerprint(self) -> int:
        """63-bit digest of the config and the corpora's content fingerprints."""
        return _digest(self._description())

    def describe(self) -> dict[str, Any]:
        """The fingerprint's content, readable: the config's description, each source's
        corpus fingerprint by name, the evaluation source and the format version."""
        description = self._description()
        description["corpora"] = dict(zip(description["sources"], description["corpora"]))
        return description

    def __repr__(self) -> str:
        return (
            f"PipelineBatches(fingerprint={self.fingerprint:016x}, "
            f"process_count={self.process_count}, evaluation={self.evaluation!r})"
        )

    # -- Grain RandomAccessDataSource ---------------------------------------------------

    def num_steps(self) -> int | None:
        """Batches per process: unbounded (``None``) for training, finite for evaluation."""
        if self.evaluation is None:
            return None
        j = list(self.config.sources).index(self.evaluation)
        rows = self.rows(j).rows_in_epoch(0)
        return -(-rows // self.config.global_batch_size)

    def __len__(self) -> int:
        steps = self.num_steps()
        return sys.maxsize if steps is None else steps * self.process_count

    def __getitem__(self, record: int) -> dict[str, np.ndarray]:
        if not isinstance(record, int | np.integer) or isinstance(record, bool):
            raise TypeError(f"record must be an int; got {type(record).__name__}")
        if not 0 <= record < len(self):
            raise IndexError(f"record {record} outside [0, {len(self)})")
        step, process = divmod(int(record), self.process_count)
        return self.batch(step, process)

    # -- the slot model -------------------------------------------------------------------

    def batch(
        self, step: int, process_index: int, process_count: int | None = None
    ) -> dict[str, np.ndarray]:
        """Process ``process_index``'s rows of global batch ``step``, in the config's layout."""
        packed = self.packed_steps(step, process_index, process_count)
        tokens = self.reader(packed).read(0, packed.num_rows)
        if self.config.layout == "compact":
            return compact_rows(packed, tokens)
        return expand_rows(packed, tokens)

    @functools.cached_property
    def adapts_online(self) -> bool:
        """Whether the selector or the weights learn from the training loop's rewards."""
        cfg = self.config
        return adapts_online(cfg.sequence_selector) or adapts_online(cfg.weights)

    def forget_plans(self) -> Callable[[], None]:
        """Drops the cached epoch plans, mixer counts and anchors, computed again when next
        needed: an online schedule restored to an earlier state (a rollback in the same
        process) may decide rounds they were computed from otherwise. Returns a function
        that brings them back."""
        kept = self._rows, self._mixer, self.anchor, self.window_anchors, self._revision

        def undo() -> None:
            self._rows, self._mixer, self.anchor, self.window_anchors, self._revision = kept

        self._rows, self._mixer, self.anchor, self.window_anchors = {}, None, None, None
        cfg = self.config
        self._revision = online_revision(cfg.sequence_selector, cfg.weights)
        return undo

    def _check_online(self) -> None:
        """:meth:`forget_plans` if an online schedule's ``load_state_dict`` replaced rounds
        it had decided since the caches were filled."""
        cfg = self.config
        if self.adapts_online and self._revision != online_revision(
            cfg.sequence_selector, cfg.weights
        ):
            self.forget_plans()

    @functools.cached_property
    def steps_per_element(self) -> int:
        """Steps per Grain element of :func:`~grainpack.make_dataset`: as many as hold about
        ``ELEMENT_TOKENS`` tokens (1 to ``ELEMENT_STEPS``), or 1 with a selector or weights that
        adapt online (a bandit decides epochs or stages from the training loop's rewards, so
        batches are not planned ahead of its updates)."""
        if self.adapts_online:
            return 1
        rows = self.rows_per_batch
        return min(max(1, ELEMENT_TOKENS // (rows * (self.config.block + 1))), ELEMENT_STEPS)

    def check_step(self, step: int, steps: int = 1) -> None:
        """Raises ``ValueError``, stating the cost, if planning steps ``[step, step + steps)``
        needs more work than grainpack allows: slots past ``MAX_SLOT``, counting more than
        ``MAX_SLOTS`` earlier slots (several sources), or replaying more than
        ``MAX_REPLAY_DOCUMENTS`` document shuffles of epochs this process has not planned
        yet (a ``sequence_selector``; a run plans one epoch at a time, a restore all those
        before its step). Costs nothing else: it runs before any counting, with a lower
        bound of the epochs (each holds at most the rows of all documents); the planning
        itself stops at the same limit.
        """
        size = self.config.global_batch_size
        if first_slot(step + steps, size) > MAX_SLOT:
            raise ValueError(
                f"step {step:,} is no step of any run: its slots pass 2**62 (global batch "
                f"{size}); check the step (a corrupt checkpoint state?)"
            )
        if self.evaluation is not None:
            return
        self.mixer.check_cost(first_slot(step, size))
        names = list(self.config.sources)
        used = None
        for j in range(len(names)):
            rows = self.rows(j)
            if rows.rows_per_epoch is not None:  # epochs located by a division
                continue
            used = self._rows_bound(step, steps) if used is None else used
            epochs = used[j] / rows.most_rows_per_epoch  # epochs reached, at least
            work = (epochs - rows.planned_epochs) * rows.epoch_cost
            if work > MAX_REPLAY_DOCUMENTS:
                raise ValueError(
                    f"step {step:,} lies in about epoch {epochs:,.0f} of source {names[j]!r}, "
                    "whose sequence_selector decides each epoch's documents: reaching it plans "
                    f"the epochs before it, at least {work:,.0f} document shuffles (each epoch "
                    f"counts at least {MIN_EPOCH_COST:,}; hours); "
                    f"grainpack refuses more than MAX_REPLAY_DOCUMENTS={MAX_REPLAY_DOCUMENTS:,}. "
                    "Check the step (a corrupt checkpoint state?)"
                )

    def _rows_bound(self, step: int, steps: int) -> list[float]:
        """Expected rows per source in steps ``[0, step + steps)``, bounded from above for a
        schedule: the expectation before ``step`` plus every slot of the planned steps."""
        size = self.config.global_batch_size
        constant = self.config.constant_probabilities
        if constant is not None:
            return [first_slot(step + steps, size) * p for p in constant]
        before = mean_probabilities(self.config.schedule, 0, step)
        return [first_slot(step, size) * p + first_slot(steps, size) for p in before]

    def packed_steps(
        self, step: int, process_index: int, process_count: int | None = None, *, steps: int = 1
    ) -> PackedRows:
        """The row layout and read table (:func:`~grainpack.index.packed.pack_rows`; index math, no
        tokens) of steps ``[step, step + steps)`` of one process, rows in step order: one
        mixer draw and one span lookup per (source, epoch) for all of them."""
        self.check_step(step, steps)
        count = self.process_count if process_count is None else process_count
        size = self.config.global_batch_size
        slots = process_slots(step, steps, size, process_index, count)
        offsets = slots - first_slot(step, size)
        if self.evaluation is not None:
            j = list(self.config.sources).index(self.evaluation)
            valid = np.flatnonzero(slots < self.rows(j).rows_in_epoch(0))
            sources = np.full(len(valid), j)
            epochs, rows = np.zeros(len(valid), dtype=np.int64), slots[valid]
        else:
            chosen, occurrences = self.mixer.draws(
                first_slot(step, size), first_slot(step + steps, size)
            )
            valid = np.arange(len(slots))
            sources, occurrences = chosen[offsets], occurrences[offsets]
            epochs, rows = np.empty_like(occurrences), np.empty_like(occurrences)
            for j in np.unique(sources).tolist():
                sel = sources == j
                epochs[sel], rows[sel] = self.rows(j).locate(occurrences[sel])
        return self._pack(len(slots), valid, sources, epochs, rows)

    def _pack(
        self,
        num_rows: int,
        destination: np.ndarray,
        sources: np.ndarray,
        epochs: np.ndarray,
        rows: np.ndarray,
    ) -> PackedRows:
        parts = []
        by_source = np.lexsort((epochs, sources))  # by (source, epoch), then slot
        sources, epochs = sources[by_source], epochs[by_source]
        new = (np.diff(sources, prepend=-1) != 0) | (np.diff(epochs, prepend=-1) != 0)
        heads = np.flatnonzero(new)
        for lo, hi in zip(heads.tolist(), [*heads[1:].tolist(), len(by_source)]):
            sel, j, e = by_source[lo:hi], int(sources[lo]), int(epochs[lo])
            spans = self.rows(j).spans(e, rows[sel])
            parts.append(Part(j, e, self.sources[j], spans, destination[sel]))
        cfg = self.config
        return pack_rows(
            parts,
            num_rows=num_rows,
            block=cfg.block,
            boundary=cfg.boundary_id is not None,
            provenance=cfg.provenance,
            compact=cfg.layout == "compact",
        )

    def reader(self, packed: PackedRows) -> CheckedReader | StagedReader:
        """Reads the tokens of rows planned by :meth:`packed_steps` (a :class:`RowReader`
        whose reads re-check the files, see :class:`CheckedReader`; pieces of sources on
        object storage are staged first, see :mod:`grainpack.corpus.staging`)."""
        cfg = self.config
        staged = stage_pieces(packed, self.sources)  # None: no remote source
        reader = RowReader(
            packed if staged is None else staged.packed,
            self.sources if staged is None else staged.readers,
            block=cfg.block,
            pad_id=cfg.pad_id,
            boundary_id=cfg.boundary_id,
            names=list(cfg.sources),
        )
        checked = CheckedReader(reader, self.sources)
        if staged is None:
            return checked
        kernels = fast.kernels()
        return StagedReader(checked, staged, copy=kernels and kernels.copy_pieces)


class CheckedReader:
    """A :class:`RowReader` (its attributes pass through) whose reads first check that the
    files of its element did not change (:meth:`TokenShardSource.check_files`), when more than
    ``CHECK_SECONDS`` passed since the last check; the reader's constructor checked them.

    A file replaced or rewritten in place while an element is consumed then raises a
    ``CorpusError`` naming it; a truncated one already raises at the next read of it (the
    reader compares the mapped files' sizes before every read).
    """

    def __init__(self, reader: RowReader, sources: list[TokenShardSource]) -> None:
        self.reader, self.sources = reader, sources
        self.checked = time.monotonic()

    def __getattr__(self, name: str) -> object:  # only for names this class lacks
        return getattr(self.__dict__["reader"], name)

    def read(self, first: int, stop: int, *, pool: ArrayPool | None = None) -> np.ndarray:
        """:meth:`RowReader.read`, after the check."""
        now = time.monotonic()
        if now - self.checked > CHECK_SECONDS:
            for j, shards in self.reader.shards.items():
                self.sources[j].check_files(shards)
            self.checked = now
        return self.reader.read(first, stop, pool=pool)


def _planning_ahead(rows: EpochRows, on: bool) -> None:
    """Turns planning windows ahead on or off in a blocked order's row stream (also one
    that best fit packs); other streams plan nothing ahead."""
    inner = getattr(rows, "inner", rows)
    if hasattr(inner, "plan_ahead"):
        inner.plan_ahead = on


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"
