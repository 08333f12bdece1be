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
import sys

import numpy as np

from grainpack.corpus.formats import open_corpus
from grainpack.corpus.source import TokenShardSource
from grainpack.curriculum.protocols import adapts_online, bind_selector
from grainpack.index.layout import PackedRows, Part, pack_rows
from grainpack.index.mixing import SlotMixer
from grainpack.index.slots import process_slots
from grainpack.index.stream import SourceRows
from grainpack.pipeline.config import PipelineConfig
from grainpack.pipeline.expand import compact_rows, expand_rows
from grainpack.pipeline.gather import RowReader

FORMAT_VERSION = 1
# One Grain element plans about ELEMENT_TOKENS tokens in whole steps, at most ELEMENT_STEPS:
# amortises Grain's per-element cost and the index math's per-call cost over many batches.
ELEMENT_TOKENS, ELEMENT_STEPS = 1 << 23, 512


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
        if not isinstance(process_count, int) or process_count < 1:
            raise ValueError(f"process_count must be a positive int; got {process_count=}")
        if config.global_batch_size % process_count:
            raise ValueError(
                f"global_batch_size={config.global_batch_size} is not divisible by "
                f"process_count={process_count}; every process must hold the same number of "
                "rows: choose a global batch size that is a multiple of the process count"
            )
        if evaluation is not None and evaluation not in config.sources:
            raise ValueError(
                f"evaluation source {evaluation!r} is not one of {list(config.sources)}"
            )
        self.config = config
        self.process_count = process_count
        self.evaluation = evaluation
        self._sources: list[TokenShardSource] | None = None
        self._rows: dict[int, SourceRows] = {}
        self._mixer: SlotMixer | None = None

    # -- lazily built state (dropped when pickled for Grain workers) --------------------

    @property
    def sources(self) -> list[TokenShardSource]:
        """The opened corpora, in source order."""
        if self._sources is None:
            self._sources = [open_corpus(p) for p in self.config.sources.values()]
            for name, src in zip(self.config.sources, self._sources):
                for token in ("boundary_id", "pad_id"):
                    value = getattr(self.config, token)
                    if (
                        src.vocab_size is not None
                        and value is not None
                        and (value >= src.vocab_size)
                    ):
                        raise ValueError(
                            f"{token}={value} is outside source {name!r}'s vocabulary "
                            f"(vocab_size={src.vocab_size}); use an id < {src.vocab_size} "
                            "(for example the tokenizer's end-of-text id)"
                        )
                if src.num_tokens < self.config.block + 1:
                    raise ValueError(
                        f"source {name!r} holds {src.num_tokens} tokens, fewer than one row of "
                        f"block + 1 = {self.config.block + 1}; use a smaller block or a larger "
                        "corpus"
                    )
        return self._sources

    def rows(self, j: int) -> SourceRows:
        """The row stream of source ``j`` (seeded ``seed + j``, as in ``MixedStream``)."""
        rows = self._rows.get(j)
        if rows is None:
            cfg = self.config
            selector = bind_selector(cfg.sequence_selector, list(cfg.sources)[j], self.sources[j])
            rows = SourceRows(
                self.sources[j].lengths,
                unit=cfg.unit,
                block=cfg.block,
                seed=cfg.seed + j,
                boundary=cfg.boundary_id is not None,
                selector=selector,
            )
            self._rows[j] = rows
        return rows

    @property
    def mixer(self) -> SlotMixer:
        """Slot -> (source, occurrence) for the configured weights."""
        if self._mixer is None:
            self._mixer = SlotMixer(self.config.seed, self.config.probabilities)
        return self._mixer

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.update(_sources=None, _rows={}, _mixer=None)
        return state

    # -- identity ---------------------------------------------------------------------

    @functools.cached_property
    def fingerprint(self) -> int:
        """63-bit digest of the config and the corpora's content fingerprints."""
        description = self.config.description()
        description["corpora"] = [s.fingerprint for s in self.sources]
        description["evaluation"] = self.evaluation
        description["format_version"] = FORMAT_VERSION
        text = json.dumps(description, sort_keys=True)
        return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1

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

    @property
    def rows_per_batch(self) -> int:
        """Rows of one per-process batch: ``global_batch_size // process_count``."""
        return self.config.global_batch_size // self.process_count

    @functools.cached_property
    def steps_per_element(self) -> int:
        """Steps per Grain element of :func:`~grainpack.make_dataset`: as many as hold about
        ``ELEMENT_TOKENS`` tokens (1 to ``ELEMENT_STEPS``), or 1 with a selector that adapts
        online (a bandit decides epochs from the training loop's rewards, so batches are not
        planned ahead of its updates)."""
        if adapts_online(self.config.sequence_selector):
            return 1
        rows = self.rows_per_batch
        return min(max(1, ELEMENT_TOKENS // (rows * (self.config.block + 1))), ELEMENT_STEPS)

    def packed_steps(
        self, step: int, process_index: int, process_count: int | None = None, *, steps: int = 1
    ) -> PackedRows:
        """The row layout and read table (:func:`~grainpack.index.layout.pack_rows`; index math, no
        tokens) of steps ``[step, step + steps)`` of one process, rows in step order: one
        mixer draw and one span lookup per (source, epoch) for all of them."""
        count = self.process_count if process_count is None else process_count
        size = self.config.global_batch_size
        slots = process_slots(step, steps, size, process_index, count)
        offsets = slots - step * size
        if self.evaluation is not None:
            j = list(self.config.sources).index(self.evaluation)
            valid = np.flatnonzero(slots < self.rows(j).rows_in_epoch(0))
            sources = np.full(len(valid), j)
            epochs, rows = np.zeros(len(valid), dtype=np.int64), slots[valid]
        else:
            chosen, occurrences = self.mixer.draws(step * size, (step + steps) * size)
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
        for j, e in sorted(set(zip(sources.tolist(), epochs.tolist()))):
            sel = (sources == j) & (epochs == e)
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

    def reader(self, packed: PackedRows) -> RowReader:
        """Reads the tokens of rows planned by :meth:`packed_steps`."""
        cfg = self.config
        return RowReader(
            packed, self.sources, block=cfg.block, pad_id=cfg.pad_id, boundary_id=cfg.boundary_id
        )
